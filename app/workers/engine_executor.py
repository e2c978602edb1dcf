"""The local server's ``EngineExecutor`` inside the desktop app: the generation worker's
QThread runs the server's jobs between the chat window's requests (``on_run_requested``), so
the window and the server share the loaded model and its conversation caches and never run
two generations at once.

It serves the window's model only, whatever it is (a local model or a remote one picked in
the window), and never loads another: an API request must not pull the model out from under
the chat the user is looking at. A request for any other model gets 404 and its name; to
serve the whole library, run ``hearth serve`` beside the app."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, TypeVar

from app.server.errors import model_not_found
from app.server.executor import Job, ServedModel, model_id
from app.workers.generation_worker import GenerationWorker
from app.workers.thread_host import ThreadHost

T = TypeVar("T")


class WorkerEngineExecutor:
    """Posts jobs to the generation worker through its ``ThreadHost`` (FIFO with the
    chat's requests). ``submit`` may be called from any thread (Qt queues the call)."""

    def __init__(self, host: ThreadHost[GenerationWorker]) -> None:
        self._host = host
        self._worker = host.worker

    def submit(self, fn: Job[T], model: str | None = None) -> Future[T]:
        future: Future[T] = Future()
        job = fn if model is None else self._for_model(fn, model)
        self._host.post(self._worker.on_run_requested, job, future)
        return future

    def _for_model(self, fn: Job[T], model: str) -> Job[T]:
        """``fn``, refused unless the window's model is still ``model`` when it runs (the
        user may have switched models while the request waited)."""

        def job(engine: Any, caches: Any) -> T:
            served = self.served_model()
            if served is not None and served.id != model:
                raise model_not_found(model)
            return fn(engine, caches)  # no model: the job says so (503)

        return job

    def served_model(self) -> ServedModel | None:
        info = self._worker.info
        if info is None:
            return None
        return ServedModel(model_id(info.name), info.path, info.context_length)

    def models(self) -> list[ServedModel]:
        served = self.served_model()
        return [served] if served is not None else []
