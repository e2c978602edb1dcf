"""The generation worker: owns the backend on its own QThread and runs chat turns there.

Only this worker's thread ever calls into the backend (``app.chat.backend.Backend``: the
local ``Engine`` or a ``RemoteEngine``): the chat controller hosts it on its own QThread with
``app.workers.thread_host.ThreadHost``, posts requests to its ``on_*`` methods and connects
to its signals (queued by Qt to the UI thread). A request is turned into the turn's typed
messages here (``app.workers.turn_request.build_turn``, never on the UI thread) and run by
``app.chat.turn.run_turn``; each of its events goes out on the one ``event`` signal, in
order. Stop is a ``threading.Event`` the UI sets directly (checked by the engine every
token, and by a call waiting for the user's approval).

Between replies it may name a chat (``on_title_requested``: app/chat/title.py on the same
backend). A title is the lowest priority: its request carries its own cancel Event, which
the UI sets as soon as the user sends a message, so the title gives way within a token (or
before it starts) and the reply runs next.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal, Slot

from app.chat.backend import Backend
from app.chat.events import Finished, PrefillProgress
from app.chat.parts import ChatMessage, Reasoning, ToolCall
from app.chat.title import generate_title
from app.chat.turn import Retriever, Toolbox, run_turn
from app.engine.types import GenerationSettings, GenerationStats, Message
from app.errors import HearthError
from app.loading import default_caches, default_loader
from app.storage.records import StoredMessage
from app.workers.turn_request import build_turn

if TYPE_CHECKING:  # the engine's modules pull in onnxruntime: loaded only with a model
    from app.engine.conversation_caches import ConversationCaches


EngineLoader = Callable[[Path], Backend]
#: the shortest gap between two prefill progress signals (at most ~10 a second)
PREFILL_PROGRESS_INTERVAL_S = 0.1
#: prompts with fewer tokens left to prefill report no progress (they take a blink)
PREFILL_PROGRESS_MIN_TOKENS = 512
#: how often a call waiting for the user's approval looks at Stop
APPROVAL_POLL_S = 0.05
#: ``caches(backend)``: the ConversationCaches the worker keeps for a freshly loaded one.
CachesFactory = Callable[[Backend], "ConversationCaches"]


@dataclass(frozen=True)
class ModelInfo:
    """What the UI needs to know about the loaded model."""

    path: str
    name: str
    provider: str
    provider_summary: str
    provider_reasons: dict[str, str]
    context_length: int
    generation_defaults: dict
    load_ms: float
    # how the template switches thinking ("enable_thinking" / "flags"); None: no switch
    thinking_control: str | None = None
    # what the user should know about the model (a clamped context, unused encoders, …)
    notes: tuple[str, ...] = ()
    # the draft model that speculates for it (its name), None without one
    draft: str | None = None
    # how it reads long prompts, where that differs from its replies or could (the fp32
    # prompt session, app/engine/prompt_session.py); None: nothing to tell
    prompt_kernels: str | None = None
    # what exact replies cost its one-token steps on this CPU (two rows each), None: nothing
    steps_note: str | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """One turn to run: the conversation so far (its last message the user's) and the
    settings. ``messages`` may be the history's own rows (``StoredMessage``: the path on
    screen above the reply; failed and empty replies are left out when the turn is built),
    typed ``ChatMessage``\\s or plain ``Message``\\s. ``system_prompt`` goes first when it is
    not blank. With a ``toolbox`` each call is put to the user (``approval_requested``)."""

    conversation_id: str
    messages: tuple[StoredMessage | ChatMessage | Message, ...]
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    system_prompt: str = ""
    toolbox: Toolbox | None = None
    retriever: Retriever | None = None


@dataclass(frozen=True)
class TitleRequest:
    """Name a chat from its first exchange (``question``, ``answer``). ``cancel`` is this
    request's own: set it (from any thread) and the title is dropped."""

    conversation_id: str
    question: str
    answer: str
    cancel: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class GenerationResult:
    """A finished turn, summed up for the status bar and provenance: the final answer's
    text and thinking, the last round's stats, the model and provider that ran it."""

    conversation_id: str
    text: str
    finish_reason: str
    stats: GenerationStats
    model: str
    provider: str
    reasoning: str = ""  # the model's thinking, apart from ``text``


def reply_result(conversation_id: str, finished: Finished, info: ModelInfo | None
                 ) -> GenerationResult:
    """``finished`` summed up (see ``GenerationResult``)."""
    final = next((m for m in reversed(finished.turn) if m.role == "assistant"),
                 ChatMessage("assistant"))
    stats = finished.stats[-1] if finished.stats else GenerationStats()
    return GenerationResult(
        conversation_id=conversation_id,
        text=final.text,
        finish_reason=finished.finish_reason,
        stats=stats,
        model=info.name if info else "",
        provider=stats.provider or (info.provider if info else ""),
        reasoning="".join(p.text for p in final.of_kind(Reasoning)),
    )


