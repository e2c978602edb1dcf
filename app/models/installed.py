"""An installed model as the library lists it (``ModelLibrary.list_models``).

A module of its own so that the downloader and the GGUF duplicate check can name it without
importing the library, which builds both of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.manifest import Manifest


@dataclass(frozen=True)
class InstalledModel:
    """A model on disk. ``path`` is the folder the engine loads (the linked folder for an
    in-place import); ``size_on_disk`` counts the bytes of that folder."""

    id: str
    name: str
    path: Path
    manifest: Manifest
    size_on_disk: int

    @property
    def source(self) -> dict:
        return self.manifest.source

    @property
    def source_kind(self) -> str:
        return self.manifest.source_kind

    @property
    def linked(self) -> bool:
        """True for a folder registered in place (removing it keeps the files)."""
        return self.source_kind == "local" and bool(self.source.get("path"))

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "name": self.name,
            "path": str(self.path),
            "size_on_disk": self.size_on_disk,
            "source": self.manifest.source,
            "format": self.manifest.format,
            "installed_at": self.manifest.installed_at,
            "context_length": self.manifest.context_length,
            "parameters": self.manifest.parameters,
        }
