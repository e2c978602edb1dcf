"""The documents side of the window (UI thread): libraries, the open chat's choice of them,
attachments on a message, and the retriever the chat controller hands each turn.

Nothing slow runs on the UI thread; each result comes back as a queued signal, and Qt state
changes only here.

- **Libraries** are the document index's collections (``DocumentLibrary``, opened on first
  use by ``library_factory`` as the ``open-library`` job on the ``hearth-documents`` job
  thread: converting the starter embedder the first time, then loading its ORT session,
  which ``EmbeddingThread``'s ``hearth-embed`` thread builds and owns; every indexing job and
  every turn's search embeds through that one thread). Until it is open ``libraries()`` is
  empty, ``activity`` says "Opening the document library…", and what needs it waits
  (``open_library(then)``). Indexing runs as a job on the same thread (files done / total in
  ``index_progress``; ``cancel_indexing`` stops it between files, what was indexed stays
  whole), and so does removing one (``remove``: its row says "Removing…" meanwhile).
- **Updates**: the ``open-library`` job also finds the libraries with files indexed by an
  older recipe (``DocumentLibrary.out_of_date``: an older chunking, or vectors of another
  embedder build); once it is open each gets an "Updating NAME" job, one after another, as
  any indexing job (files done / total, Cancel; ``DocumentLibrary.update`` re-indexes only
  the stale files, one transaction each, so the library stays searchable meanwhile). A
  cancel or a quit stops them; the next start finds what is still stale and carries on.
- **Changes on disk**: the libraries check their folders on their own (``LibraryWatch``,
  app/documents/freshness.py: walk + stat against the size and mtime indexed, at most once
  per ``CHECK_INTERVAL_S`` per library): in the ``open-library`` job (``at_start`` opens the
  library after the window shows when the index holds a library with folders:
  ``has_watched_folders``, a read-only query on the documents thread; an index of chats'
  attached files only is left closed, no embedder loaded) and when a chat that uses a library
  sends (``LibraryRetriever.before``, on the generation thread before the turn searches).
  Files gone from disk drop out there and then (a quick delete, before that answer
  searches); changed and new ones are indexed by an "Updating NAME" job as above
  (``DocumentLibrary.sync_files``: the content hash decides, so a touched-but-identical file
  is not embedded again).
- **Per chat** the libraries searched are ``ChatLibrariesStore``'s; this controller is the
  one owner of that choice (the composer's Libraries menu and the chat settings' list both
  read ``choice()`` and write ``set_library_on``); the unsent new chat keeps its choice here
  until its first message creates the conversation.
- **Attachments**: ``send(text, paths)`` stores the message in its chat at once and holds it
  there (``ChatController.hold``: the one message in flight, whichever chat is open
  meanwhile; its row shows the files as "reading…" chips, ``READING_STATUS`` on screen only)
  while the ``hearth-attachments`` job thread reads them (``read_attachments``;
  ``reading_changed`` names them). Then a file that fits half the context left goes into
  the prompt whole; a larger one is indexed into the chat's own collection first (a job).
  That budget is the answering model's: files read while it still loads wait for it
  (``on_model_ready``), so a file is treated the same whether the model was loaded when
  it was sent or not;
  ``ChatController.release`` stores the parts with the message and starts its reply in its
  own chat, with that chat's retriever (``retriever_for``). ``attachments_sent`` names the
  files that went (they leave the tray at once). A message none of whose files could be
  read, one stopped (``held_stopped``) or one a quit cut off stays in its chat unanswered,
  its sentence stored with it (provenance ``unsent``); nothing goes back into a composer.
  Sent while another chat's message is in flight, it waits its turn instead (stored as its
  text, ``ChatController.send(files=)``), and its files are read when the turn comes
  (``read_turn``, then as above), against the context left then.
- **Embedders**: each library keeps the embedder it was made with (``embedders()`` lists
  the starter and the embedder catalog's, ``embedder_store`` downloads a catalog one);
  ``set_embedder`` gives a library another (the page asks first): one job downloads it when
  needed, with its progress in the same row and Cancel, then indexes the library again.
- **The retriever**: ``ChatController.retriever`` is a ``LibraryRetriever`` over the chat's
  libraries (and its own collection, when it has one), or None. A message sent while the
  library opens is stored at once and answered when it is open.
- **Quit** (``shutdown``): flags stop both threads between files (a message being read
  stays stored, marked "not sent"); a library opened too late to be used is closed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, Signal

from app.chat.parts import Attachment
from app.documents.attach import (
    AttachmentsRead,
    Reader,
    attachment,
    chat_collection,
    is_chat_collection,
    names_of,
    were,
)
from app.documents.freshness import LibraryWatch, has_watched_folders
from app.documents.selection import ChatLibrariesStore
from app.errors import HearthError
from app.jobs import Job, JobCancelled, Progress
from app.workers.job_worker import JobRunner

if TYPE_CHECKING:
    from app.documents.embedders import EmbedderChoice, EmbedderStore
    from app.documents.library import DocumentLibrary
    from app.documents.retriever import LibraryRetriever
    from app.ui.controller import ChatController

INDEX_JOB = "index-library"
OPEN_JOB = "open-library"
#: at start: does the index hold a library with folders to check (then the library opens)
START_JOB = "check-libraries"
READ_JOB = "read-attachments"
REMOVE_JOB = "remove-library"
REMOVING_TEXT = "Removing…"
INDEXING_TEXT = "indexing…"
#: the chat row of a message whose files are being read (on screen only, never stored)
READING_STATUS = "reading"
#: the row of a message whose files are read and wait for the model's context (screen only)
MODEL_WAIT_STATUS = "model"
OPENING_TEXT = "Opening the document library…"
#: the job row of a library brought up to date by itself ("Updating Manuals: 3 of 14 files")
UPDATING_TEXT = "Updating"
WAITING_TEXT = "Opening the document library; the reply starts when it is open…"
#: a quit waits this long for the documents thread: the embedder's one-time conversion
#: stops at its next step (each takes seconds), an indexing job at its next file
SHUTDOWN_WAIT_MS = 30_000


class OpenedLibrary(Protocol):
    """What ``library_factory`` gives: the library and what closes its resources
    (``app/documents/open.py`` ``OpenLibrary``)."""

    library: DocumentLibrary

    def close(self) -> None: ...


#: called on the documents thread with ``checkpoint=`` (the job's flag check, between steps)
LibraryFactory = Callable[..., OpenedLibrary]


def open_default_library(*, checkpoint: Callable[[], None] | None = None) -> OpenedLibrary:
    from app.documents.open import OpenLibrary

    return OpenLibrary(store=default_embedder_store(), checkpoint=checkpoint)


@dataclass(frozen=True)
class _Reading:
    """A message whose files are being read: where it goes, and what it says."""

    conversation: str
    message_id: int
    paths: tuple[Path, ...]


def _shown(collection: str) -> str:
    """A collection as the job row names it: a library by its name, a chat's own files as
    such (their collection's name means nothing to the user)."""
    return "a chat's attached files" if is_chat_collection(collection) else collection


def default_embedder_store() -> EmbedderStore:
    """The embedders folder, downloading from the "Model download server" setting."""
    import os

    from app.documents.embedders import EmbedderStore
    from app.settings import Settings

    endpoint = Settings().get("hub_endpoint") or os.environ.get("HF_ENDPOINT") or None
    return EmbedderStore(endpoint=endpoint)


class DocumentsController(QObject):
    """Signals:
    libraries_changed(): the library opened, or a library was made, indexed or removed.
    index_progress(object Progress | None): the indexing job's progress; None: it ended.
    index_finished(str sentence): what the indexing did (files indexed, problems).
    choice_changed(object frozenset[str]): the open chat's libraries changed.
    activity(str text): what runs in the background for documents now ("": nothing), e.g.
        "Opening the document library…", "Reading manual.pdf…".
    reading_changed(object tuple[Path, ...]): the files being read for the message going
        out (empty: none).
    attachments_sent(object tuple[Path, ...]): the message went with these files (they
        leave the composer's tray: the message's row shows them, "reading…" meanwhile).
    """

    libraries_changed = Signal()
    index_progress = Signal(object)
    index_finished = Signal(str)
    choice_changed = Signal(object)
    activity = Signal(str)
    reading_changed = Signal(object)
    attachments_sent = Signal(object)
    #: (library, changed files) a check found off the UI thread; queued to ``_queue_changes``
    _changes_found = Signal(str, object)

    def __init__(self, chat: ChatController, *, library_factory: LibraryFactory | None = None,
                 choices: ChatLibrariesStore | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.chat = chat
        self.library_factory = library_factory or open_default_library
        self.choices = choices or ChatLibrariesStore()
        #: reads one attached file on the attachments thread (tests give a slow one)
        self.read_file: Reader = attachment
        self._library: DocumentLibrary | None = None
        self._opened: OpenedLibrary | None = None
        self.opening = False  # the open-library job is queued or running
        self._when_open: list[Callable[[DocumentLibrary], None]] = []
        self._handoff = threading.Lock()  # the job thread → shutdown, for a late library
        self._unclaimed: OpenedLibrary | None = None
        self._closing = False
        self._store: EmbedderStore | None = None
        self._pending: frozenset[str] = frozenset()
        self._waiting: str | None = None  # the chat whose message waits for the library
        #: the read parts of the held message that waits for the library (None: not held)
        self._held_parts: tuple[Attachment, ...] | None = None
        self._reading: _Reading | None = None
        #: the held message whose files were read before the model's context was known
        self._undecided: tuple[_Reading, AttachmentsRead] | None = None
        self.indexing: str | None = None  # the library being indexed
        self._job_title = ""  # what the indexing job's progress lines start with
        self.removing: str | None = None  # the library being removed
        #: libraries to update in turn: (name, None) its stale files, (name, files) those
        #: files a check found changed on disk
        self._updates: list[tuple[str, list[Path] | None]] = []
        self._update_changes = False  # the running update indexes files changed on disk
        #: when each library last checked its folders (at open, and before a turn searches)
        self.watch = LibraryWatch()
        #: the index whose libraries ``at_start`` checks (its library opened when it exists)
        self.index_path: Path | None = None
        self._changes_found.connect(self._queue_changes)
        self.updating = False  # the indexing job is an update (``_next_update``)
        self.jobs = JobRunner("hearth-documents", self)  # opening the library, indexing
        w = self.jobs.worker
        w.progress.connect(self.on_progress)
        w.finished.connect(self.on_finished)
        w.failed.connect(self.on_failed)
        w.cancelled.connect(self.on_cancelled)
        w.crashed.connect(chat.bridge.crash)
        self.reader = JobRunner("hearth-attachments", self)  # reading attached files
        r = self.reader.worker
        r.finished.connect(self.on_read)
        r.failed.connect(self.on_read_failed)
        r.cancelled.connect(self.on_read_cancelled)
        r.crashed.connect(chat.bridge.crash)
        chat.conversation_opened.connect(self.on_conversation_opened)
        chat.generating_changed.connect(self.on_generating_changed)
        chat.line_changed.connect(lambda _line: self._claim_pending())  # a first message
        chat.held_stopped.connect(self.on_held_stopped)
        chat.model_loaded.connect(self.on_model_ready)
        chat.retriever_for = self.retriever_for  # a waiting message's chat, not on screen
        chat.read_files = self.read_turn  # a waiting message with files, its turn come
        chat.model_load_failed.connect(self.on_model_ready)

    # the library ---------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._library is not None

    def library(self) -> DocumentLibrary | None:
        """The document library when it is open; None while it is not (this starts opening
        it: ``libraries_changed`` says when it is, the banner says why it cannot be)."""
        if self._library is None:
            self.open_library()
        return self._library

    def open_library(self, then: Callable[[DocumentLibrary], None] | None = None) -> None:
        """Open the library off the UI thread (once); ``then(library)`` runs on this thread
        when it is open (at once when it is already)."""
        if self._library is not None:
            if then is not None:
                then(self._library)
            return
        if then is not None:
            self._when_open.append(then)
        if self.opening or self._closing:
            return
        factory = self.library_factory
        watch = self.watch

        def work(report, control):
            report(Progress(None, OPENING_TEXT))
            opened = factory(checkpoint=control.checkpoint)
            try:
                stale = opened.library.out_of_date()
                control.checkpoint()  # a quit before the check: it closes below
                names = [c["name"] for c in opened.library.index.collections()
                         if not is_chat_collection(c["name"])]
                changed = watch.check(opened.library, names)
            except HearthError:
                stale, changed = {}, {}
            except JobCancelled:
                opened.close()
                raise
            with self._handoff:
                if control.cancelled:  # the window is closing: nobody will use it
                    opened.close()
                    raise JobCancelled
                self._unclaimed = opened
            return opened, stale, changed

        if self.jobs.submit(Job(OPEN_JOB, "Opening the document library", work)):
            self.opening = True
            self._show_activity()

    def at_start(self) -> None:
        """After the window shows: when the document index holds a library with folders
        (``has_watched_folders``, a read-only query on the documents thread), open the
        library, which checks those folders and updates what changed. An index of chats'
        attached files only, or none, is left closed: no embedder is loaded for nothing."""
        from app import paths

        index = self.index_path or paths.documents_db_path()
        self.jobs.submit(Job(START_JOB, "Checking the document libraries",
                             lambda _report, _control: has_watched_folders(index)))

    def _on_opened(self, opened: OpenedLibrary, stale: dict[str, int],
                   changed: dict[str, list[Path]] | None = None) -> None:
        self.opening = False
        with self._handoff:
            self._unclaimed = None
        if self._closing:
            opened.close()
            return
        self._opened, self._library = opened, opened.library
        self._show_activity()
        self.libraries_changed.emit()
        self.apply_choice()
        callbacks, self._when_open = self._when_open, []
        for then in callbacks:
            then(opened.library)
        queued = {n for n, _ in self._updates}
        self._updates = [(n, None) for n in stale if n not in queued] + self._updates
        for name, files in (changed or {}).items():
            self._queue_changes(name, files)
        self._next_update()

    def _check_before_search(self, names: Sequence[str]) -> None:
        """A turn is about to search ``names`` (on the generation thread): the due ones
        check their folders; gone files drop out now, changed ones queue an update."""
        library = self._library
        if library is None or self._closing:
            return
        mine = [n for n in names if not is_chat_collection(n)]
        for name, files in self.watch.check(library, mine).items():
            self._changes_found.emit(name, files)

    def _queue_changes(self, name: str, files: object) -> None:
        """Files of library ``name`` changed on disk: index them (after what runs)."""
        if self._closing:
            return
        for i, (queued, more) in enumerate(self._updates):
            if queued == name and more is not None:
                self._updates[i] = (name, list(dict.fromkeys([*more, *files])))
                break
        else:
            self._updates.append((name, list(files)))
        self._next_update()

    def _next_update(self) -> None:
        """Start the next library's update (when nothing else runs on the documents thread):
        its stale files indexed again, as an indexing job."""
        library = self._library
        while (self._updates and library is not None and not self._closing
               and self.indexing is None and self.removing is None):
            name, files = self._updates.pop(0)
            if library.index.collection_id(name) is None:
                continue  # removed meanwhile

            def work(report, control, name=name, files=files):
                if files is None:
                    return library.update(name, report=report, control=control)
                return library.sync_files(name, files, report=report, control=control)

            title = f"{UPDATING_TEXT} {_shown(name)}"
            if not self.jobs.submit(Job(INDEX_JOB, title, work)):
                return
            self.indexing, self._job_title, self.updating = name, title, True
            self._update_changes = files is not None
            self.index_progress.emit(Progress(None, f"{title}…"))
            return

    def _on_open_failed(self, sentence: str) -> None:
        """The banner says why; a message that waited is answered without the libraries
        (Send keeps working without them)."""
        self.opening = False
        self._when_open.clear()
        self.chat.bridge.error(sentence)
        self._send_waiting()

    def libraries(self) -> list[dict]:
        """``{name, files, chunks, roots}`` of each library the user made (not the chats'
        own collections); none while the library opens."""
        library = self.library()
        if library is None:
            return []
        return [c for c in library.index.collections() if not is_chat_collection(c["name"])]

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
        if not name or is_chat_collection(name):
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
        if self.indexing is not None:
            self.chat.bridge.info(f"The library “{self.indexing}” is being indexed: wait "
                                  "for it, or cancel it.")
            return False
        library = self._library
        if library is None:  # indexed once it is open
            self.open_library(lambda _library: self._submit(name, paths, embedder,
                                                            change=change))
            return not self._closing

        def work(report, control):
            self._fetch(embedder, report, control)
            if change:
                return library.set_embedder(name, embedder, report=report, control=control)
            if paths is None:
                return library.refresh(name, report=report, control=control)
            return library.add(paths, name, embedder=embedder, report=report, control=control)

        if not self.jobs.submit(Job(INDEX_JOB, f"Indexing {name}", work)):
            return False
        self.indexing, self._job_title = name, f"Indexing {name}"
        self.index_progress.emit(Progress(None, f"Indexing {name}…"))
        return True

    def cancel_indexing(self) -> None:
        self.jobs.cancel(INDEX_JOB)

    def remove(self, name: str) -> bool:
        """Remove library ``name`` (its files and passages): a job on the documents thread
        (``removing`` names it meanwhile, and ``libraries_changed`` says when it starts and
        ends); the chats that searched it forget it once it is gone."""
        library = self._library
        if library is None or self.indexing == name or self.removing is not None:
            return False

        def work(_report, _control):
            library.remove(name)
            return name

        if not self.jobs.submit(Job(REMOVE_JOB, f"Removing {name}", work)):
            return False
        self.removing = name
        self.libraries_changed.emit()
        return True

    def _on_removed(self, name: str) -> None:
        self.removing = None
        self.choices.forget_library(name)
        self._pending = self._pending - {name}
        self.libraries_changed.emit()
        self.apply_choice()
        self._next_update()

    def on_progress(self, job_id: str, progress: Progress) -> None:
        """An indexing job's line names what it indexes ("Indexing Manuals: 3 of 14
        files: a.pdf"), in the Documents tab and the status bar alike."""
        if job_id in (OPEN_JOB, START_JOB):
            return
        if job_id == INDEX_JOB and self._job_title:
            progress = Progress(progress.fraction, f"{self._job_title}: {progress.message}",
                                progress.state)
        self.index_progress.emit(progress)

    def on_finished(self, job_id: str, result: Any) -> None:
        if job_id == START_JOB:
            if result and not self._closing:
                self.open_library()
            return
        if job_id == OPEN_JOB:
            self._on_opened(*result)
            return
        if job_id == REMOVE_JOB:
            self._on_removed(result)
            return
        updated, changes = self.updating, self._update_changes
        self._end_job()
        report = result
        files = len(report.indexed)
        if changes:
            shown = _shown(report.collection)
            sentence = (f"{shown[:1].upper()}{shown[1:]} is up to date with its folders: "
                        f"{files:,} changed files indexed again, {len(report.unchanged):,} "
                        "unchanged.")
        elif updated:
            shown = _shown(report.collection)
            sentence = (f"{shown[:1].upper()}{shown[1:]} is up to date: {files:,} files "
                        "indexed again by this version of Hearth.")
        else:
            sentence = (f"{report.collection}: {files:,} files indexed, "
                        f"{len(report.unchanged):,} unchanged, {len(report.removed):,} "
                        "removed.")
        if report.problems:
            sentence += " " + " ".join(report.problems[:5])
        self.index_finished.emit(sentence)
        self._send_waiting()
        self._next_update()

    def on_failed(self, job_id: str, sentence: str) -> None:
        if job_id == START_JOB:  # (has_watched_folders logs and answers False; a bug)
            return
        if job_id == OPEN_JOB:
            self._on_open_failed(sentence)
            return
        if job_id == REMOVE_JOB:
            self.removing = None
            self.chat.bridge.error(sentence)
            self.libraries_changed.emit()
            self._next_update()
            return
        self._end_job()
        self.chat.bridge.error(sentence)
        self._send_waiting(answer=False)
        self._next_update()

    def on_cancelled(self, job_id: str) -> None:
        if job_id == START_JOB:  # a quit before it ran
            return
        if job_id == OPEN_JOB:
            self.opening = False
            return
        if job_id == REMOVE_JOB:  # a quit before it ran
            self.removing = None
            return
        updated = self.updating
        name = self._end_job()
        self._updates.clear()  # the rest waits for the next start
        self._send_waiting(answer=False)
        if updated:
            self.index_finished.emit(f"Updating {_shown(name or '')} was cancelled; it is "
                                     "still searchable, and the rest is updated the next "
                                     "time Hearth starts.")
            return
        self.index_finished.emit(f"Indexing {name} was cancelled; the files done so far "
                                 "stay indexed.")

    def _end_job(self) -> str | None:
        name, self.indexing, self.updating = self.indexing, None, False
        self._update_changes = False
        self.index_progress.emit(None)
        self.libraries_changed.emit()
        return name

    def _show_activity(self) -> None:
        if self._reading is not None:
            text = f"Reading {names_of(self._reading.paths)}…"
        elif self.opening:
            text = WAITING_TEXT if self._waiting is not None else OPENING_TEXT
        else:
            text = ""
        self.activity.emit(text)

    # per chat ------------------------------------------------------------------------------

    def choice(self) -> frozenset[str]:
        cid = self.chat.current_id
        return self.choices.get(cid) if cid is not None else self._pending

    def set_library_on(self, name: str, on: bool) -> None:
        if (name in self.choice()) == on:
            return
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
        self._show_reading()
        self.apply_choice()
        self.choice_changed.emit(self.choice())

    def on_generating_changed(self, generating: bool) -> None:
        if generating:
            self._claim_pending()

    def _claim_pending(self) -> None:
        """The new chat's first message made the conversation: its choice goes with it."""
        cid = self.chat.current_id
        if cid is not None and self._pending and not self.choices.get(cid):
            self.choices.set(cid, self._pending)
            self._pending = frozenset()

    def _choice_of(self, cid: str | None) -> frozenset[str]:
        return self.choices.get(cid) if cid is not None else self._pending

    def _needs_library(self, cid: str | None = None) -> bool:
        cid = cid or self.chat.current_id
        return bool(self._choice_of(cid)) or self._has_large_attachments(cid)

    def apply_choice(self) -> None:
        """Point ``ChatController.retriever`` at the open chat's libraries (None: none, or
        not yet: the library is opening, and this runs again when it is open)."""
        self.chat.retriever = self.retriever_for(self.chat.current_id)

    def retriever_for(self, cid: str | None, *,
                      large: bool = False) -> LibraryRetriever | None:
        """A retriever over chat ``cid``'s libraries and its own collection (None: it has
        none, or the library is not open yet). ``large``: the message about to be answered
        brings files to search (not stored with it yet)."""
        names = set(self._choice_of(cid))
        if not names and not large and not self._has_large_attachments(cid):
            return None
        library = self.library()
        if library is None:
            return None
        known = {c["name"] for c in library.index.collections()}
        names &= known
        if cid is not None and chat_collection(cid) in known:
            names.add(chat_collection(cid))
        if not names:
            return None
        from app.documents.retriever import LibraryRetriever

        return LibraryRetriever(library, sorted(names), before=self._check_before_search)

    def _has_large_attachments(self, cid: str | None) -> bool:
        """Chat ``cid`` has files searched per question (in its own collection)."""
        if cid is not None and cid != self.chat.current_id:
            try:
                messages = self.chat.history.active_path(cid)
            except HearthError:
                return False
        else:
            messages = self.chat.chat_model.messages()
        return any(isinstance(p, Attachment) and not p.text for m in messages for p in m.parts
                   if m.status not in (READING_STATUS, MODEL_WAIT_STATUS))  # (not yet read)

    # sending, with attachments -------------------------------------------------------------

    @property
    def reading(self) -> tuple[Path, ...]:
        """The files being read for the message going out (empty: none)."""
        return self._reading.paths if self._reading is not None else ()

    def send(self, text: str, paths: Sequence[Path] = ()) -> bool:
        """Send ``text`` with the files at ``paths`` attached (see the module's docstring).
        True: it went out, or it goes once its files are read / the library is open."""
        if paths:
            return self._read(text, tuple(Path(p) for p in paths))
        if self._needs_library() and self._library is None:
            return self._send_when_open(text, AttachmentsRead())
        return self.chat.send(text)

    def _read(self, text: str, paths: tuple[Path, ...]) -> bool:
        """The message is stored in its chat at once and held there (``ChatController.hold``:
        the one message in flight) while its files are read; its row shows them as
        "reading…" chips until ``on_read``. Sent while another chat's message is in flight,
        it waits its turn instead, its files as chips, and they are read when it comes
        (``read_turn``)."""
        if self._closing:
            return False
        if self.chat.would_wait_turn and not self.chat.editing:
            if not self.chat.send(text, files=paths):
                return False
            self.attachments_sent.emit(paths)
            return True
        message_id = self.chat.hold(text)
        if message_id is None:
            return False
        cid = self.chat.current_id
        assert cid is not None
        if not self._start_reading(_Reading(cid, message_id, paths)):
            return False
        self.attachments_sent.emit(paths)
        return True

    def read_turn(self, cid: str, message_id: int, paths: tuple[Path, ...]) -> bool:
        """Chat ``cid``'s message ``message_id`` waited its turn with files, and its turn
        came: it is held while they are read, then goes on as one sent now does (a read that
        cannot start says so on it). False: nothing was done (Hearth is closing)."""
        if self._closing:
            return False
        self.chat.hold_turn(cid, message_id)
        self._start_reading(_Reading(cid, message_id, paths))
        return True

    def _start_reading(self, reading: _Reading) -> bool:
        """Read the held message's files on the attachments thread (``on_read`` next)."""
        paths, read = reading.paths, self.read_file

        def work(_report, control):  # read whole; ``_decide`` applies the budget after
            from app.documents.attach import read_attachments

            return read_attachments(paths, None, 0, read=read,
                                    checkpoint=control.checkpoint)

        self._reading = reading
        if not self.reader.submit(Job(READ_JOB, f"Reading {names_of(paths)}", work)):
            self._reading = None
            self.chat.release(unsent=f"Not sent: {names_of(paths)} could not be read "
                                     "(Hearth is closing).", start=False)
            return False
        self._show_reading()
        self.reading_changed.emit(paths)
        self._show_activity()
        return True

    def _show_reading(self) -> None:
        """The held message's row, when its chat is open: its files as "reading…" chips,
        then, read while the model loads, as waiting for it (on screen only; the stored
        message gets its parts once they are decided)."""
        reading, status = self._reading, READING_STATUS
        if reading is None and self._undecided is not None:
            reading, status = self._undecided[0], MODEL_WAIT_STATUS
        if reading is None or reading.conversation != self.chat.current_id:
            return
        model = self.chat.chat_model
        row = model.row_of(reading.message_id)
        if row >= 0:
            model.update_message(row, status=status, parts=tuple(
                Attachment(name=p.name, path=str(p)) for p in reading.paths))

    def _end_reading(self) -> _Reading | None:
        reading, self._reading = self._reading, None
        self.reading_changed.emit(())
        self._show_activity()
        return reading

    def on_read(self, _job_id: str, found: AttachmentsRead) -> None:
        reading = self._end_reading()
        if reading is None or self._closing:
            return
        if found.problems:
            self.chat.bridge.warning(" ".join(found.problems))
        if not found.parts:
            self._unsent(reading, " ".join(found.problems)
                         or f"{names_of(reading.paths)} could not be read.")
            return
        if self.chat.loading_path is not None:  # the model that answers is not ready yet
            self._undecided = (reading, found)  # decided once the model is ready
            self.chat.wait_for_model()
            self._show_reading()
            return
        self._decide(reading, found)

    def on_model_ready(self, *_: object) -> None:
        """The model loaded (or did not): the read files that waited for its context are
        decided now, then their message goes on (or stays unanswered, saying why)."""
        undecided, self._undecided = self._undecided, None
        if undecided is None or self._closing:
            return
        reading, found = undecided
        if self.chat.model_info is None:
            self._unsent(reading, "the model did not load.")
            return
        self._decide(reading, found)

    def _decide(self, reading: _Reading, found: AttachmentsRead) -> None:
        """The budget rule, against the context of the model that answers: whole when a
        file fits half the context left, else searched (indexed into the chat's own
        collection first)."""
        from app.documents.attach import CHARS_PER_TOKEN, by_budget

        cid = reading.conversation
        info = self.chat.model_info
        try:
            chars = sum(len(m.content) for m in self.chat.history.active_path(cid))
        except HearthError:
            chars = 0
        found = by_budget(found, info.context_length if info else 0, chars // CHARS_PER_TOKEN)
        parts = tuple(found.parts)
        if not found.large and not (self._needs_library(cid) and self._library is None):
            self.chat.release(parts, retriever=self.retriever_for(cid))
            return
        self._release_when_open(cid, parts, list(found.large))

    def on_read_failed(self, _job_id: str, sentence: str) -> None:
        reading = self._end_reading()
        self.chat.bridge.error(sentence)
        if reading is not None and not self._closing:
            self._unsent(reading, sentence)

    def on_read_cancelled(self, _job_id: str) -> None:
        self._end_reading()

    def on_held_stopped(self, message_id: int) -> None:
        """Stop while the files are read (or wait for the model's context): the message
        stays in its chat, unanswered, and says why."""
        undecided = self._undecided
        if undecided is not None and undecided[0].message_id == message_id:
            self._undecided = None
            self._mark_unsent(undecided[0], "Not sent: stopped while it waited for the "
                                            "model to load.")
            return
        reading = self._reading
        if reading is None or reading.message_id != message_id:
            return
        self.reader.cancel(READ_JOB)
        self._end_reading()
        self._mark_unsent(reading, f"Not sent: stopped while {names_of(reading.paths)} "
                                   f"{were(reading.paths)} read.")

    def _unsent(self, reading: _Reading, sentence: str) -> None:
        """None of the files could be read: the message stays in its own chat, unanswered,
        with the sentence stored on it (nothing goes into the composer)."""
        if self.chat.held == (reading.conversation, reading.message_id):
            self.chat.release(unsent=f"Not sent: {sentence}", start=False)
        else:
            self._mark_unsent(reading, f"Not sent: {sentence}")

    def _mark_unsent(self, reading: _Reading, sentence: str) -> None:
        try:
            self.chat.history.update_message(reading.message_id, parts=(),
                                             provenance={"unsent": sentence})
        except HearthError as exc:
            self.chat.bridge.report(exc)
            return
        if reading.conversation == self.chat.current_id:
            model = self.chat.chat_model
            row = model.row_of(reading.message_id)
            if row >= 0:
                model.update_message(row, status="complete", parts=(),
                                     provenance={"unsent": sentence})

    def _release_when_open(self, cid: str, parts: tuple, large: list[Path]) -> None:
        """The read message waits (still held) for the library, and its large files are
        indexed into its chat's own collection first; then its reply starts."""
        self._waiting, self._held_parts = cid, parts
        self.open_library(lambda library: self._index_then_reply(library, cid, large))
        self._show_activity()

    def _send_when_open(self, text: str, found: AttachmentsRead) -> bool:
        """The message is stored now; its reply starts once the library is open."""
        if not self.chat.send(text, parts=tuple(found.parts), start=False):
            return False
        self._claim_pending()
        cid = self.chat.current_id
        assert cid is not None
        self._waiting, self._held_parts = cid, None
        self.open_library(lambda library: self._index_then_reply(library, cid, []))
        self._show_activity()
        return True

    def _index_then_reply(self, library: DocumentLibrary, cid: str, large: list[Path]) -> None:
        if not large:
            self._send_waiting()
            return
        name = chat_collection(cid)

        def work(report, control):
            return library.add(large, name, report=report, control=control)

        if self.indexing is not None or not self.jobs.submit(
                Job(INDEX_JOB, f"Reading {large[0].name}", work)):
            self.chat.bridge.info(f"{names_of(large)} can be searched once the library "
                                  f"“{self.indexing}” is indexed; then ask again.")
            self._send_waiting(answer=False)
            return
        self.indexing, self._job_title = name, f"Reading {names_of(large)}"
        self.index_progress.emit(Progress(None, f"Reading {names_of(large)}…"))

    def _send_waiting(self, *, answer: bool = True) -> None:
        """The message that waited for the library (and its chat's own collection) is
        answered (``answer``) in its own chat: a held one through ``ChatController.release``,
        also when another chat is open by then; one stored while the library opened when
        its chat is still open."""
        waiting, self._waiting = self._waiting, None
        parts, self._held_parts = self._held_parts, None
        self._show_activity()
        if waiting is None:
            return
        if self._library is not None:
            self.apply_choice()  # the chat's own collection joins its retriever
        if parts is not None:
            large = any(not p.text for p in parts)
            self.chat.release(parts, retriever=self.retriever_for(waiting, large=large),
                              start=answer)
            self.apply_choice()  # the open chat's, with the parts now stored
            return
        if answer and waiting == self.chat.current_id:
            self.chat.reply_to_last()

    # quit ----------------------------------------------------------------------------------

    def shutdown(self) -> bool:
        """Stop both threads (flags: they stop between files), then close the library."""
        self._closing = True
        reading, self._reading, self._waiting = self._reading, None, None
        self._held_parts = None
        self._when_open.clear()
        undecided, self._undecided = self._undecided, None
        if undecided is not None:
            self._mark_unsent(undecided[0], "Not sent: Hearth was closed while it waited "
                                            "for the model to load.")
        if reading is not None:  # the message stays in its chat and says why it went not
            self._mark_unsent(reading, f"Not sent: Hearth was closed while "
                                       f"{names_of(reading.paths)} {were(reading.paths)} read.")
        read = self.reader.shutdown()
        done = self.jobs.shutdown(SHUTDOWN_WAIT_MS)
        with self._handoff:
            late, self._unclaimed = self._unclaimed, None
        opened, self._opened, self._library = self._opened, None, None
        self.chat.retriever = None
        for resources in {id(x): x for x in (opened, late) if x is not None}.values():
            resources.close()
        return done and read