class ApprovalRequest:
    """A tool call waiting for the user's yes or no. The worker's thread waits in ``wait``;
    the UI answers with ``answer`` (from any thread; the first answer counts). Stop ends the
    wait as a no."""

    def __init__(self, conversation_id: str, call: ToolCall) -> None:
        self.conversation_id = conversation_id
        self.call = call
        self._answered = threading.Event()
        self._allowed = False
        self._lock = threading.Lock()

    def answer(self, allowed: bool) -> None:
        with self._lock:
            if self._answered.is_set():
                return
            self._allowed = bool(allowed)
            self._answered.set()

    @property
    def answered(self) -> bool:
        return self._answered.is_set()

    def wait(self, cancel: threading.Event, poll: float = APPROVAL_POLL_S) -> bool:
        """The user's answer; False as soon as ``cancel`` is set (a stopped reply)."""
        while not self._answered.wait(poll):
            if cancel.is_set():
                self.answer(False)
        return self._allowed


class GenerationWorker(QObject):
    """Runs turns on the backend. Lives on the generation thread.

    Signals:
        loaded(ModelInfo): a model finished loading and is now current.
        load_failed(str): loading failed; the previous model (if any) stays loaded.
        unloaded(): the model was closed on request; its memory is free.
        event(str conversation_id, TurnEvent): the turn's events (app/chat/events.py) in
            order, ending with one ``Finished`` (any finish reason, "cancelled" included).
            ``PrefillProgress`` comes live from inside the prefill: at most ~10 a second,
            only for prompts with at least PREFILL_PROGRESS_MIN_TOKENS tokens to read.
        approval_requested(ApprovalRequest): a tool call waits for the user's answer
            (``ApprovalRequest.answer``); the turn goes on once it has one.
        failed(str conversation_id, str message): the turn could not start or broke off
            (no ``Finished`` then).
        titled(TitleRequest, str title): a title request ended; ``title`` is "" when it was
            cancelled or the model gave nothing usable.
        crashed(str details): an unexpected exception (a bug) with its traceback.
    """

    loaded = Signal(object)
    load_failed = Signal(str)
    unloaded = Signal()
    event = Signal(str, object)
    approval_requested = Signal(object)
    failed = Signal(str, str)
    titled = Signal(object, str)
    crashed = Signal(str)

    def __init__(self, loader: EngineLoader | None = None,
                 caches: CachesFactory | None = None) -> None:
        super().__init__()
        self._loader = loader or default_loader
        self._make_caches = caches or default_caches
        self._engine: Backend | None = None
        self._caches: ConversationCaches | None = None
        self._info: ModelInfo | None = None
        self.cancel = threading.Event()
        # set while a model is being read (ORT cannot stop that part way); nothing else runs
        # then and nothing is written, so a quit need not wait for it
        self.loading = threading.Event()

    def stop(self) -> None:
        """Thread-safe: called directly from the UI thread."""
        self.cancel.set()

    @Slot(object)
    def on_load_requested(self, path: object) -> None:
        started = time.perf_counter()
        self.loading.set()
        try:
            engine = self._loader(Path(str(path)))
            caches = self._make_caches(engine)
        except HearthError as exc:
            self.load_failed.emit(str(exc))
            return
        except Exception as exc:
            self.load_failed.emit(f"The model at {path} could not be loaded: {exc}")
            self.crashed.emit(traceback.format_exc())
            return
        finally:
            self.loading.clear()
        self.close_engine()  # the previous model's long chats go to disk first
        self._engine, self._caches = engine, caches
        self._info = _model_info(engine, str(path), time.perf_counter() - started)
        self.loaded.emit(self._info)
        self._prepare(engine)

    def _prepare(self, engine: Backend) -> None:
        """``Backend.prepare`` (the local engine's fp32 prompt session), once the window
        already shows the model as loaded: a message sent meanwhile waits its turn here
        (~0.4 s on the starter). Like a load, a quit need not wait for it."""
        self.loading.set()
        try:
            engine.prepare()  # a session that fails to open leaves prompts where they were
        except Exception:
            self.crashed.emit(traceback.format_exc())
        finally:
            self.loading.clear()

    @Slot()
    def on_unload_requested(self) -> None:
        """Close the model (long chats' caches go to disk first) and free its memory."""
        self.close_engine()
        self.unloaded.emit()

    @Slot(object)
    def on_generate_requested(self, request: GenerationRequest) -> None:
        conv = request.conversation_id
        engine = self._engine
        if engine is None or self._info is None:
            self.failed.emit(conv, "No model is loaded. Pick a model in the toolbar first.")
            return
        self.cancel.clear()
        live = PrefillThrottle(conv, lambda c, done, total: self.event.emit(
            c, PrefillProgress(done, total)))
        try:
            turn = build_turn(request.messages, request.settings,
                              system_prompt=request.system_prompt, conversation_id=conv,
                              caches=self._caches)
            events = run_turn(
                engine, turn, retriever=request.retriever, toolbox=request.toolbox,
                approve=self._approver(conv) if request.toolbox is not None else None,
                cancel=self.cancel, on_prefill=live)
            for event in events:
                if isinstance(event, Finished) and not event.stats and not self.cancel.is_set():
                    break  # the stream ended without its last chunk
                self.event.emit(conv, event)
                if isinstance(event, Finished):
                    return
        except HearthError as exc:
            self.failed.emit(conv, str(exc))
            return
        except Exception as exc:
            self.failed.emit(conv, f"The reply broke off because of an internal error: {exc}")
            self.crashed.emit(traceback.format_exc())
            return
        self.failed.emit(conv, "The model stopped without finishing its reply.")

    @Slot(object)
    def on_title_requested(self, request: TitleRequest) -> None:
        """Name the chat (see the module); nothing is shown when it fails: the chat keeps
        the title it has."""
        title = ""
        engine = self._engine
        try:
            if engine is not None and not request.cancel.is_set():
                title = generate_title(engine, request.question, request.answer,
                                       cancel=request.cancel)
        except HearthError:
            title = ""
        except Exception:
            title = ""
            self.crashed.emit(traceback.format_exc())
        self.titled.emit(request, "" if request.cancel.is_set() else title)

    def _approver(self, conversation_id: str) -> Callable[[ToolCall], bool]:
        """``approve`` for ``run_turn``: ask the UI and wait (Stop counts as a no)."""

        def approve(call: ToolCall) -> bool:
            request = ApprovalRequest(conversation_id, call)
            self.approval_requested.emit(request)
            return request.wait(self.cancel)

        return approve

    @property
    def info(self) -> ModelInfo | None:
        """The loaded model (None while none is); a plain read, safe from any thread."""
        return self._info

    @Slot(object, object)
    def on_run_requested(self, fn: object, future: object) -> None:
        """Run ``fn(engine, caches)`` on this thread and settle the
        ``concurrent.futures.Future`` with its result or exception (both are None while no
        model is loaded). Posted like the chat's requests, so it waits its turn: the local
        server shares the engine this way and never runs beside a chat reply."""
        from app.server.executor import run_job

        run_job(fn, future, self._engine, self._caches)  # type: ignore[arg-type]

    @Slot(str)
    def on_forget_requested(self, conversation_id: str) -> None:
        if self._caches is not None:
            self._caches.forget(conversation_id)

    def close_engine(self) -> None:
        """Save long chats' caches, then close the engine. Call only when the worker thread
        is not running it."""
        if self._caches is not None:
            self._caches.close()
            self._caches = None
        if self._engine is not None:
            self._engine.close()
            self._engine = None
            self._info = None


