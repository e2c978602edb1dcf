"""The documents side of the window (UI thread): libraries, the open chat's choice of them,
attachments on a message, and the retriever the chat controller hands each turn.

- **Libraries** are the document index's collections (``DocumentLibrary``, opened on first
  use by ``library_factory``: the starter embedder and onnxruntime are not loaded before
  then). Indexing runs as a job on the ``hearth-documents`` job thread (files done / total
  in ``index_progress``; ``cancel_indexing`` stops it between files, what was indexed stays
  whole).
- **Per chat** the libraries searched are ``ChatLibrariesStore``'s; the unsent new chat keeps
  its choice here until its first message creates the conversation.
- **Attachments**: ``send(text, paths)`` reads each file (``app/documents/attach.py``): a
  file that fits half the context left goes into the prompt whole; a larger one is indexed
  into the chat's own collection first (a job), then the message goes out and passages are
  picked per question.
- **Embedders**: each library keeps the embedder it was made with (``embedders()`` lists
  the starter and the embedder catalog's, ``embedder_store`` downloads a catalog one);
  ``set_embedder`` gives a library another (the page asks first): one job downloads it when
  needed, with its progress in the same row and Cancel, then indexes the library again.
- **The retriever**: ``ChatController.retriever`` is a ``LibraryRetriever`` over the chat's
  libraries (and its own collection, when it has one), or None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, Signal

from app.documents.attach import chat_collection
from app.documents.selection import ChatLibrariesStore
from app.errors import HearthError
from app.jobs import Job, Progress
from app.workers.job_worker import JobRunner

if TYPE_CHECKING:
    from app.chat.parts import Attachment
    from app.documents.embedders import EmbedderChoice, EmbedderStore
    from app.documents.library import DocumentLibrary
    from app.ui.controller import ChatController

INDEX_JOB = "index-library"


class OpenedLibrary(Protocol):
    """What ``library_factory`` gives: the library and what closes its resources
    (``app/documents/open.py`` ``OpenLibrary``)."""

    library: DocumentLibrary

    def close(self) -> None: ...


LibraryFactory = Callable[[], OpenedLibrary]


def open_default_library() -> OpenedLibrary:
    from app.documents.open import OpenLibrary

    return OpenLibrary(store=default_embedder_store())


def default_embedder_store() -> EmbedderStore:
    """The embedders folder, downloading from the "Model download server" setting."""
    import os

    from app.documents.embedders import EmbedderStore
    from app.settings import Settings

    endpoint = Settings().get("hub_endpoint") or os.environ.get("HF_ENDPOINT") or None
    return EmbedderStore(endpoint=endpoint)


class DocumentsController(QObject):
    """Signals:
    libraries_changed(): a library was made, indexed or removed.
    index_progress(object Progress | None): the indexing job's progress; None: it ended.
    index_finished(str sentence): what the indexing did (files indexed, problems).
    choice_changed(object frozenset[str]): the open chat's libraries changed.
    """

    libraries_changed = Signal()
    index_progress = Signal(object)
    index_finished = Signal(str)
    choice_changed = Signal(object)

    def __init__(self, chat: ChatController, *, library_factory: LibraryFactory | None = None,
                 choices: ChatLibrariesStore | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.chat = chat
        self.library_factory = library_factory or open_default_library
        self.choices = choices or ChatLibrariesStore()
        self._library: DocumentLibrary | None = None
        self._opened: OpenedLibrary | None = None
        self._store: EmbedderStore | None = None
        self._pending: frozenset[str] = frozenset()
        self._waiting: tuple[str, tuple] | None = None  # a message waiting for its files
        self.indexing: str | None = None  # the library being indexed
        self.jobs = JobRunner("hearth-documents", self)
        w = self.jobs.worker
        w.progress.connect(self.on_progress)
        w.finished.connect(self.on_finished)
        w.failed.connect(self.on_failed)
        w.cancelled.connect(self.on_cancelled)
        w.crashed.connect(chat.bridge.crash)
        chat.conversation_opened.connect(self.on_conversation_opened)
        chat.generating_changed.connect(self.on_generating_changed)

    # the library ---------------------------------------------------------------------------

    def library(self) -> DocumentLibrary | None:
        """The document library, opened on first use (None: it cannot be; the banner says
        why)."""
        if self._library is None:
            try:
                self._opened = self.library_factory()
                self._library = self._opened.library
            except HearthError as exc:
                self.chat.bridge.report(exc)
                return None
        return self._library

    def libraries(self) -> list[dict]:
        """``{name, files, chunks, roots}`` of each library the user made (not the chats'
        own collections)."""
        library = self.library()
        if library is None:
            return []
        return [c for c in library.index.collections() if not c["name"].startswith("chat-")]

    @property
    def embedder_store(self) -> EmbedderStore:
        if self._store is None:
            self._store = getattr(self._opened, "store", None) or default_embedder_store()
        return self._store

    @embedder_store.setter
    def embedder_store(self, store: EmbedderStore) -> None:
        self._store = store

    def embedders(self) -> list[EmbedderChoice]:
        """The embedders a library can use (downloaded or not)."""
        try:
            return self.embedder_store.choices()
        except HearthError as exc:
            self.chat.bridge.report(exc)
            return []

    def embedder_of(self, name: str) -> str | None:
        library = self.library()
        if library is None or library.index.collection_id(name) is None:
            return None
        return library.embedder_of(name)

    def index(self, name: str, paths: Sequence[Path], embedder: str | None = None) -> bool:
        """Add files / folders to library ``name`` (made when new, with ``embedder``) and
        index them (a job)."""
        name = name.strip()
        if not name or name.startswith("chat-"):
            self.chat.bridge.info("Give the library a name (not starting with “chat-”).")
            return False
        return self._submit(name, list(paths), embedder)

    def refresh(self, name: str) -> bool:
        """Re-index library ``name``: changed files again, deleted ones drop out."""
        return self._submit(name, None)

    def set_embedder(self, name: str, embedder: str) -> bool:
        """Give library ``name`` another embedder and index it again (a job; the page has
        asked the user first)."""
        return self._submit(name, None, embedder, change=True)

    def _fetch(self, embedder: str | None, report, control) -> None:
        """Download ``embedder`` on the job thread when it is not here yet."""
        store = self.embedder_store
        if embedder is None or store.is_available(embedder):
            return

        def progress(p) -> None:
            report(Progress(p.fraction if p.bytes_total else None,
                            f"Downloading the embedder {p.model_id}: {p.state}"))

        store.ensure(embedder, progress=progress, control=control)

    def _submit(self, name: str, paths: list[Path] | None, embedder: str | None = None, *,
                change: bool = False) -> bool:
        library = self.library()
        if library is None:
            return False
        if self.indexing is not None:
            self.chat.bridge.info(f"The library “{self.indexing}” is being indexed: wait "
                                  "for it, or cancel it.")
            return False

        def work(report, control):
            self._fetch(embedder, report, control)
            if change:
                return library.set_embedder(name, embedder, report=report, control=control)
            if paths is None:
                return library.refresh(name, report=report, control=control)
            return library.add(paths, name, embedder=embedder, report=report, control=control)

        if not self.jobs.submit(Job(INDEX_JOB, f"Indexing {name}", work)):
            return False
        self.indexing = name
        self.index_progress.emit(Progress(None, f"Indexing {name}…"))
        return True

    def cancel_indexing(self) -> None:
        self.jobs.cancel(INDEX_JOB)

    def remove(self, name: str) -> bool:
        library = self.library()
        if library is None or self.indexing == name:
            return False
        try:
            library.remove(name)
        except HearthError as exc:
            self.chat.bridge.report(exc)
            return False
        self.choices.forget_library(name)
        self._pending = self._pending - {name}
        self.libraries_changed.emit()
        self.apply_choice()
        return True

    def on_progress(self, _job_id: str, progress: Progress) -> None:
        self.index_progress.emit(progress)

    def on_finished(self, _job_id: str, report: Any) -> None:
        self._end_job()
        files = len(report.indexed)
        sentence = (f"{report.collection}: {files:,} files indexed, "
                    f"{len(report.unchanged):,} unchanged, {len(report.removed):,} removed.")
        if report.problems:
            sentence += " " + " ".join(report.problems[:5])
        self.index_finished.emit(sentence)
        self._send_waiting()

    def on_failed(self, _job_id: str, sentence: str) -> None:
        self._end_job()
        self._waiting = None
        self.chat.bridge.error(sentence)

    def on_cancelled(self, _job_id: str) -> None:
        name = self._end_job()
        self._waiting = None
        self.index_finished.emit(f"Indexing {name} was cancelled; the files done so far "
                                 "stay indexed.")

    def _end_job(self) -> str | None:
        name, self.indexing = self.indexing, None
        self.index_progress.emit(None)
        self.libraries_changed.emit()
        return name

    # per chat ------------------------------------------------------------------------------

    def choice(self) -> frozenset[str]:
        cid = self.chat.current_id
        return self.choices.get(cid) if cid is not None else self._pending

    def set_library_on(self, name: str, on: bool) -> None:
        names = self.choice() | {name} if on else self.choice() - {name}
        cid = self.chat.current_id
        if cid is None:
            self._pending = frozenset(names)
        else:
            self.choices.set(cid, frozenset(names))
        self.apply_choice()
        self.choice_changed.emit(self.choice())

    def on_conversation_opened(self, conversation_id: object, _values: object) -> None:
        if conversation_id is None:
            self._pending = frozenset()
        self.apply_choice()
        self.choice_changed.emit(self.choice())

    def on_generating_changed(self, generating: bool) -> None:
        cid = self.chat.current_id
        if generating and cid is not None and self._pending and not self.choices.get(cid):
            self.choices.set(cid, self._pending)  # the new chat's first message
            self._pending = frozenset()

    def apply_choice(self) -> None:
        """Point ``ChatController.retriever`` at the open chat's libraries (None: none)."""
        names = set(self.choice())
        cid = self.chat.current_id
        if names or self._has_large_attachments():
            library = self.library()
            if library is not None:
                known = {c["name"] for c in library.index.collections()}
                names &= known
                if cid is not None and chat_collection(cid) in known:
                    names.add(chat_collection(cid))
                if names:
                    from app.documents.retriever import LibraryRetriever

                    self.chat.retriever = LibraryRetriever(library, sorted(names))
                    return
        self.chat.retriever = None

    def _has_large_attachments(self) -> bool:
        """The open chat has files searched per question (in its own collection)."""
        from app.chat.parts import Attachment

        return any(isinstance(p, Attachment) and not p.text
                   for m in self.chat.chat_model.messages() for p in m.parts)

    # attachments ---------------------------------------------------------------------------

    def read_attachments(self, paths: Sequence[Path]) -> tuple[list[Attachment], list[Path]]:
        """The parts for ``paths`` (and which of them must be indexed first); a file that
        cannot be read is left out, with its sentence in the banner."""
        from app.documents.attach import attachment
        from app.documents.sections import DocumentError

        info = self.chat.model_info
        context = info.context_length if info else 0
        used = sum(len(m.content) for m in self.chat.chat_model.messages()) // 4
        parts: list[Attachment] = []
        large: list[Path] = []
        problems: list[str] = []
        for path in paths:
            try:
                part = attachment(Path(path), context, used)
            except (DocumentError, OSError) as exc:
                problems.append(str(exc))
                continue
            parts.append(part)
            if not part.text:
                large.append(Path(path))
        if problems:
            self.chat.bridge.warning(" ".join(problems))
        return parts, large

    def send(self, text: str, paths: Sequence[Path] = ()) -> bool:
        """Send ``text`` with the files at ``paths`` attached (see the module's docstring)."""
        if not paths:
            return self.chat.send(text)
        parts, large = self.read_attachments(paths)
        if not parts:
            return False
        if not large:
            return self.chat.send(text, parts=tuple(parts))
        if not self.chat.send(text, parts=tuple(parts), start=False):
            return False
        cid = self.chat.current_id
        assert cid is not None
        self._waiting = (cid, ())
        library = self.library()
        if library is None:
            return False
        name = chat_collection(cid)

        def work(report, control):
            return library.add(large, name, report=report, control=control)

        if not self.jobs.submit(Job(INDEX_JOB, f"Reading {large[0].name}", work)):
            self._waiting = None
            return False
        self.indexing = name
        self.index_progress.emit(Progress(None, f"Reading {', '.join(p.name for p in large)}…"))
        return True

    def _send_waiting(self) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is None or waiting[0] != self.chat.current_id:
            return
        self.apply_choice()  # the chat's own collection joins its retriever
        self.chat.reply_to_last()

    # quit ----------------------------------------------------------------------------------

    def shutdown(self) -> bool:
        done = self.jobs.shutdown()
        opened, self._opened, self._library = self._opened, None, None
        self.chat.retriever = None
        if opened is not None:
            opened.close()
        return done
