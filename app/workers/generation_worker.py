"""The generation worker: owns the Engine on its own QThread and adapts it to signals.

Only this worker's thread ever calls into the engine: the chat controller hosts it on its
own QThread with ``app.workers.thread_host.ThreadHost``, posts requests to its ``on_*``
methods and connects to its signals (queued by Qt to the UI thread). Stop is a
``threading.Event`` the UI sets directly (checked by the engine every token).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, Signal, Slot

from app.engine.types import (
    GenerationChunk,
    GenerationSettings,
    GenerationStats,
    Message,
    ModelSpec,
    ProviderReport,
)
from app.errors import HearthError
from app.loading import default_caches, default_loader

if TYPE_CHECKING:  # the engine's modules pull in onnxruntime: loaded only with a model
    from app.engine.conversation_caches import ConversationCaches



class EngineLike(Protocol):
    """What the worker uses of ``app.engine.engine.Engine``, which satisfies it exactly
    (tests/workers/test_generation_worker.py compares the signatures with the real engine's
    and the fake's)."""

    spec: ModelSpec
    provider_report: ProviderReport

    def chat(
        self,
        messages: Sequence[Message],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        caches: ConversationCaches | None = None,
        conversation_id: str | None = None,
        reuse: bool = True,
        on_prefill: Callable[[int, int], None] | None = None,
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> Iterator[GenerationChunk]: ...

    def count_tokens(self, messages: Sequence[Message]) -> int: ...

    def conversation_caches(
        self,
        *,
        budget_bytes: int = ...,
        snapshot_folder: Path | None = None,
        min_tokens: int = 256,
    ) -> ConversationCaches: ...

    def close(self) -> None: ...


EngineLoader = Callable[[Path], EngineLike]
#: the shortest gap between two prefill progress signals (at most ~10 a second)
PREFILL_PROGRESS_INTERVAL_S = 0.1
#: prompts with fewer tokens left to prefill report no progress (they take a blink)
PREFILL_PROGRESS_MIN_TOKENS = 512
#: ``caches(engine)``: the ConversationCaches the worker keeps for a freshly loaded engine.
CachesFactory = Callable[[EngineLike], "ConversationCaches"]


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


@dataclass(frozen=True)
class GenerationRequest:
    conversation_id: str
    messages: tuple[Message, ...]
    settings: GenerationSettings = field(default_factory=GenerationSettings)


@dataclass(frozen=True)
class GenerationResult:
    conversation_id: str
    text: str
    finish_reason: str
    stats: GenerationStats
    model: str
    provider: str
    reasoning: str = ""  # the model's thinking, apart from ``text``


class GenerationWorker(QObject):
    """Adapts the engine to Qt signals. Lives on the generation thread.

    Signals:
        loaded(ModelInfo): a model finished loading and is now current.
        load_failed(str): loading failed; the previous model (if any) stays loaded.
        unloaded(): the model was closed on request; its memory is free.
        prefill_progress(str conversation_id, int done, int total): the prompt is being read
            (tokens in the cache of the prompt's total); at most ~10 a second, only for
            prompts with at least PREFILL_PROGRESS_MIN_TOKENS tokens to read.
        chunk(str conversation_id, str text): a streamed delta of the answer.
        reasoning_chunk(str conversation_id, str text): a streamed delta of the model's
            thinking (never part of the answer); a chunk's thinking is emitted before its
            answer.
        finished(str conversation_id, GenerationResult): the reply ended (any finish reason,
            including "cancelled").
        failed(str conversation_id, str message): the reply could not start or broke off.
        crashed(str details): an unexpected exception (a bug) with its traceback.
    """

    loaded = Signal(object)
    load_failed = Signal(str)
    unloaded = Signal()
    prefill_progress = Signal(str, int, int)
    chunk = Signal(str, str)
    reasoning_chunk = Signal(str, str)
    finished = Signal(str, object)
    failed = Signal(str, str)
    crashed = Signal(str)

    def __init__(self, loader: EngineLoader | None = None,
                 caches: CachesFactory | None = None) -> None:
        super().__init__()
        self._loader = loader or default_loader
        self._make_caches = caches or default_caches
        self._engine: EngineLike | None = None
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
        self._open_prompt_session(engine)

    def _open_prompt_session(self, engine: EngineLike) -> None:
        """The fp32 prompt session (app/engine/prompt_session.py), once the window already
        shows the model as loaded: a message sent meanwhile waits its turn here (~0.4 s on
        the starter). Like a load, a quit need not wait for it."""
        opener = getattr(engine, "open_prompt_session", None)  # remote engines have none
        if opener is None:
            return
        self.loading.set()
        try:
            opener()  # a session that fails to open leaves prompts on the decode session
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
        text: list[str] = []
        thought: list[str] = []
        try:
            for piece in engine.chat(
                list(request.messages),
                request.settings,
                cancel=self.cancel,
                caches=self._caches,
                conversation_id=conv,
                on_prefill=PrefillThrottle(conv, self.prefill_progress.emit),
            ):
                if piece.reasoning:
                    thought.append(piece.reasoning)
                    self.reasoning_chunk.emit(conv, piece.reasoning)
                if piece.text:
                    text.append(piece.text)
                    self.chunk.emit(conv, piece.text)
                if piece.finish_reason is not None:
                    stats = piece.stats or GenerationStats()
                    self.finished.emit(
                        conv,
                        GenerationResult(
                            conversation_id=conv,
                            text="".join(text),
                            finish_reason=piece.finish_reason,
                            stats=stats,
                            model=self._info.name,
                            provider=stats.provider or self._info.provider,
                            reasoning="".join(thought),
                        ),
                    )
                    return
        except HearthError as exc:
            self.failed.emit(conv, str(exc))
            return
        except Exception as exc:
            self.failed.emit(conv, f"The reply broke off because of an internal error: {exc}")
            self.crashed.emit(traceback.format_exc())
            return
        self.failed.emit(conv, "The model stopped without finishing its reply.")

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


def _model_info(engine: EngineLike, path: str, seconds: float) -> ModelInfo:
    spec = engine.spec
    report = engine.provider_report
    return ModelInfo(
        path=str(path),
        name=spec.name,
        provider=report.chosen,
        provider_summary=report.summary(),
        provider_reasons=dict(report.reasons),
        context_length=spec.context_length,
        generation_defaults=dict(spec.generation_defaults),
        load_ms=seconds * 1000.0,
        # remote engines and stand-ins have no template switch
        thinking_control=getattr(engine, "thinking_control", None),
        notes=tuple(n for n in (spec.context_note, *spec.notes) if n),
        prompt_kernels=_prompt_note(engine),
        draft=getattr(engine, "draft_name", None),
    )


def _prompt_note(engine: EngineLike) -> str | None:
    """The model details' line about the fp32 prompt session (app/engine/prompt_session.py),
    when there is something to tell."""
    plan = getattr(engine, "prompt_plan", None)  # remote engines and stand-ins have none
    return plan.note if plan is not None and plan.worth_telling else None
