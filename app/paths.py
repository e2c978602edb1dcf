"""Where Hearth keeps user data.

Everything (models, chats, settings, caches) lives under one root: platformdirs' user data
dir, or ``$HEARTH_HOME`` when set. Tests and checks set ``HEARTH_HOME`` to a temp folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import platformdirs

APP_NAME = "Hearth"
HOME_ENV = "HEARTH_HOME"


def data_root() -> Path:
    """The root of all user data; created on first use."""
    override = os.environ.get(HOME_ENV)
    root = Path(override) if override else Path(platformdirs.user_data_dir(APP_NAME, False))
    root.mkdir(parents=True, exist_ok=True)
    return root


def _sub(name: str) -> Path:
    path = data_root() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    """Installed models, one folder each: the "models_folder" setting, else under the root."""
    custom = _stored_setting("models_folder")
    if isinstance(custom, str) and custom.strip():
        path = Path(custom).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        return path
    return _sub("models")


def _stored_setting(key: str) -> object:
    """One value from the settings file, without importing the settings layer."""
    try:
        data = json.loads(settings_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get(key) if isinstance(data, dict) else None


def staging_dir() -> Path:
    """Partial downloads and conversions; moved into models_dir() by atomic rename."""
    return _sub("staging")


def cache_dir() -> Path:
    """Caches that can be deleted at any time (KV snapshots, wheels)."""
    return _sub("cache")


def embedders_dir() -> Path:
    """Text embedding models (ONNX), one folder each (app/documents/starter_embedder.py)."""
    return _sub("embedders")


def documents_db_path() -> Path:
    """The SQLite index of document libraries (app/documents/index.py)."""
    return data_root() / "documents.sqlite3"


def history_db_path() -> Path:
    """The SQLite database holding all conversations."""
    return data_root() / "history.sqlite3"


def settings_path() -> Path:
    return data_root() / "settings.json"
