"""Where file dialogs open: the folder this kind of dialog used last, else the user's
Documents (chats) or Downloads (models), never the program's working folder.

One setting per kind (``folder_export``, ``folder_import``, ``folder_gguf``,
``folder_model``) remembers the last folder; a folder that has gone is skipped.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Literal

from PySide6.QtCore import QStandardPaths

from app.settings import Settings

Kind = Literal["export", "import", "gguf", "model"]

_STANDARD = {
    "export": QStandardPaths.StandardLocation.DocumentsLocation,
    "import": QStandardPaths.StandardLocation.DocumentsLocation,
    "gguf": QStandardPaths.StandardLocation.DownloadLocation,
    "model": QStandardPaths.StandardLocation.DownloadLocation,
}


def standard_folder(kind: Kind) -> Path:
    """Documents for chats, Downloads for models; the home folder where those do not exist."""
    location = QStandardPaths.writableLocation(_STANDARD[kind])
    if location and Path(location).is_dir():
        return Path(location)
    return Path.home()


def start_folder(settings: Settings, kind: Kind, preferred: str | Path = "") -> str:
    """The folder a ``kind`` dialog opens in: the last one used, else ``preferred`` (e.g. an
    app's models folder), else :func:`standard_folder`."""
    for candidate in (str(settings.get(f"folder_{kind}") or ""), str(preferred or "")):
        if candidate and Path(candidate).is_dir():
            return candidate
    return str(standard_folder(kind))


def remember(settings: Settings, kind: Kind, path: str | Path) -> None:
    """Remember where ``path`` (a file, or a folder for the "model" kind) was."""
    chosen = Path(path)
    folder = chosen if kind == "model" else chosen.parent
    settings.set(f"folder_{kind}", str(folder))
    with contextlib.suppress(OSError):  # a read-only or full disk: only the convenience
        settings.save()
