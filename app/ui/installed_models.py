"""Installed models as the toolbar picker sees them (plain Python, no Qt).

The list comes from the model store (``app.models.store``), so folders imported in place and
a moved models folder show up too; a bare sub-folder of ``models_dir()`` holding
``genai_config.json`` or ``config.json`` (copied there by hand) counts as well.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.paths import models_dir

MARKERS = ("genai_config.json", "config.json")
MANIFEST = "hearth-manifest.json"


@dataclass(frozen=True)
class InstalledModel:
    path: Path
    name: str


def installed_models(root: Path | None = None) -> list[InstalledModel]:
    """Installed models sorted by display name."""
    from app.models.store import ModelStore

    base = root or models_dir()
    found = {m.path.resolve(): InstalledModel(m.path, m.name)
             for m in ModelStore(base).list_models() if is_model_folder(m.path)}
    for child in sorted(base.iterdir()) if base.is_dir() else []:
        if is_model_folder(child) and child.resolve() not in found:
            found[child.resolve()] = InstalledModel(child, display_name(child))
    return sorted(found.values(), key=lambda m: m.name.lower())


def display_name(folder: Path) -> str:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return folder.name
    for key in ("display_name", "name", "title"):
        value = data.get(key) if isinstance(data, dict) else None
        if isinstance(value, str) and value.strip():
            return value.strip()
    return folder.name


def is_model_folder(path: Path) -> bool:
    return path.is_dir() and any((path / marker).is_file() for marker in MARKERS)


def default_model(last_used: str = "", root: Path | None = None) -> Path | None:
    """The last used model if it is still there, else the first installed one."""
    if last_used and is_model_folder(Path(last_used)):
        return Path(last_used)
    models = installed_models(root)
    return models[0].path if models else None
