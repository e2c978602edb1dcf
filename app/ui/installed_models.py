"""Installed models as the toolbar picker sees them: the library's list, sorted by name.

Thin calls into :class:`app.models.library.ModelLibrary`, which owns the models folder and the
default-model rule.
"""

from __future__ import annotations

from pathlib import Path

from app.models.library import InstalledModel, ModelLibrary


def installed_models(root: Path | None = None) -> list[InstalledModel]:
    """Installed models sorted by display name."""
    return sorted(ModelLibrary(root).list_models(), key=lambda m: m.name.lower())


def default_model(last_used: str = "", root: Path | None = None) -> Path | None:
    """The folder of the library's default model (see ``ModelLibrary.default_model``)."""
    model = ModelLibrary(root).default_model(last_used)
    return model.path if model is not None else None
