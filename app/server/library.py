"""The installed models as a ``ModelSource``: ``hearth serve`` answers for every model in
the library (``ModelLibrary.list_models``), as Ollama and LM Studio do, loading the one a
request names (``ThreadEngineExecutor`` switches, one model in memory at a time)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.models.installed import InstalledModel
from app.models.library import ModelLibrary
from app.server.executor import ServedModel


class LibraryModels:
    """Every installed model, under its library id (its folder's name in the models
    folder); ``load(id)`` is ``loader(path)`` on the executor's thread."""

    def __init__(self, library: ModelLibrary, loader: Callable[[Path], Any]) -> None:
        self.library = library
        self._loader = loader

    def available(self) -> list[ServedModel]:
        return [served_installed(m) for m in self.library.list_models()]

    def load(self, model: str) -> Any:
        return self._loader(self.library.require(model).path)

    def find(self, where: str | Path) -> str | None:
        """The library id of ``where``: an installed model's id, or the folder it loads."""
        if isinstance(where, str) and self.library.get(where) is not None:
            return where
        found = self.library.find_path(where) if Path(where).is_dir() else None
        return found.id if found is not None else None


def served_installed(model: InstalledModel) -> ServedModel:
    try:
        created = int(model.path.stat().st_mtime)
    except OSError:
        created = 0
    return ServedModel(model.id, str(model.path), model.manifest.context_length or 0, created)
