"""Worker test fixtures: the generation worker hosted as the chat controller hosts it, with a
fake engine loader, shut down after."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QObject, Signal

from app.chat.events import Finished, PrefillProgress, ReasoningDelta, TextDelta
from app.workers.generation_worker import GenerationWorker, reply_result
from app.workers.thread_host import ThreadHost
from tests.workers.fake_engine import FakeLoader


class EngineThread(QObject):
    """The generation worker on its own thread (``ThreadHost``), seen from the UI thread.

    Its result signals are re-emitted here, on the UI thread, because pytest-qt's waitSignal
    must run where its timer lives. Requests go through ``post`` like the controller's.
    The worker's one ``event`` signal is re-emitted as it is (``event``) and, for the tests
    that follow one kind, split by kind: prefill progress, answer and thinking deltas, and
    the ``Finished`` summed up (``reply_result``) on ``finished``."""

    event = Signal(str, object)
    approval_requested = Signal(object)
    loaded = Signal(object)
    load_failed = Signal(str)
    prefill_progress = Signal(str, int, int)
    chunk = Signal(str, str)
    reasoning_chunk = Signal(str, str)
    finished = Signal(str, object)
    failed = Signal(str, str)
    crashed = Signal(str)

    def __init__(self, loader) -> None:
        super().__init__()
        self.worker = GenerationWorker(loader)
        self._host = ThreadHost(self.worker, "hearth-generation", stop=self.worker.stop)
        self.thread = self._host.thread
        w = self.worker
        for name in ("loaded", "load_failed", "event", "approval_requested", "failed",
                     "crashed"):
            getattr(w, name).connect(getattr(self, f"_on_{name}"))

    def _on_event(self, conv: str, event) -> None:
        self.event.emit(conv, event)
        if isinstance(event, PrefillProgress):
            self.prefill_progress.emit(conv, event.done, event.total)
        elif isinstance(event, TextDelta):
            self.chunk.emit(conv, event.text)
        elif isinstance(event, ReasoningDelta):
            self.reasoning_chunk.emit(conv, event.text)
        elif isinstance(event, Finished):
            self.finished.emit(conv, reply_result(conv, event, self.worker.info))

    def _on_approval_requested(self, request) -> None:
        self.approval_requested.emit(request)

    def _on_loaded(self, info) -> None:
        self.loaded.emit(info)

    def _on_load_failed(self, message: str) -> None:
        self.load_failed.emit(message)

    def _on_failed(self, conv: str, message: str) -> None:
        self.failed.emit(conv, message)

    def _on_crashed(self, details: str) -> None:
        self.crashed.emit(details)

    def load(self, path) -> None:
        self._host.post(self.worker.on_load_requested, path)

    def generate(self, request) -> None:
        self._host.post(self.worker.on_generate_requested, request)

    def forget(self, conversation_id: str) -> None:
        self._host.post(self.worker.on_forget_requested, conversation_id)

    def stop(self) -> None:
        self.worker.stop()

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        if not self._host.shutdown(timeout_ms):
            return False
        self.worker.close_engine()
        return True


@pytest.fixture
def loader() -> FakeLoader:
    return FakeLoader()


@pytest.fixture
def host(qtbot, loader):
    h = EngineThread(loader)
    yield h
    assert h.shutdown(5000)


class Recorder:
    """Records host result signals in arrival order."""

    def __init__(self, host: EngineThread) -> None:
        self.events: list[tuple] = []
        host.loaded.connect(lambda info: self.events.append(("loaded", info.name)))
        host.load_failed.connect(lambda msg: self.events.append(("load_failed", msg)))
        host.prefill_progress.connect(
            lambda conv, done, total: self.events.append(("prefill", conv, done, total)))
        host.chunk.connect(lambda conv, text: self.events.append(("chunk", conv, text)))
        host.reasoning_chunk.connect(
            lambda conv, text: self.events.append(("reasoning", conv, text)))
        host.finished.connect(lambda conv, res: self.events.append(("finished", conv, res)))
        host.failed.connect(lambda conv, msg: self.events.append(("failed", conv, msg)))
        host.crashed.connect(lambda details: self.events.append(("crashed", details)))

    def kinds(self) -> list[str]:
        return [e[0] for e in self.events]


@pytest.fixture
def recorder(host) -> Recorder:
    return Recorder(host)
