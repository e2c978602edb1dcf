"""The local server's ``EngineExecutor`` inside the desktop app: the generation worker's
QThread runs the server's jobs between the chat window's requests (``on_run_requested``), so
the window and the server share the loaded model and its conversation caches and never run
two generations at once."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TypeVar

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

    def submit(self, fn: Job[T]) -> Future[T]:
        future: Future[T] = Future()
        self._host.post(self._worker.on_run_requested, fn, future)
        return future

    def served_model(self) -> ServedModel | None:
        info = self._worker.info
        if info is None:
            return None
        return ServedModel(model_id(info.name), info.path, info.context_length)
