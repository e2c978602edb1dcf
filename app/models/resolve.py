"""A model named on the command line: a folder, or an installed model's id as
``hearth models list`` prints it (as ``ollama run NAME`` does), or its shown name."""

from __future__ import annotations

from pathlib import Path

from app.errors import HearthError

MODEL_ARG_HELP = ("a model id from 'hearth models list' (or its name), or a model folder "
                  "(either ONNX layout)")


def model_folder(text: str | Path) -> Path:
    """The folder ``text`` names: an existing path as it is, else the installed model with
    that id (or, case aside, that name). Raises HearthError saying what is installed."""
    path = Path(text)
    if path.exists():
        return path
    from app.models.library import ModelLibrary

    library = ModelLibrary()
    name = str(text).strip()
    model = library.get(name) if name else None
    if model is None:
        models = library.list_models()
        same = [m for m in models if m.id.lower() == name.lower() or m.name.lower() == name.lower()]
        model = same[0] if len(same) == 1 else None
        if model is None:
            ids = ", ".join(m.id for m in models[:8]) or "none yet"
            raise HearthError(
                f"No model folder and no installed model is called '{name}' "
                f"(installed: {ids}).",
                hint="Run 'hearth models list' for the ids, or give the path of a model folder.",
            )
    return Path(model.path)
