"""Files shipped with Hearth, in a source tree and in a frozen (PyInstaller) bundle alike.

``resources_dir()`` is ``<repo>/resources`` from a source tree and ``<bundle>/_internal/resources``
(``sys._MEIPASS``) in a frozen app: in both cases the folder next to the ``app`` package.

A frozen bundle may carry ready-to-use models under ``resources/models/<id>/`` (the installer
build puts the converted starter model there); ``bundled_models()`` finds them, and
:mod:`app.models.bundled` installs them through the model library.
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.manifest import Manifest

BUNDLED_MODELS_SUBDIR = "models"


def is_frozen() -> bool:
    """True inside a PyInstaller bundle."""
    return bool(getattr(sys, "frozen", False))


def resources_dir() -> Path:
    """The folder holding catalog.json, icons and (frozen) bundled models."""
    return Path(__file__).resolve().parents[1] / "resources"


def resource_path(*parts: str) -> Path:
    """A path inside ``resources_dir()`` (it may not exist)."""
    return resources_dir().joinpath(*parts)


def app_icon_path(size: int = 256) -> Path | None:
    """The PNG app icon closest to ``size`` pixels, or None when the icons are missing."""
    icons = resource_path("icons")
    sizes = sorted(
        int(p.stem.split("-")[1]) for p in icons.glob("hearth-*.png") if p.stem[7:].isdigit()
    )
    if not sizes:
        return None
    best = min(sizes, key=lambda s: (abs(s - size), -s))
    return icons / f"hearth-{best}.png"


def bundled_models_dir() -> Path:
    return resource_path(BUNDLED_MODELS_SUBDIR)


def bundled_models() -> dict[str, Path]:
    """``{model_id: folder}`` of complete models shipped in the bundle (empty from source)."""
    root = bundled_models_dir()
    if not root.is_dir():
        return {}
    return {
        child.name: child
        for child in sorted(root.iterdir())
        if child.is_dir() and Manifest.exists_in(child)
    }
