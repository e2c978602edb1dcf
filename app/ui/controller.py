"""The chat controller: turns user intents into history writes and worker requests.

Lives on the UI thread. Owns the history, the two item models and the worker host; the
widgets only call its methods and listen to its signals. Every user message is saved before
generation starts; the reply is saved as it streams (ReplyWriter, at most 1 s behind) and
marked complete / stopped / failed at the end. A reasoning model's thinking streams on its
own signal into the reply's ``reasoning`` (saved with the answer, never mixed into it); how
long it thought is measured here until the answer starts, and the engine's own figure
(``GenerationStats.reasoning_ms``) replaces it at the end.

Nothing is lost by a change: editing a message adds a new variant beside it
(``History.edit_message``), regenerating adds a new reply beside the old one
(``History.regenerate``), ``switch_variant`` shows another branch, and a delete can be
undone (``undo_delete``) for as long as the view offers it. The prompt is always the path on
screen as the history stores it (``History.active_path``): the controller hands those rows
to the worker, which builds the turn's messages on its own thread
(app/workers/turn_request.py); nothing here builds a prompt.

A turn reaches it as the worker's events (app/chat/events.py), each mapped in ``on_event``
to the chat model (on this, the UI thread) and the reply's ``ReplyWriter``: deltas stream
into the reply; the sources a retriever found are stored with the user's message; a round
that called tools ends its reply row (the calls among its parts), each result is a ``tool``
row, and the next round writes a new assistant row below it. A call waits for the user's
answer: ``approval_requested`` shows it, ``answer_approval`` answers (Stop is a no).

One message is in flight at a time (``generating``): a reply streaming, a message waiting
for the model to load, or one held while its files are read (``hold``, by
app/ui/documents_controller.py). A held message is stored in its chat at once; ``release``
answers it there, also when another chat is open by then (the reply streams unseen, as when
the user switches chats mid-reply), with that chat's own tools (``toolbox_for``), libraries,
system prompt and settings; Stop leaves it unanswered (``held_stopped``). A message that
waits for the model to load is answered the same way once it is ready: in its own chat,
which is not opened over the one on screen.

A message sent in another chat meanwhile waits its turn (``in_line``): it is stored in its
chat at once (its row says "waiting for its turn…", on screen only), and once the message in
flight is done the waiting ones are answered one by one in the order they were sent, each in
its own chat with its own tools, libraries and settings (``_next_in_line``). One with files
is stored as its text alone, its files shown as chips, and they are read when its turn comes
(``read_files``: app/ui/documents_controller.py holds it and reads them as for a message sent
then). Stop in its chat ("Don't send", Esc) takes it out of the line, unanswered (``stop``).
A quit while one waits leaves it stored, saying it was not sent (provenance ``unsent``; so
does a quit while a message waits for the model to load); its row's Send now
(``send_unsent``), or sending its text again there, answers it, and a message sent after it
takes it along (the model reads both; its note goes). One with files says which to attach
again instead (no Send now). One reply at a time for the model, the others queued in sight,
as LM Studio and ChatGPT do.

Which chat that message is in is ``busy_conversation`` (``busy_changed`` says when it
changes, with what it is doing: "answering", "waiting" for the model, "reading" its files);
the chat list marks that row (app/ui/conversation_list.py). Stop acts on one chat:
``stop(conversation_id)``, the open chat's when none is named, so the open chat's Stop never
ends a reply written in another chat; the window names that chat and stops it only when
asked to by name (app/ui/main_window.py). The mark lives in memory only: nothing of it is
stored, so it never outlives the process.

A reply that fails stays on its turn: one that wrote nothing is kept as an empty 'failed'
row (its error in the provenance), and ``retry`` asks again on the same turn (in place; a
reply that holds part of an answer gets a new version beside it instead), so the question
is never left alone or sent twice. Sending the unanswered question's text again is a
retry too. Only a regenerated reply that failed before writing gives way to the version
it was asked beside.

After a chat's first complete reply, the loaded model names it (``_name_chat``: a
``TitleRequest`` posted to the worker, app/chat/title.py) unless the "chat_titles" setting
says not to (never, or not with a remote model). The title is the lowest priority: a new
reply, a model load or a quit cancels it first, and it then asks again after the next
reply. It replaces only the title the chat was given from its first message: a chat the
user renamed meanwhile keeps its name.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from PySide6.QtCore import QMetaMethod, QObject, QTimer, Signal

from app.chat.events import (
    Finished,
    PrefillProgress,
    ReasoningDelta,
    SourcesEvent,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
)
from app.chat.parts import Attachment, Part, ToolCall, ToolResult
from app.chat.turn import Retriever, Toolbox
from app.documents.attach import names_of, them, were
from app.engine.types import GenerationSettings, GenerationStats
from app.errors import HearthError, StorageError
from app.jobs import Progress
from app.remote.sources import is_remote_target
from app.settings import PER_CHAT, Settings, chat_settings
from app.storage import importer, transfer
from app.storage.history import Deletion, History, ReplyWriter, StoredMessage, title_from_text
from app.text import clean_text
from app.ui.chat_model import ChatModel
from app.ui.conversation_list import ConversationListModel
from app.ui.message_bridge import MessageBridge
from app.ui.settings_panel import generation_settings, model_chat_values
from app.workers.generation_worker import (
    ApprovalRequest,
    EngineLoader,
    GenerationRequest,
    GenerationResult,
    GenerationWorker,
    ModelInfo,
    TitleRequest,
    reply_result,
)
from app.workers.job_worker import JobRunner
from app.workers.thread_host import ThreadHost

#: on quit: how long to wait for the engine's thread to stop a reply or finish a model call
WORKER_STOP_WAIT_MS = 5000
#: on quit: how long a model being read is waited for before the process leaves without it
LOAD_WAIT_ON_QUIT_MS = 150
#: the one chat import that may run at a time
IMPORT_JOB = "import-chat"
#: the row of a message waiting its turn behind another chat's (on screen only, never stored)
WAITING_STATUS = "waiting"


class InLine(NamedTuple):
    """A message waiting its turn: its chat, its id, and the files it brings (read when its
    turn comes, then stored with it; empty: none)."""

    conversation_id: str
    message_id: int
    files: tuple[Path, ...] = ()

    def chips(self) -> tuple[Attachment, ...]:
        """Its files as its row shows them until they are read."""
        return tuple(Attachment(name=p.name, path=str(p)) for p in self.files)


def files_not_read(files: tuple[Path, ...], why: str, *, pick_model: bool = False) -> str:
    """What a waiting message whose ``files`` were never read says on it: why it was not
    sent, the files, and what brings them back (no Send now: they are attached again)."""
    again = (f"Pick a model, then attach {them(files)} again." if pick_model
             else f"Attach {them(files)} again to ask.")
    return f"Not sent: {why}, so {names_of(files)} {were(files)} not read. {again}"


@dataclass
class ActiveReply:
    conversation_id: str
    message_id: int
    writer: ReplyWriter
    settings: GenerationSettings
    row: int | None  # row in the chat model while its conversation is open
    thinking_since: float | None = None  # monotonic time of the first thinking chunk
    thinking_ms: float | None = None  # how long it thought, once the answer started
    user_id: int | None = None  # the user message it answers (its sources are stored there)
    calls: list[ToolCall] = field(default_factory=list)  # this round's, stored with its row
    last_id: int = 0  # the turn's lowest row so far (the next one goes below it)
    next_round: bool = False  # a tool result was written: the next delta starts a new row
    # failing before it wrote anything, the reply stays as a failed row offering Retry
    # (False: a regenerated reply, which gives way to the version it was asked beside)
    keep_failed: bool = True
    toolbox: Toolbox | None = None  # what this turn may call (its own chat's tools)

    def measured_thinking_ms(self) -> float | None:
        """How long the model has thought (None: it has not thought)."""
        if self.thinking_since is None:
            return None
        if self.thinking_ms is not None:
            return self.thinking_ms
        return (time.monotonic() - self.thinking_since) * 1000


class ChatController(QObject):
    """Signals:
    conversation_opened(object conversation_id | None, dict chat_values)
    generating_changed(bool)
    model_loading(str path)
    model_loaded(ModelInfo)
    model_load_failed(str message)
    model_unloaded(): the model was closed on request
    stats_changed(GenerationStats)
    edit_started(str text): the composer should hold this text for editing.
    edit_ended(): edit mode is over (sent, cancelled, or the chat changed).
    deleted(str text): something was deleted; ``undo_delete`` brings it back.
    notice(str text): a short status-bar note ("Copied", "Exported to …").
    prefill_progress(int done, int total): the model is reading a long prompt (tokens of
        the prompt read so far); (0, 0) when it has finished reading or the reply ended.
    waiting_for_model(bool): a message sent while the model loads is queued (True) until
        the model is ready or the load failed (False).
    import_progress(Progress | None): how far the chat import is; None when it has ended.
    approval_requested(ApprovalRequest): the model asks to run a tool (``request.call``);
        ``answer_approval`` (or ``request.answer``) says yes or no. Without a listener the
        call is refused, so a turn never waits on nobody.
    conversation_titled(str conversation_id, str title): the model named the chat.
    held_stopped(int message_id): Stop dropped the message held for its files (``hold``):
        it stays in its chat, unanswered.
    busy_changed(object conversation_id | None, str what): the chat whose message is in
        flight changed, or what it does ("answering", "waiting", "reading"; "" with None).
    line_changed(object tuple[str, ...]): the chats whose message waits its turn, in order.
    """

    conversation_opened = Signal(object, dict)
    generating_changed = Signal(bool)
    model_loading = Signal(str)
    model_loaded = Signal(object)
    model_load_failed = Signal(str)
    model_unloaded = Signal()
    stats_changed = Signal(object)
    edit_started = Signal(str)
    edit_ended = Signal()
    deleted = Signal(str)
    notice = Signal(str)
    prefill_progress = Signal(int, int)
    waiting_for_model = Signal(bool)
    import_progress = Signal(object)
    approval_requested = Signal(object)
    conversation_titled = Signal(str, str)
    held_stopped = Signal(int)
    busy_changed = Signal(object, str)
    line_changed = Signal(object)

    def __init__(
        self,
        history: History,
        settings: Settings,
        bridge: MessageBridge,
        loader: EngineLoader | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.history = history
        self.settings = settings
        self.bridge = bridge
        self.chat_model = ChatModel(self)
        self.conversations = ConversationListModel(history, self)
        self.worker = GenerationWorker(loader)
        self.host = ThreadHost(self.worker, "hearth-generation", stop=self.worker.stop, parent=self)
        self.current_id: str | None = None
        self.model_info: ModelInfo | None = None
        self.loading_path: str | None = None
        self.abandoned_load = False  # quit left a model load running (nothing to save)
        self.last_stats: GenerationStats | None = None
        self._active: ActiveReply | None = None
        self._queued: str | None = None  # the conversation whose message waits for the model
        self._queued_retriever: Retriever | None = None  # what its chat searches
        #: the message stored in its chat and held while its files are read: (chat, id)
        self._held: tuple[str, int] | None = None
        self._held_waits = False  # its files are read; it waits for the model to load
        #: messages sent while another was in flight, waiting their turn, in order
        self._line: list[InLine] = []
        self._reading = False  # a prefill progress is showing
        self._edit_row: int | None = None
        self._edit_id: int | None = None
        self._last_deletion: Deletion | None = None
        self._pending_values: dict[str, Any] = {}
        self._approval: ApprovalRequest | None = None
        # the title being written: the request and the title it may replace
        self._title: tuple[TitleRequest, str] | None = None
        self._title_again: set[str] = set()  # chats whose title gave way to a reply
        #: what a turn may call and search (None: none; app/tools and app/documents set them)
        self.toolbox: Toolbox | None = None
        self.retriever: Retriever | None = None
        #: the toolbox of a chat not on screen, for its held message's reply (``release``);
        #: app/ui/tool_controller.py sets it (None: such a reply runs without tools)
        self.toolbox_for: Callable[[str], Toolbox | None] | None = None
        #: what a chat not on screen searches, for its waiting message's reply
        #: (``_next_in_line``); app/ui/documents_controller.py sets it
        self.retriever_for: Callable[[str], Retriever | None] | None = None
        #: a waiting message with files, its turn come: hold it (``hold_turn``) and read its
        #: files, then ``release`` it (chat, id, files → False when nothing was done: Hearth
        #: is closing); app/ui/documents_controller.py sets it (None: such a message is not
        #: sent)
        self.read_files: Callable[[str, int, tuple[Path, ...]], bool] | None = None
        self._busy: tuple[str | None, str] = (None, "")  # what busy_changed last said
        # first of their listeners: the list's mark is right when the window's run
        self.generating_changed.connect(self._sync_busy)
        self.waiting_for_model.connect(self._sync_busy)
        self.generating_changed.connect(self._on_generating)
        self.line_changed.connect(self.conversations.set_line)
        w = self.worker  # its signals arrive queued on this (the UI) thread
        w.loaded.connect(self.on_loaded)
        w.load_failed.connect(self.on_load_failed)
        w.unloaded.connect(self.on_unloaded)
        w.event.connect(self.on_event)
        w.approval_requested.connect(self.on_approval_requested)
        w.failed.connect(self.on_failed)
        w.titled.connect(self.on_titled)
        w.crashed.connect(self.bridge.crash)
        # imports run as a job on their own thread, with their own connection (one
        # transaction: a cancel or failure leaves the history as it was)
        self.imports = JobRunner("hearth-import", self)
        iw = self.imports.worker
        iw.progress.connect(self.on_import_progress)
        iw.finished.connect(self.on_import_finished)
        iw.failed.connect(self.on_import_failed)
        iw.cancelled.connect(self.on_import_cancelled)
        iw.crashed.connect(self.bridge.crash)
        self._import_path: Path | None = None

    # state --------------------------------------------------------------------------------

    @property
    def generating(self) -> bool:
        """A reply is streaming, or a message waits for the model to load or is held while
        its files are read (one message in flight at a time, whichever chat it is in)."""
        return self._active is not None or self._queued is not None or self._held is not None

    @property
    def busy_conversation(self) -> str | None:
        """The chat whose message is in flight (``generating``), open or not; None when
        nothing is."""
        return self._busy_now()[0]

    @property
    def busy_what(self) -> str:
        """What the busy chat's message does: "answering", "waiting" (for the model to
        load) or "reading" (its files); "" when none is in flight."""
        return self._busy_now()[1]

    def _busy_now(self) -> tuple[str | None, str]:
        if self._active is not None:
            return self._active.conversation_id, "answering"
        if self._queued is not None:
            return self._queued, "waiting"
        if self._held is not None:
            return self._held[0], "waiting" if self._held_waits else "reading"
        return None, ""

    def _sync_busy(self, *_: object) -> None:
        """Mark the busy chat's row in the list, and say so when it changed."""
        busy = self._busy_now()
        if busy == self._busy:
            return
        self._busy = busy
        self.conversations.set_busy(*busy)
        self.busy_changed.emit(*busy)

    def busy_title(self) -> str:
        """The title of the busy chat, as the list shows it ("" when none is busy)."""
        cid = self.busy_conversation
        if cid is None:
            return ""
        conv = self.history.get_conversation(cid)
        return (conv.title if conv is not None else "") or "New chat"

    def busy_sentence(self) -> str:
        """Why a message written in another chat is not sent now (an edit, or a change to
        a chat: a new message, with files or not, waits its turn instead)."""
        return (f"The model is busy in the chat “{self.busy_title()}”: wait for that reply "
                "to end, or stop it, then send this one (it stays in the box).")

    # the line: messages waiting their turn --------------------------------------------------

    @property
    def would_wait_turn(self) -> bool:
        """A message sent in the open chat now would wait its turn: another chat's message
        is in flight, or messages wait theirs."""
        busy = self.busy_conversation
        return busy != self.current_id and (busy is not None or bool(self._line))

    def _join_line(self, conversation_id: str, message_id: int,
                   files: tuple[Path, ...] = ()) -> None:
        self._line.append(InLine(conversation_id, message_id, files))
        self._show_line()
        self.line_changed.emit(self.line)
        if not self.generating:  # what was in flight ended meanwhile
            self._on_generating(False)

    def _show_line(self) -> None:
        """The open chat's waiting message says so on its row, with the files it brings
        (on screen only: they are stored with it once read)."""
        for waiting in self._line:
            if waiting.conversation_id == self.current_id:
                row = self.chat_model.row_of(waiting.message_id)
                if row >= 0:
                    self.chat_model.update_message(row, status=WAITING_STATUS, **(
                        {"parts": waiting.chips()} if waiting.files else {}))

    def _leave_line(self, index: int) -> InLine:
        waiting = self._line.pop(index)
        if waiting.conversation_id == self.current_id:
            row = self.chat_model.row_of(waiting.message_id)
            if row >= 0 and self.chat_model.message(row).status == WAITING_STATUS:
                self.chat_model.update_message(row, status="complete", **(
                    {"parts": ()} if waiting.files else {}))
        self.line_changed.emit(self.line)
        return waiting

    def _on_generating(self, generating: bool) -> None:
        if not generating and self._line:  # after every listener has seen the end
            QTimer.singleShot(0, self._next_in_line)

    def _next_in_line(self) -> None:
        """The message in flight is done: the first waiting one is answered in its own
        chat (its tools, libraries and settings), open or not. One whose chat went, or
        that is no longer its chat's last message, is passed over."""
        while self._line and not self.generating:
            cid, message_id, files = self._leave_line(0)
            try:
                path = self.history.active_path(cid)
            except StorageError as exc:
                self.bridge.report(exc)
                continue
            if not path or path[-1].id != message_id:
                continue
            if files:  # its files are read now, then it is answered (or says why not)
                if self.model_info is None and self.loading_path is None:
                    self._unsend(cid, message_id, files_not_read(
                        files, "no model was loaded when its turn came", pick_model=True),
                        files)
                elif self.read_files is None or not self.read_files(cid, message_id, files):
                    self._unsend(cid, message_id, files_not_read(
                        files, "Hearth was closing when its turn came"), files)
                continue
            if self.model_info is None and self.loading_path is not None:
                self._queued, self._queued_retriever = cid, self._retriever_of(cid)
                self.waiting_for_model.emit(True)
                self.generating_changed.emit(True)
                return
            if self.model_info is None:
                self._unsend(cid, message_id, "Not sent: no model was loaded when its turn "
                                              "came. Pick a model, then press Send now.")
                continue
            started = self._start_reply() if cid == self.current_id else self._start_reply(
                conversation_id=cid, retriever=self._retriever_of(cid))
            if started:
                return

    def _retriever_of(self, conversation_id: str) -> Retriever | None:
        if conversation_id == self.current_id:
            return self.retriever
        return self.retriever_for(conversation_id) if self.retriever_for else None

    def _asked_again(self) -> int:
        """The open chat's last question is asked again: the note saying it was not sent
        goes (it is being sent now). Its id."""
        row = self.chat_model.rowCount() - 1
        self._read_along(row)
        return self.chat_model.message(row).id

    def _read_along(self, row: int) -> None:
        """The open chat's message at ``row``, left unsent, goes to the model now (asked
        again, or read with the message sent after it): its note saying it was not sent
        goes, with its Send now."""
        if row < 0:
            return
        msg = self.chat_model.message(row)
        if "unsent" in msg.provenance:
            provenance = {k: v for k, v in msg.provenance.items()
                          if k not in ("unsent", "resend")}
            try:
                self.history.update_message(msg.id, provenance=provenance)
            except StorageError as exc:
                self.bridge.report(exc)
            else:
                self.chat_model.update_message(row, provenance=provenance)

    def _unsend_last(self, conversation_id: str, sentence: str) -> None:
        """``_unsend`` for chat ``conversation_id``'s last message (a user's, unanswered)."""
        try:
            path = self.history.active_path(conversation_id)
        except StorageError as exc:
            self.bridge.report(exc)
            return
        if path and path[-1].role == "user":
            self._unsend(conversation_id, path[-1].id, sentence)

    def _unsend(self, conversation_id: str, message_id: int, sentence: str,
                files: tuple[Path, ...] = ()) -> None:
        """The waiting message stays in its chat, unanswered, saying why (stored), whole:
        its row offers Send now (``resend``) — unless it brought ``files`` not read yet,
        which are asked for again instead (the sentence names them)."""
        provenance: dict[str, Any] = {"unsent": sentence}
        if not files:
            provenance["resend"] = True
        try:
            self.history.update_message(message_id, provenance=provenance)
        except StorageError as exc:
            self.bridge.report(exc)
            return
        if conversation_id == self.current_id:
            row = self.chat_model.row_of(message_id)
            if row >= 0:
                self.chat_model.update_message(row, status="complete", provenance=provenance,
                                               **({"parts": ()} if files else {}))

    @property
    def line(self) -> tuple[str, ...]:
        """The chats whose message waits its turn, in the order they go."""
        return tuple(waiting.conversation_id for waiting in self._line)

    def in_line(self, conversation_id: str | None) -> bool:
        """A message in chat ``conversation_id`` waits its turn."""
        return conversation_id is not None and conversation_id in self.line

    @property
    def importing(self) -> bool:
        """A chat import is running on the import thread."""
        return self._import_path is not None

    @property
    def queued(self) -> bool:
        """A message was sent while the model loads; it goes out once the model is ready."""
        return self._queued is not None or self._held_waits

    @property
    def editing(self) -> bool:
        return self._edit_row is not None

    def chat_values(self) -> dict[str, Any]:
        """Per-chat settings of the open conversation (or of the next new one): the app's
        settings, the loaded model's suggestions on top (a greedy config shows temperature
        0), then what the chat itself stores or the user changed."""
        base = {**self.settings.as_dict(), **model_chat_values(self._model_defaults())}
        return self._values_of(self.current_id, base)

    def _values_of(self, conversation_id: str | None, base: dict[str, Any]) -> dict[str, Any]:
        if conversation_id is None:
            return chat_settings(base, self._pending_values)
        conv = self.history.get_conversation(conversation_id)
        overrides = dict(conv.settings) if conv else {}
        if conv:
            overrides["system_prompt"] = conv.system_prompt
        return chat_settings(base, overrides)

    def generation_settings(self, values: dict[str, Any] | None = None) -> GenerationSettings:
        """What the next reply in the open chat (or the chat of ``values``) runs with (a
        fresh random seed each time)."""
        return generation_settings(values or self.chat_values(), self._model_defaults(),
                                   seed=random.randrange(2**31))

    def _model_defaults(self) -> dict:
        return self.model_info.generation_defaults if self.model_info else {}

    # models -------------------------------------------------------------------------------

    def load_model(self, path: str | Path) -> bool:
        if self.generating:
            self.bridge.info("Stop the reply before switching models.")
            return False
        self._cancel_title()
        self.loading_path = str(path)
        self.model_loading.emit(str(path))
        self.host.post(self.worker.on_load_requested, str(path))
        return True

    def unload_model(self) -> bool:
        """Close the loaded model to free its memory (chats stay; sending asks for a model)."""
        if self.generating:
            self.bridge.info("Stop the reply before unloading the model.")
            return False
        if self.model_info is None:
            return False
        self._cancel_title()
        self.host.post(self.worker.on_unload_requested)
        return True

    def on_unloaded(self) -> None:
        self.model_info = None
        self.model_unloaded.emit()

    def on_loaded(self, info: ModelInfo) -> None:
        self.loading_path = None
        self.model_info = info
        if self.current_id is None:  # the unsent new chat now shows this model's defaults
            self.conversation_opened.emit(None, self.chat_values())
        self.model_loaded.emit(info)
        retriever, queued = self._queued_retriever, self._take_queued()
        if queued is not None and self.history.get_conversation(queued) is not None:
            # the reply goes where the message was written, in its chat's own settings and
            # tools; another chat opened meanwhile stays open (it streams there unseen)
            started = self._start_reply() if queued == self.current_id else \
                self._start_reply(conversation_id=queued, retriever=retriever)
            if not started:
                self.generating_changed.emit(False)

    def on_load_failed(self, message: str) -> None:
        self.loading_path = None
        queued = self._take_queued()
        self.bridge.error(message)
        self.model_load_failed.emit(message)
        if queued is not None:
            self.notice.emit("Your message was not sent: the model did not load.")
            self._unsend_last(queued, "Not sent: the model did not load. Pick a model, "
                                      "then press Send now.")
            self.generating_changed.emit(False)

    def _take_queued(self) -> str | None:
        queued, self._queued = self._queued, None
        self._queued_retriever = None
        if queued is not None:
            self.waiting_for_model.emit(False)
        return queued

    # conversations ------------------------------------------------------------------------

    def new_conversation(self) -> None:
        """Show an empty chat; the conversation is created when the first message is sent."""
        self.current_id = None
        self._end_edit()
        self._last_deletion = None
        self._pending_values = {}
        self.chat_model.set_messages([])
        self.conversation_opened.emit(None, self.chat_values())

    def open_conversation(self, conversation_id: str) -> None:
        if conversation_id == self.current_id:
            return
        if self.history.get_conversation(conversation_id) is None:
            return
        self.current_id = conversation_id
        self._end_edit()
        self._last_deletion = None
        conv = self.history.get_conversation(conversation_id)
        messages = self.history.active_path(conversation_id)
        active = self._active
        if active is not None:
            active.row = None
            if active.conversation_id == conversation_id:
                for row, msg in enumerate(messages):
                    if msg.id == active.message_id:
                        messages[row] = dataclasses.replace(
                            msg, content=active.writer.text, reasoning=active.writer.reasoning,
                            reasoning_ms=active.thinking_ms or 0.0)
                        active.row = row
        self.chat_model.set_messages(messages)
        self._show_line()
        self.conversation_opened.emit(conversation_id, self.chat_values())
        if conv is not None and conv.damaged:
            self.bridge.warning(
                f"Part of the chat “{conv.title or 'New chat'}” could not be read from "
                f"{self.history.path}: the damaged text is shown with � marks or left empty, "
                "and a date that no calendar can show as 1 January 1970. "
                "Export it to keep what is readable."
            )

    def set_pinned(self, conversation_id: str, pinned: bool) -> None:
        """Pin a chat to the top of the list, or unpin it."""
        self._guard(self.history.set_pinned, conversation_id, pinned)
        self.conversations.refresh()

    def rename_conversation(self, conversation_id: str, title: str) -> None:
        self._guard(self.history.rename_conversation, conversation_id, title)
        self.conversations.upsert(conversation_id)

    def delete_conversation(self, conversation_id: str) -> None:
        busy = {self._active.conversation_id if self._active else None,
                self._held[0] if self._held else None}
        if conversation_id in busy:
            self.bridge.info("Stop the reply before deleting this chat.")
            return
        if self.in_line(conversation_id):
            self._leave_line(self.line.index(conversation_id))
        if self._title is not None and self._title[0].conversation_id == conversation_id:
            self._cancel_title()
        self._guard(self.history.delete_conversation, conversation_id)
        self.host.post(self.worker.on_forget_requested, conversation_id)
        self.conversations.remove(conversation_id)
        if conversation_id == self.current_id:
            self.new_conversation()

    def update_chat_values(self, values: dict[str, Any], *,
                           conversation_id: str | None = None) -> None:
        """The side panel changed a per-chat value of the open chat (or of
        ``conversation_id``: the chat it was typed in, when another one is opening)."""
        keys = {s.key for s in PER_CHAT}
        values = {k: v for k, v in values.items() if k in keys}
        target = conversation_id or self.current_id
        if target is None:
            self._pending_values = values
            return
        prompt = values.pop("system_prompt", None)
        self._guard(
            self.history.update_conversation,
            target,
            system_prompt=prompt,
            settings=values,
        )

    # turns --------------------------------------------------------------------------------

    def send(self, text: str, *, parts: tuple[Part, ...] = (), start: bool = True,
             files: tuple[Path, ...] = ()) -> bool:
        """Save the user's message (with ``parts``: its attachments), then ask the worker
        for a reply (``start`` False: later, with ``reply_to_last``). ``files``: files to
        read when its turn comes, for a message that waits its turn (``would_wait_turn``;
        app/ui/documents_controller.py reads them then, through ``read_files``)."""
        text = clean_text(text).strip()
        if not text:
            return False
        way = self._way_to_send(queueable=start and not parts and self._edit_id is None)
        if way is None:
            return False
        queue, waiting = way
        if files and not queue:  # read now instead, held (``hold``): not this way
            return False
        unanswered = None if waiting or parts or files or not start else \
            self._unanswered(text)
        if unanswered is not None:  # the same question again: answer it, do not repeat it
            if unanswered >= 0:
                if queue:  # its failed reply is retried once the other reply is done
                    self.bridge.info(self.busy_sentence())
                    return False
                return self.retry(unanswered)
            return self._answer_last(self._asked_again(), queue=queue, waiting=False)
        try:
            if self.current_id is None:
                values = self.chat_values()  # what the panel shows for the new chat
                prompt = values.pop("system_prompt")
                if waiting:  # keep only the user's choices: the model's suggestions apply
                    values = {k: v for k, v in self._pending_values.items()
                              if k != "system_prompt"}
                model_id = self.loading_path or (self.model_info and self.model_info.path)
                conv = self.history.create_conversation(
                    system_prompt=prompt, settings=values, model_id=model_id)
                self.current_id = conv.id
                self._pending_values = {}
            if self._edit_id is not None and self._edit_row is not None:
                msg = self.history.edit_message(self._edit_id, text)  # a new variant
                self.chat_model.truncate(self._edit_row)
                self._end_edit()
            else:
                msg = self.history.add_message(self.current_id, "user", text,
                                               parts=parts)
        except StorageError as exc:
            self.bridge.report(exc)
            return False
        self._read_along(self.chat_model.rowCount() - 1)
        self.chat_model.append(msg)
        self.conversations.upsert(self.current_id)
        if not start:
            return True
        return self._answer_last(msg.id, queue=queue, waiting=waiting, files=files)

    def send_unsent(self, row: int) -> bool:
        """"Send now" on the open chat's last message, one left unsent as it was (a quit
        while it waited its turn or for the model): it is answered where it is, or waits its
        turn as any message sent now does. A message whose files could not be read has no
        such button: its files are asked for again (app/ui/documents_controller.py)."""
        if row != self.chat_model.rowCount() - 1 or row < 0 or self._edit_id is not None:
            return False
        msg = self.chat_model.message(row)
        if msg.role != "user" or not msg.provenance.get("resend"):
            return False
        way = self._way_to_send(queueable=not msg.parts)
        if way is None:
            return False
        queue, waiting = way
        return self._answer_last(self._asked_again(), queue=queue, waiting=waiting)

    def _way_to_send(self, *, queueable: bool) -> tuple[bool, bool] | None:
        """How a message sent in the open chat now goes: (``queue``: it waits its turn
        behind another chat's message, ``waiting``: it waits for the model to load), or
        None when it cannot go now (the banner says why)."""
        busy = self.busy_conversation
        # another chat's message is in flight (or waits its turn): this one waits after it
        queue = queueable and self.would_wait_turn
        if queue and self.in_line(self.current_id):
            self.bridge.info("A message in this chat already waits its turn: it goes when "
                             f"the reply in “{self.busy_title()}” ends (or press Don't send).")
            return None
        if self.generating and not queue:
            if busy is not None and busy != self.current_id:
                self.bridge.info(self.busy_sentence())
            else:
                self.bridge.info("Wait for the reply to finish, or stop it first.")
            return None
        if self.importing:  # the import holds the history's write lock until it ends
            self.bridge.info("Wait for the chat import to finish, or cancel it first.")
            return None
        waiting = self.loading_path is not None  # queued until the model is ready
        if self.model_info is None and not waiting:
            self.bridge.error("No model is loaded yet. Pick a model in the toolbar first.")
            return None
        return queue, waiting

    def _answer_last(self, message_id: int, *, queue: bool, waiting: bool,
                     files: tuple[Path, ...] = ()) -> bool:
        """Ask for the reply to the open chat's last message ``message_id`` now, after the
        message in flight (``queue``: with the ``files`` to read then) or once the model
        has loaded (``waiting``)."""
        if queue:
            assert self.current_id is not None
            self._join_line(self.current_id, message_id, files)
            return True
        if waiting:
            self._queued, self._queued_retriever = self.current_id, self.retriever
            self.waiting_for_model.emit(True)
            self.generating_changed.emit(True)  # the composer offers Stop, not Send
            return True
        return self._start_reply()

    def reply_to_last(self) -> bool:
        """Ask for the reply to the open chat's last message (one sent with
        ``start=False``)."""
        if self.generating or self.model_info is None or self.current_id is None:
            return False
        return self._start_reply()

    def hold(self, text: str) -> int | None:
        """Store the user's message in the open chat now and hold it there while its files
        are read (app/ui/documents_controller.py): until ``release`` or Stop it is the one
        message in flight (``generating``), whichever chat is open meanwhile. Its id, or None
        when it was not stored (the banner says why)."""
        if not self.send(text, start=False):
            return None
        assert self.current_id is not None
        message_id = self.chat_model.message(self.chat_model.rowCount() - 1).id
        self._held = (self.current_id, message_id)
        self.generating_changed.emit(True)  # the composer offers Stop, not Send
        return message_id

    def hold_turn(self, conversation_id: str, message_id: int) -> None:
        """``hold`` for a message stored while it waited its turn, its turn come
        (``read_files``): it is held in its chat while its files are read."""
        self._held = (conversation_id, message_id)
        self.generating_changed.emit(True)

    def wait_for_model(self) -> None:
        """The held message's files are read, and it waits for the model that loads (how
        they go in depends on that model's context): it is marked as waiting for the model,
        as a message sent while the model loads is, until ``release`` or Stop."""
        if self._held is not None and not self._held_waits:
            self._held_waits = True
            self.waiting_for_model.emit(True)

    def _end_held_wait(self) -> None:
        if self._held_waits:
            self._held_waits = False
            self.waiting_for_model.emit(False)

    @property
    def turn_toolbox(self) -> Toolbox | None:
        """The toolbox the running turn calls (None: no turn, or one without tools); its
        chat's own, also when another chat is open by now."""
        return self._active.toolbox if self._active is not None else None

    @property
    def held(self) -> tuple[str, int] | None:
        """(chat, message id) of the message held while its files are read, or None."""
        return self._held

    def release(self, parts: tuple[Part, ...] = (), *, retriever: Retriever | None = None,
                start: bool = True, unsent: str = "") -> bool:
        """The held message's files are read: store ``parts`` with it and ask for its reply
        in its own chat, also when another chat is open by then (the reply streams there
        unseen, as one does when the user opens another chat while it is written); while
        the model still loads it waits for it as any message does. ``retriever``: the
        held chat's (the open chat's ``retriever`` may be another's); its tools are its
        chat's too (``toolbox_for``), as are its system prompt and settings: the reply is
        the one it would get were its chat open. ``start`` False: it
        stays unanswered; ``unsent`` says why (none of its files could be read), stored with
        it (provenance ``unsent``, shown on it). True when its reply started or waits for
        the model."""
        held, self._held = self._held, None
        if held is None:
            return False
        self._end_held_wait()
        cid, message_id = held
        provenance = {"unsent": unsent} if unsent else None
        try:
            self.history.update_message(message_id, parts=parts, provenance=provenance)
            path = self.history.active_path(cid)
        except StorageError as exc:
            self.bridge.report(exc)
            path = []
        if cid == self.current_id:
            row = self.chat_model.row_of(message_id)
            stored = next((m for m in path if m.id == message_id), None)
            if row >= 0 and stored is not None:
                self.chat_model.update_message(row, status=stored.status, parts=stored.parts,
                                               provenance=stored.provenance)
        last = path[-1] if path else None
        if not start or last is None or last.id != message_id:  # not to be answered now
            self.generating_changed.emit(False)
            return False
        if self.model_info is None and self.loading_path is not None:
            self._queued, self._queued_retriever = cid, retriever  # answered in its chat
            self.waiting_for_model.emit(True)
            return True
        if self.model_info is None:
            self.bridge.error("No model is loaded yet. Pick a model in the toolbar first.")
            self.generating_changed.emit(False)
            return False
        if not self._start_reply(conversation_id=cid, retriever=retriever):
            self.generating_changed.emit(False)
            return False
        return True

    def stop(self, conversation_id: str | None = None) -> bool:
        """Stop the streaming reply (sets the worker's Event directly; not queued), or drop
        the message waiting for the model or held for its files (it stays in the chat,
        unanswered), when it is in ``conversation_id`` (None: the open chat). A message in
        flight in another chat goes on: False, nothing was stopped."""
        target = conversation_id or self.current_id
        if target is not None and target != self.busy_conversation and self.in_line(target):
            cid, message_id, files = self._leave_line(self.line.index(target))
            if files:  # it asks for its files again
                self._unsend(cid, message_id, files_not_read(
                    files, "stopped while it waited its turn"), files)
            return True  # it stays, unanswered
        if target is None or target != self.busy_conversation:
            return False
        if self._active is not None:
            self.worker.stop()
        elif self._take_queued() is not None:
            self.generating_changed.emit(False)
        elif self._held is not None:
            _cid, message_id = self._held
            self._held = None
            self._end_held_wait()
            self.held_stopped.emit(message_id)
            self.generating_changed.emit(False)
        return True

    def perform(self, action: str, row: int) -> bool:
        """A per-message action from the chat view: edit, regenerate, retry, send (an
        unsent message's Send now), delete, previous or next (the ``‹ ›`` branch arrows)."""
        if action == "regenerate":
            return self.regenerate(row)
        if action == "retry":
            return self.retry(row)
        if action == "send":
            return self.send_unsent(row)
        if action == "edit":
            return self.begin_edit(row)
        if action == "delete":
            return self.delete_turn(row)
        if action in ("previous", "next") and 0 <= row < self.chat_model.rowCount():
            step = -1 if action == "previous" else 1
            return self.switch_variant(row, self.chat_model.message(row).variant_index + step)
        return False

    def last_row(self, role: str) -> int | None:
        """The row of the last message by ``role`` on screen, or None."""
        messages = self.chat_model.messages()
        return next((i for i in range(len(messages) - 1, -1, -1)
                     if messages[i].role == role), None)

    def regenerate(self, row: int) -> bool:
        """Ask again for the reply at ``row``: a new variant beside it (the old one stays)."""
        if not self._can_change(row) or self.chat_model.message(row).role != "assistant":
            return False
        try:
            reply = self.history.regenerate(self.chat_model.message(row).id)
        except StorageError as exc:
            self.bridge.report(exc)
            return False
        self._end_edit()
        self.chat_model.truncate(row)
        return self._start_reply(reply, keep_failed=False)

    def retry(self, row: int) -> bool:
        """Ask again for the failed reply at ``row``, on the same turn: a reply with nothing
        in it is written again in place; one that holds part of an answer gets a new version
        beside it (``regenerate``: the part stays one ‹ › away)."""
        if not self._can_change(row):
            return False
        msg = self.chat_model.message(row)
        if msg.role != "assistant" or msg.status != "failed":
            return False
        if self.model_info is None:
            self.bridge.error("No model is loaded yet. Pick a model in the toolbar first.")
            return False
        error = msg.provenance.get("error")
        if isinstance(error, str):  # this try's outcome replaces the last one's notice
            self.bridge.withdraw(error)
        if msg.content or msg.reasoning or msg.parts:
            return self.regenerate(row)
        try:
            self.history.update_message(msg.id, status="streaming", provenance={})
            reply = self.history.get_message(msg.id)
        except StorageError as exc:
            self.bridge.report(exc)
            return False
        if reply is None:
            return False
        self._end_edit()
        self.chat_model.truncate(row)
        return self._start_reply(reply)

    def _unanswered(self, text: str) -> int | None:
        """Where the open chat's last question, the same as ``text``, waits for an answer:
        the row of its failed empty reply, -1 when it has no reply, None when it was
        answered (or is another question)."""
        if self.current_id is None or self._edit_id is not None:
            return None
        messages = self.chat_model.messages()
        rows = len(messages)
        if rows and messages[-1].role == "assistant" and messages[-1].status == "failed" \
                and not (messages[-1].content or messages[-1].reasoning or messages[-1].parts):
            question, answer = rows - 2, rows - 1
        else:
            question, answer = rows - 1, -1
        if question < 0:
            return None
        asked = messages[question]
        if asked.role != "user" or asked.content != text or asked.parts:
            return None
        return answer

    def begin_edit(self, row: int) -> bool:
        """Put a user message in the composer; sending it adds a new version of that turn
        (the old one and its replies stay, one ``‹ ›`` away)."""
        if not self._can_change(row) or self.chat_model.message(row).role != "user":
            return False
        self._edit_row = row
        self._edit_id = self.chat_model.message(row).id
        self.edit_started.emit(self.chat_model.message(row).content)
        return True

    def cancel_edit(self) -> None:
        self._end_edit()

    def _end_edit(self) -> None:
        was_editing = self._edit_row is not None
        self._edit_row = None
        self._edit_id = None
        if was_editing:
            self.edit_ended.emit()

    def switch_variant(self, row: int, index: int) -> bool:
        """Show version ``index`` (0-based) of the turn at ``row`` and the branch below it."""
        if not self._can_change(row):
            return False
        msg = self.chat_model.message(row)
        if not 0 <= index < msg.variant_count:
            return False
        try:
            path = self.history.switch_variant(msg.id, index)
        except StorageError as exc:
            self.bridge.report(exc)
            return False
        self._end_edit()
        self._show_path_from(row, path)
        return True

    def delete_turn(self, row: int) -> bool:
        """Delete a user message with the reply shown below it, or a reply alone (never the
        question above it). ``deleted`` offers the Undo."""
        if not self._can_change(row):
            return False
        msg = self.chat_model.message(row)
        try:
            deletion = self.history.delete_turn(msg.id)
        except StorageError as exc:
            self.bridge.report(exc)
            return False
        self._last_deletion = deletion
        self._end_edit()
        assert self.current_id is not None
        self._show_path_from(row, self.history.active_path(self.current_id))
        self.conversations.upsert(self.current_id)
        what = "Reply deleted" if msg.role == "assistant" else (
            "Message and reply deleted" if len(deletion.message_ids) > 1 else "Message deleted"
        )
        self.deleted.emit(what)
        return True

    @property
    def can_undo_delete(self) -> bool:
        return self._last_deletion is not None

    def undo_delete(self) -> bool:
        """Bring back what the last delete in the open chat hid."""
        deletion = self._last_deletion
        if deletion is None or self.generating:
            return False
        self._last_deletion = None
        try:
            self.history.undo_delete(deletion)
        except StorageError as exc:
            self.bridge.report(exc)
            return False
        if deletion.conversation_id == self.current_id:
            self._end_edit()
            self.chat_model.set_messages(self.history.active_path(deletion.conversation_id))
        self.conversations.upsert(deletion.conversation_id)
        self.notice.emit("Restored")
        return True

    def _show_path_from(self, row: int, path: list[StoredMessage]) -> None:
        """Replace the rows from ``row`` on with ``path``'s (the rows above are unchanged)."""
        self.chat_model.truncate(row)
        for msg in path[row:]:
            self.chat_model.append(msg)

    def last_reply(self) -> str | None:
        for msg in reversed(self.chat_model.messages()):
            if msg.role == "assistant" and msg.content:
                return msg.content
        return None

    # export / import ----------------------------------------------------------------------

    def export_conversation(self, path: str | Path, fmt: str) -> bool:
        if self.current_id is None:
            self.bridge.info("Open a chat to export it.")
            return False
        try:
            text = (
                transfer.export_markdown(self.history, self.current_id)
                if fmt == "markdown"
                else transfer.export_json(self.history, self.current_id)  # every branch
            )
        except HearthError as exc:
            self.bridge.report(exc)
            return False
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as exc:
            self.bridge.error(f"The chat could not be exported to {path}: {exc.strerror}.")
            return False
        self.notice.emit(f"Exported to {path}")
        return True

    def import_conversation(self, path: str | Path) -> bool:
        """Start importing the export at ``path`` as a job (progress on ``import_progress``);
        when it ends its first chat opens, or the banner says why nothing was imported.
        False when it could not start (another import, or a reply, is running)."""
        if self.importing:
            self.bridge.info("A chat import is already running: wait for it, or cancel it.")
            return False
        if self.generating:
            self.bridge.info("Wait for the reply to finish, or stop it, before importing.")
            return False
        path = Path(path)
        job = importer.import_job(self.history.path, path, job_id=IMPORT_JOB)
        if not self.imports.submit(job):
            return False
        self._import_path = path
        self.import_progress.emit(Progress(None, f"Checking {path.name}…"))
        return True

    def cancel_import(self) -> None:
        """Stop the import: its transaction rolls back, nothing of the file is kept."""
        self.imports.cancel(IMPORT_JOB)

    def on_import_progress(self, _job_id: str, progress: Progress) -> None:
        if self.importing:
            self.import_progress.emit(progress)

    def on_import_finished(self, _job_id: str, ids: object) -> None:
        path = self._end_import()
        self.conversations.refresh()
        imported = list(ids) if isinstance(ids, list) else []
        if not imported:
            self.bridge.info(f"{path} holds no chats to import.")
            return
        self.open_conversation(imported[0])
        conv = self.history.get_conversation(imported[0])
        title = conv.title if conv is not None and conv.title else "New chat"
        more = f" and {len(imported) - 1:,} more" if len(imported) > 1 else ""
        self.notice.emit(f"Imported “{title}”{more}")

    def on_import_failed(self, _job_id: str, sentence: str) -> None:
        self._end_import()
        self.bridge.error(sentence)

    def on_import_cancelled(self, _job_id: str) -> None:
        path = self._end_import()
        self.notice.emit(f"Import of {path.name if path else 'the file'} cancelled: "
                         "nothing was imported.")

    def _end_import(self) -> Path | None:
        path, self._import_path = self._import_path, None
        self.import_progress.emit(None)
        return path

    # worker results -----------------------------------------------------------------------

    def on_event(self, conversation_id: str, event: object) -> None:
        """One event of the turn (app/chat/events.py), in the order the worker ran it."""
        active = self._active
        if active is None or active.conversation_id != conversation_id:
            return
        if isinstance(event, PrefillProgress):
            self.on_prefill_progress(conversation_id, event.done, event.total)
            return
        if isinstance(event, SourcesEvent):
            self._store_sources(active, event)
            return
        streams = isinstance(event, (TextDelta, ReasoningDelta, ToolCallEvent))
        if active.next_round and streams and not self._next_round(active):
            return
        if isinstance(event, TextDelta):
            self.on_chunk(conversation_id, event.text)
        elif isinstance(event, ReasoningDelta):
            self.on_reasoning_chunk(conversation_id, event.text)
        elif isinstance(event, ToolCallEvent):
            active.calls.append(event.call)
            if active.row is not None and conversation_id == self.current_id:
                self.chat_model.update_message(active.row, parts=tuple(active.calls))
        elif isinstance(event, ToolResultEvent):
            self._store_result(active, event.result)
        elif isinstance(event, Finished):
            if event.note:
                self.notice.emit(event.note)
            self.on_finished(conversation_id, reply_result(conversation_id, event,
                                                           self.model_info))

    def on_approval_requested(self, request: ApprovalRequest) -> None:
        active = self._active
        listened = self.isSignalConnected(QMetaMethod.fromSignal(self.approval_requested))
        if active is None or active.conversation_id != request.conversation_id or not listened:
            request.answer(False)
            return
        self._approval = request
        self.approval_requested.emit(request)

    def answer_approval(self, allowed: bool) -> None:
        """The user's answer to the tool call on show (``approval_requested``)."""
        request, self._approval = self._approval, None
        if request is not None:
            request.answer(allowed)

    def _store_sources(self, active: ActiveReply, event: SourcesEvent) -> None:
        """The passages found go with the user's message (rendered there on later turns)."""
        if active.user_id is None:
            return
        user = self.history.get_message(active.user_id)
        if user is None:
            return
        parts = (*user.parts, *event.sources)
        self._guard(self.history.update_message, user.id, parts=parts)
        row = self.chat_model.row_of(user.id)
        if row >= 0 and active.conversation_id == self.current_id:
            self.chat_model.update_message(row, parts=parts)

    def _store_result(self, active: ActiveReply, result: ToolResult) -> None:
        """A tool's result: the calling round's row is complete (its calls among its
        parts), the result is a ``tool`` row below it."""
        shown = active.conversation_id == self.current_id
        if not active.next_round:
            provenance = self._provenance(active, None, "tool_calls")
            try:
                active.writer.finish("complete", provenance,
                                     reasoning_ms=active.measured_thinking_ms(),
                                     parts=tuple(active.calls))
            except StorageError as exc:
                self.bridge.report(exc)
            if active.row is not None and shown:
                self.chat_model.update_message(
                    active.row, content=active.writer.text, status="complete",
                    provenance=provenance, reasoning=active.writer.reasoning,
                    parts=tuple(active.calls))
            active.next_round = True
        try:
            row = self.history.add_message(active.conversation_id, "tool", "",
                                           after=active.last_id, parts=(result,))
        except StorageError as exc:
            self.bridge.report(exc)
            return
        active.last_id = row.id
        if shown and active.row is not None:
            self.chat_model.append(row)

    def _next_round(self, active: ActiveReply) -> bool:
        """The model answers the results: a new streaming reply row below them."""
        try:
            reply = self.history.add_message(active.conversation_id, "assistant", "",
                                             status="streaming", after=active.last_id)
        except StorageError as exc:
            self.bridge.report(exc)
            return False
        shown = active.conversation_id == self.current_id and active.row is not None
        active.row = self.chat_model.append(reply) if shown else None
        active.message_id = active.last_id = reply.id
        active.writer = ReplyWriter(self.history, reply.id)
        active.calls = []
        active.thinking_since = active.thinking_ms = None
        active.next_round = False
        return True

    def on_prefill_progress(self, conversation_id: str, done: int, total: int) -> None:
        active = self._active
        if active is None or active.conversation_id != conversation_id:
            return
        if done < total:
            self._reading = True
            self.prefill_progress.emit(done, total)
        elif self._reading:
            self._done_reading()

    def _done_reading(self) -> None:
        self._reading = False
        self.prefill_progress.emit(0, 0)

    def on_chunk(self, conversation_id: str, text: str) -> None:
        active = self._active
        if active is None or active.conversation_id != conversation_id:
            return
        if self._reading:
            self._done_reading()
        shown = active.row is not None and conversation_id == self.current_id
        if active.thinking_since is not None and active.thinking_ms is None:
            active.thinking_ms = active.measured_thinking_ms()  # the answer starts
            if shown:
                self.chat_model.update_message(active.row, reasoning_ms=active.thinking_ms)
        active.writer.append(text)
        if shown:
            self.chat_model.append_text(active.row, text)

    def on_reasoning_chunk(self, conversation_id: str, text: str) -> None:
        active = self._active
        if active is None or active.conversation_id != conversation_id:
            return
        if self._reading:
            self._done_reading()
        if active.thinking_since is None:
            active.thinking_since = time.monotonic()
        active.writer.append_reasoning(text)
        if active.row is not None and conversation_id == self.current_id:
            self.chat_model.append_reasoning(active.row, text)

    def on_finished(self, conversation_id: str, result: GenerationResult) -> None:
        active = self._active
        if active is None or active.conversation_id != conversation_id:
            return
        status = "stopped" if result.finish_reason == "cancelled" else "complete"
        provenance = self._provenance(active, result.stats, result.finish_reason)
        provenance["provider"] = result.provider
        provenance["model"] = result.model
        if result.stats.reasoning_ms > 0:  # the engine's figure, from token to token
            active.thinking_ms = result.stats.reasoning_ms
        self.last_stats = result.stats
        self.stats_changed.emit(result.stats)
        if active.next_round:  # stopped after the results, before the model answered them
            self._end_turn()
            return
        self._end_reply(status, provenance, parts=tuple(active.calls))
        if status == "complete":
            self._name_chat(conversation_id)

    def on_failed(self, conversation_id: str, message: str) -> None:
        active = self._active
        if active is None or active.conversation_id != conversation_id:
            return
        self.bridge.error(message)  # first, so listeners to generating_changed can read it
        if active.next_round:  # the rows so far are complete; no new one was started
            self._end_turn()
        elif active.writer.text or active.writer.reasoning or active.keep_failed:
            provenance = self._provenance(active, None, None)  # kept: Retry asks again
            provenance["error"] = message
            self._end_reply("failed", provenance)
        else:  # a regenerated reply wrote nothing: it gives way to the one it was beside
            self._guard(self.history.delete_message, active.message_id)
            self._active = None
            if active.row is not None and conversation_id == self.current_id:
                self._show_path_from(active.row, self.history.active_path(conversation_id))
            if self._reading:
                self._done_reading()
            self.generating_changed.emit(False)

    # titles -------------------------------------------------------------------------------

    def _name_chat(self, conversation_id: str) -> None:
        """After a complete reply: ask the model for the chat's title when it is its first
        exchange (or a title before gave way to a reply) and the chat still has the title its
        first message gave it. The "chat_titles" setting can say never, or not remotely."""
        mode = self.settings.get("chat_titles")
        info = self.model_info
        if mode == "off" or info is None or (mode == "local" and is_remote_target(info.path)):
            return
        try:
            conv = self.history.get_conversation(conversation_id)
            path = self.history.active_path(conversation_id)
        except StorageError:
            return
        users = [row for row, m in enumerate(path) if m.role == "user"]
        if conv is None or not users or (
                len(users) > 1 and conversation_id not in self._title_again):
            return
        question = path[users[0]]
        answer = next((m for m in path[users[0] + 1:] if m.role == "assistant"
                       and m.status == "complete" and m.content.strip()), None)
        expected = title_from_text(question.content)
        if answer is None or conv.title != expected:
            return
        self._cancel_title()
        request = TitleRequest(conversation_id, question.content, answer.content)
        self._title = (request, expected)
        self.host.post(self.worker.on_title_requested, request)

    def _cancel_title(self) -> None:
        """The title being written gives way (a reply, a load, a quit goes first)."""
        if self._title is not None:
            request = self._title[0]
            request.cancel.set()
            self._title_again.add(request.conversation_id)
            self._title = None

    def on_titled(self, request: TitleRequest, title: str) -> None:
        """The model's title arrived: it replaces the first message's title, never one the
        user gave meanwhile (a rename always wins)."""
        if self._title is None or self._title[0] is not request:
            return  # cancelled: the chat is asked again after its next reply
        expected = self._title[1]
        self._title = None
        cid = request.conversation_id
        self._title_again.discard(cid)
        if not title:
            return
        conv = self.history.get_conversation(cid)
        if conv is None or conv.title != expected:
            return
        try:
            self.history.rename_conversation(cid, title)
        except StorageError as exc:
            self.bridge.report(exc)
            return
        self.conversations.upsert(cid)
        self.conversation_titled.emit(cid, title)

    # shutdown -----------------------------------------------------------------------------

    def shutdown(self) -> bool:
        """Stop → quit → wait; a reply still streaming is saved as stopped."""
        self.worker.stop()
        self._cancel_title()
        waited = self._take_queued()  # its message is stored, and says why it was not sent
        if waited is not None:
            self._unsend_last(waited, "Not sent: Hearth was closed while the model loaded. "
                                      "Press Send now to ask.")
        self._held = None  # the same (app/ui/documents_controller.py says why on it)
        title = self.busy_title()
        behind = f"the reply in “{title}”" if title else "its turn"
        for cid, message_id, files in self._line:  # stored; they say why they were not sent
            why = f"Hearth was closed while it waited for {behind}"
            self._unsend(cid, message_id, files_not_read(files, why) if files else
                         f"Not sent: {why}. Press Send now to ask.", files)
        self._line.clear()
        if self._active is not None and not self._active.next_round:
            self._active.writer.finish("stopped", self._provenance(self._active, None, None),
                                       reasoning_ms=self._active.measured_thinking_ms())
        self._active = None
        self._sync_busy()  # no mark is left on the list
        imports = self.imports.shutdown()  # an import part way is rolled back
        if not self._wait_for_worker():
            return False
        self.worker.close_engine()  # no other thread runs it any more
        return imports

    def _wait_for_worker(self) -> bool:
        """Stop the worker's thread: True once it has ended. A reply stops at its next token
        and its model calls end within a chunk, so those are waited for (up to
        WORKER_STOP_WAIT_MS); a model being read cannot be stopped part way and has nothing
        to save, so it is left after LOAD_WAIT_ON_QUIT_MS (False: the process leaves without
        destroying the running thread, see app/ui/launch.py)."""
        if self.abandoned_load:
            return False
        if self.host.shutdown(LOAD_WAIT_ON_QUIT_MS):
            return True
        deadline = time.monotonic() + WORKER_STOP_WAIT_MS / 1000
        while time.monotonic() < deadline:
            if self.worker.loading.is_set():
                self.abandoned_load = True
                return False
            if self.host.thread.wait(50):
                return True
        return False

    # helpers ------------------------------------------------------------------------------

    def _start_reply(self, reply: StoredMessage | None = None, *, keep_failed: bool = True,
                     conversation_id: str | None = None,
                     retriever: Retriever | None = None) -> bool:
        """Stream a reply into ``reply`` (an empty 'streaming' message already stored, as
        ``History.regenerate`` makes) or into a new one at the end of the path of the open
        chat (or of ``conversation_id``, which need not be open: see ``release``). A title
        being written gives way first. ``keep_failed``: see ``ActiveReply``."""
        cid = conversation_id or self.current_id
        assert cid is not None and self.model_info is not None
        shown = cid == self.current_id
        self._cancel_title()
        values = self.chat_values() if shown else self._values_of(
            cid, {**self.settings.as_dict(), **model_chat_values(self._model_defaults())})
        gen = self.generation_settings(values)
        try:
            if reply is None:
                reply = self.history.add_message(cid, "assistant", "", status="streaming")
            above = self._path_above(reply.id, cid)
        except StorageError as exc:
            self.bridge.report(exc)
            return False
        row = self.chat_model.append(reply) if shown else None
        writer = ReplyWriter(self.history, reply.id)
        user_id = next((m.id for m in reversed(above) if m.role == "user"), None)
        toolbox = self.toolbox if shown else (
            self.toolbox_for(cid) if self.toolbox_for is not None else None)
        self._active = ActiveReply(cid, reply.id, writer, gen, row,
                                   user_id=user_id, last_id=reply.id,
                                   keep_failed=keep_failed, toolbox=toolbox)
        self.generating_changed.emit(True)
        request = GenerationRequest(
            cid, above, gen, system_prompt=values["system_prompt"], toolbox=toolbox,
            retriever=retriever if conversation_id is not None else self.retriever)
        self.host.post(self.worker.on_generate_requested, request)
        return True

    def _path_above(self, reply_id: int, conversation_id: str) -> tuple[StoredMessage, ...]:
        """The stored path above the reply being written: the rows the worker builds the
        turn from (app/workers/turn_request.py decides what goes in)."""
        above: list[StoredMessage] = []
        for msg in self.history.active_path(conversation_id):
            if msg.id == reply_id:
                break
            above.append(msg)
        return tuple(above)

    def _end_turn(self) -> None:
        """The turn ends with nothing left to write (its rows are complete)."""
        active = self._active
        assert active is not None
        self._active = None
        self._approval = None
        if self._reading:
            self._done_reading()
        self.conversations.upsert(active.conversation_id)
        self.generating_changed.emit(False)

    def _end_reply(self, status: str, provenance: dict,
                   parts: tuple[ToolCall, ...] | None = None) -> None:
        active = self._active
        assert active is not None
        thinking_ms = active.measured_thinking_ms()
        try:
            active.writer.finish(status, provenance, reasoning_ms=thinking_ms,
                                 parts=parts or None)
        except StorageError as exc:
            self.bridge.report(exc)
        if active.row is not None and active.conversation_id == self.current_id:
            changes: dict[str, Any] = {"parts": parts} if parts else {}
            self.chat_model.update_message(
                active.row, content=active.writer.text, status=status, provenance=provenance,
                reasoning=active.writer.reasoning, reasoning_ms=thinking_ms or 0.0, **changes,
            )
        self._active = None
        self._approval = None
        if self._reading:
            self._done_reading()
        self.conversations.upsert(active.conversation_id)
        self.generating_changed.emit(False)

    def _provenance(
        self, active: ActiveReply, stats: GenerationStats | None, finish: str | None
    ) -> dict:
        info = self.model_info
        sampling = active.settings.sampling
        result: dict[str, Any] = {
            "model": info.name if info else None,
            "model_path": info.path if info else None,
            "provider": info.provider if info else None,
            "sampling": dataclasses.asdict(sampling),
            "seed": sampling.seed,
            "max_new_tokens": active.settings.max_new_tokens,
            "context_policy": active.settings.context_policy,
        }
        if stats is not None:
            result["stats"] = stats.as_dict()
        if finish is not None:
            result["finish_reason"] = finish
        return result

    def _can_change(self, row: int) -> bool:
        if self.generating:
            busy = self.busy_conversation
            self.bridge.info(
                f"The model is busy in the chat “{self.busy_title()}”: wait for that reply to "
                "end, or stop it, before changing this chat."
                if busy is not None and busy != self.current_id
                else "Stop the reply before changing the conversation.")
            return False
        return 0 <= row < self.chat_model.rowCount() and self.current_id is not None

    def _guard(self, fn, *args, **kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except StorageError as exc:
            self.bridge.report(exc)

    def save_settings(self) -> None:
        try:
            self.settings.save()
        except OSError as exc:
            self.bridge.warning(f"Settings could not be saved: {exc.strerror}.")
