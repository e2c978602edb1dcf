"""One abstraction for "the thread that owns the engine".

A job is ``fn(engine, caches)``; ``submit`` queues it (FIFO) to run on the engine's owner
thread and returns a ``concurrent.futures.Future`` of its result. ``engine`` and ``caches``
are None when no model is loaded (a job checks and raises ``EngineUnavailableError``).

Two implementations: ``ThreadEngineExecutor`` below (the terminal's ``hearth serve``: a plain
thread that loads and owns one ``Engine`` and its ``ConversationCaches``), and
``app.workers.engine_executor.WorkerEngineExecutor`` (the desktop app: the generation worker's
QThread, so the chat window and the server never run two generations at once).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from app.options import CACHE_BUDGET_MB as DEFAULT_CACHE_BUDGET_MB
from app.server.errors import EngineUnavailableError

if TYPE_CHECKING:
    from app.engine.conversation_caches import ConversationCaches
    from app.engine.engine import Engine

T = TypeVar("T")
Job = Callable[[Any, Any], T]  # (engine or None, caches or None) -> result


@dataclass(frozen=True)
class ServedModel:
    """The model behind the API: its stable id (``GET /v1/models``) and context."""

    id: str
    path: str
    context_length: int
    created: int = 0  # Unix time of the model folder, as OpenAI's "created"


def model_id(name: str) -> str:
    """The stable API id of a model named ``name`` (its folder or Hub name)."""
    return name.strip() or "model"


class EngineExecutor(Protocol):
    """Runs jobs on the engine's owner thread, one at a time, in the order submitted."""

    def submit(self, fn: Job[T]) -> Future[T]: ...

    def served_model(self) -> ServedModel | None:
        """The loaded model (None while none is): safe to call from any thread."""
        ...


def served_model_of(spec: Any) -> ServedModel:
    """A ``ServedModel`` for an engine's ``ModelSpec``."""
    try:
        created = int(spec.root.stat().st_mtime)
    except OSError:
        created = 0
    return ServedModel(model_id(spec.name), str(spec.root), spec.context_length, created)


class ThreadEngineExecutor:
    """A plain thread that owns one engine and its conversation caches.

    ``load`` runs on that thread (ORT sessions stay where they were made); ``start`` waits for
    it and re-raises its error. ``close`` runs what was queued before it, then saves nothing
    (stateless clients) and lets the engine go."""

    _STOP = object()

    def __init__(
        self,
        load: Callable[[], Engine],
        *,
        cache_budget_bytes: int = DEFAULT_CACHE_BUDGET_MB * 1024 * 1024,
        name: str = "hearth-server-engine",
    ) -> None:
        self._load = load
        self._budget = cache_budget_bytes
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._ready: Future[ServedModel] = Future()
        self._served: ServedModel | None = None
        self._closed = False
        self._lock = threading.Lock()

    def start(self) -> ServedModel:
        """Start the thread and load the model there; returns what is served."""
        self._thread.start()
        self._served = self._ready.result()
        return self._served

    def served_model(self) -> ServedModel | None:
        return self._served

    def submit(self, fn: Job[T]) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                future.set_exception(EngineUnavailableError("The server's engine has stopped."))
                return future
            self._jobs.put((fn, future))
        return future

    def close(self, timeout: float = 10.0) -> bool:
        """Stop taking jobs, finish the queued ones, end the thread. True when it ended."""
        with self._lock:
            if self._closed:
                return not self._thread.is_alive()
            self._closed = True
            self._jobs.put(self._STOP)
        if not self._thread.is_alive():
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            engine = self._load()
            caches: ConversationCaches = engine.conversation_caches(budget_bytes=self._budget)
        except BaseException as exc:
            self._ready.set_exception(exc)
            with self._lock:
                self._closed = True
            self._fail_pending()
            return
        self._ready.set_result(served_model_of(engine.spec))
        try:
            while True:
                item = self._jobs.get()
                if item is self._STOP:
                    break
                run_job(item[0], item[1], engine, caches)
        finally:
            caches.close()
            engine.close()

    def _fail_pending(self) -> None:
        while True:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                return
            if item is not self._STOP:
                item[1].set_exception(EngineUnavailableError("The model could not be loaded."))


def run_job(fn: Job[T], future: Future[T], engine: Any, caches: Any) -> None:
    """Run one job and settle its future (a job cancelled before it started is skipped)."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(engine, caches)
    except BaseException as exc:  # delivered to the submitter, which decides
        future.set_exception(exc)
    else:
        future.set_result(result)