class PrefillThrottle:
    """``on_prefill(done, total)`` for one reply: passes on the first report of a long
    prefill at once, then at most one per ``interval`` seconds, and the last one."""

    def __init__(self, conversation_id: str, emit: Callable[[str, int, int], None], *,
                 interval: float = PREFILL_PROGRESS_INTERVAL_S,
                 min_tokens: int = PREFILL_PROGRESS_MIN_TOKENS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._conv, self._emit, self._interval = conversation_id, emit, interval
        self._min_tokens, self._clock = min_tokens, clock
        self._active = False
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        if not self._active:
            if total - done < self._min_tokens:
                return
            self._active = True
        elif done < total and now - self._last < self._interval:
            return
        self._last = now
        self._emit(self._conv, done, total)


def _model_info(engine: Backend, path: str, seconds: float) -> ModelInfo:
    info = engine.describe()
    return ModelInfo(
        path=str(path),
        name=info.name,
        provider=info.provider,
        provider_summary=info.provider_summary,
        provider_reasons=dict(info.provider_reasons),
        context_length=info.context_length,
        generation_defaults=dict(info.generation_defaults),
        load_ms=seconds * 1000.0,
        thinking_control=info.thinking_control,
        notes=info.notes,
        prompt_kernels=info.prompt_note,
        steps_note=info.steps_note,
        draft=info.draft,
    )


__all__ = ["ApprovalRequest", "CachesFactory", "EngineLoader", "GenerationRequest",
           "GenerationResult", "GenerationWorker", "ModelInfo", "PrefillThrottle",
           "TitleRequest", "reply_result"]
