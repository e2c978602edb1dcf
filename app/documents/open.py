"""The default library: the starter embedder on its own thread over ``documents_db_path()``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app import paths
from app.documents.embedding import EmbeddingThread
from app.documents.index import DocumentIndex
from app.documents.library import DocumentLibrary
from app.documents.starter_embedder import ensure_embedder


class OpenLibrary:
    """A ``DocumentLibrary`` with the resources it owns (close it, or use ``with``)."""

    def __init__(self, db_path: Path | None = None, embedder_folder: Path | None = None, *,
                 checkpoint: Callable[[], None] | None = None) -> None:
        """``checkpoint`` (``JobControl.checkpoint``) runs between the embedder's conversion
        steps and before its session loads: a quit stops the opening there."""
        folder = embedder_folder or ensure_embedder(checkpoint=checkpoint)
        if checkpoint is not None:
            checkpoint()
        self.embedder = EmbeddingThread(folder)
        try:
            self.index = DocumentIndex(db_path or paths.documents_db_path(),
                                       embedder_id=self.embedder.id, dims=self.embedder.dims)
        except BaseException:
            self.embedder.close()
            raise
        self.library = DocumentLibrary(self.index, self.embedder)

    def close(self) -> None:
        self.index.close()
        self.embedder.close()

    def __enter__(self) -> DocumentLibrary:
        return self.library

    def __exit__(self, *exc: object) -> None:
        self.close()
