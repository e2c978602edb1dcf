"""One abstraction for "the thread that owns the engine".

A job is ``fn(engine, caches)``; ``submit(fn, model)`` queues it (FIFO) to run on the engine's
owner thread with ``model`` loaded, and returns a ``concurrent.futures.Future`` of its result.
``engine`` (a ``Backend``: app/chat/backend.py) and ``caches`` are None when no model is
loaded (a job checks and raises ``EngineUnavailableError``). The executor owns which model
a request gets: a job submitted for a model the executor cannot give it fails with
``model_not_found`` (404) and never runs on another model.

Two implementations: ``ThreadEngineExecutor`` below (the terminal's ``hearth serve``: a plain
thread that loads and owns one engine at a time, switching among the models a
``ModelSource`` offers (the library, or a remote engine's models) and unloading an idle one),
and ``app.workers.engine_executor.WorkerEngineExecutor`` (the desktop app: the generation
worker's QThread, so the chat window and the server never run two generations at once; it
serves the window's model only).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from app.options import CACHE_BUDGET_MB as DEFAULT_CACHE_BUDGET_MB
from app.server.errors import EngineUnavailableError, model_not_found

if TYPE_CHECKING:
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

    def submit(self, fn: Job[T], model: str | None = None) -> Future[T]:
        """Queue ``fn`` to run with ``model`` loaded (None: whatever is loaded, or nothing)."""
        ...

    def served_model(self) -> ServedModel | None:
        """The loaded model (None while none is): safe to call from any thread."""
        ...

    def models(self) -> list[ServedModel]:
        """Every model a request may name, the loaded one first (blocking I/O allowed: the
        HTTP side calls it off its event loop)."""
        ...


class ModelSource(Protocol):
    """The models a ``ThreadEngineExecutor`` may switch to, and how each one loads."""

    def available(self) -> list[ServedModel]:
        """Every model it offers (may read the disk or ask a server)."""
        ...

    def load(self, model: str) -> Any:
        """The ``Backend`` for ``model`` (one of ``available``'s ids), loaded on the caller's
        thread (the executor's)."""
        ...


def served_model_of(spec: Any) -> ServedModel:
    """A ``ServedModel`` for an engine's ``ModelSpec``."""
    try:
        created = int(spec.root.stat().st_mtime)
    except OSError:
        created = 0
    return ServedModel(model_id(spec.name), str(spec.root), spec.context_length, created)


class ThreadEngineExecutor:
    """A plain thread that owns one engine at a time and its conversation caches.

    The first model is ``load()`` (a local ``Engine``; its id from its folder) or, without
    ``load``, ``models.load(first)``. Both run on that thread (ORT sessions stay where they
    were made); ``start`` waits for it and re-raises its error.

    With ``models``, a job submitted for another of its models unloads the current one and
    loads that one first, on this thread and in queue order: one model in memory at a time,
    and the requests queued before the switch run on the model they asked for. A model that
    fails to load fails that job with its sentence; the next request loads again. With
    ``idle_unload_s`` > 0 the loaded model is let go after that long without a job (its
    memory back to the machine); the next request for it loads it again.

    ``close`` runs what was queued before it, then saves nothing (stateless clients) and lets
    the engine go."""

    _STOP = object()

    def __init__(
        self,
        load: Callable[[], Engine] | None = None,
        *,
        models: ModelSource | None = None,
        first: str | None = None,
        idle_unload_s: float = 0.0,
        cache_budget_bytes: int = DEFAULT_CACHE_BUDGET_MB * 1024 * 1024,
        name: str = "hearth-server-engine",
    ) -> None:
        if load is None and (models is None or first is None):
            raise ValueError("give load, or models and first")
        self._load = load
        self._models = models
        self._first = first
        self._idle_s = idle_unload_s
        self._budget = cache_budget_bytes
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._ready: Future[ServedModel] = Future()
        self._served: ServedModel | None = None
        self._start: ServedModel | None = None  # the folder ``load`` loads, when given
        self._closed = False
        self._lock = threading.Lock()
        self._engine: Any = None  # the executor thread's only
        self._caches: Any = None

    def start(self) -> ServedModel:
        """Start the thread and load the first model there; returns what is served."""
        self._thread.start()
        return self._ready.result()

    def served_model(self) -> ServedModel | None:
        return self._served

    def models(self) -> list[ServedModel]:
        served = self._served
        listed = self._models.available() if self._models is not None else []
        start = self._start
        every = ([start] if start is not None and all(m.id != start.id for m in listed)
                 else []) + listed
        if served is not None:
            every = [served] + [m for m in every if m.id != served.id]
        return every

    def submit(self, fn: Job[T], model: str | None = None) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                future.set_exception(EngineUnavailableError("The server's engine has stopped."))
                return future
            self._jobs.put((fn, future, model))
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
            if self._load is not None:
                engine = self._load()
                served = self._start = served_model_of(engine.spec)
            else:
                assert self._models is not None and self._first is not None
                served = self._listed(self._first)
                engine = self._models.load(self._first)
            self._hold(engine, served)
        except BaseException as exc:
            self._ready.set_exception(exc)
            with self._lock:
                self._closed = True
            self._fail_pending()
            return
        self._ready.set_result(served)
        try:
            while True:
                try:
                    item = self._jobs.get(timeout=self._idle_s if self._idle_s > 0 and
                                          self._engine is not None else None)
                except queue.Empty:
                    self._unload()
                    continue
                if item is self._STOP:
                    break
                fn, future, model = item
                if model is not None and not future.cancelled() and not self._switch(model,
                                                                                      future):
                    continue
                run_job(fn, future, self._engine, self._caches)
        finally:
            self._unload()

    def _switch(self, model: str, future: Future) -> bool:
        """Have ``model`` loaded for the next job; False (``future`` failed) when it cannot."""
        if self._served is not None and self._served.id == model:
            return True
        listed = self._listed(model)
        start = self._start if self._start is not None and self._start.id == model else None
        if listed is None and start is None:
            future.set_exception(model_not_found(model))
            return False
        self._unload()  # one model in memory at a time
        try:
            if listed is not None:
                assert self._models is not None
                engine, served = self._models.load(model), listed
            else:
                assert self._load is not None and start is not None
                engine, served = self._load(), start  # the folder given at the start
        except BaseException as exc:  # its sentence goes to the request that asked
            future.set_exception(exc)
            return False
        self._hold(engine, served)
        return True

    def _listed(self, model: str) -> ServedModel | None:
        if self._models is None:
            return None
        return next((m for m in self._models.available() if m.id == model), None)

    def _hold(self, engine: Any, served: ServedModel) -> None:
        context = engine.describe().context_length
        if context > 0 and context != served.context_length:  # the model's own, once loaded
            served = replace(served, context_length=context)
        self._engine = engine
        self._caches = engine.conversation_caches(budget_bytes=self._budget)
        self._served = served

    def _unload(self) -> None:
        engine, caches = self._engine, self._caches
        self._engine = self._caches = None
        self._served = None
        if caches is not None:
            caches.close()
        if engine is not None:
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
