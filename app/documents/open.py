"""The default library over ``documents_db_path()``: the starter embedder on its own thread,
and each other embedder a library uses opened on its own thread when first needed (from the
embedders folder, ``app/documents/embedders.py``)."""

from __future__ import annotations

import threading
from pathlib import Path

from app import paths
from app.documents.embedders import DEFAULT_EMBEDDER, EmbedderStore
from app.documents.embedding import EmbeddingThread
from app.documents.index import DocumentIndex
from app.documents.library import DocumentLibrary


class OpenLibrary:
    """A ``DocumentLibrary`` with the resources it owns (close it, or use ``with``)."""

    def __init__(self, db_path: Path | None = None, embedder_folder: Path | None = None, *,
                 store: EmbedderStore | None = None, threads: int | None = None) -> None:
        self.store = store or EmbedderStore()
        self._threads = threads
        self._others: dict[str, EmbeddingThread] = {}
        self._lock = threading.Lock()
        self.embedder = EmbeddingThread(embedder_folder or self.store.folder(
            DEFAULT_EMBEDDER), threads=threads)
        try:
            self.index = DocumentIndex(db_path or paths.documents_db_path(),
                                       embedder_id=self.embedder.id, dims=self.embedder.dims)
        except BaseException:
            self.embedder.close()
            raise
        self.library = DocumentLibrary(self.index, self.embedder, embedders=self._open)

    def _open(self, embedder_id: str) -> EmbeddingThread:
        with self._lock:
            thread = self._others.get(embedder_id)
            if thread is None:
                thread = EmbeddingThread(self.store.folder(embedder_id), threads=self._threads)
                self._others[embedder_id] = thread
            return thread

    def close(self) -> None:
        self.index.close()
        self.embedder.close()
        with self._lock:
            for thread in self._others.values():
                thread.close()
            self._others.clear()

    def __enter__(self) -> DocumentLibrary:
        return self.library

    def __exit__(self, *exc: object) -> None:
        self.close()
