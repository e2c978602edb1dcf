"""ThreadHost: posted calls run on the worker's own thread, in order; shutdown ends it."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, QThread, Signal

from app.workers.thread_host import ThreadHost


class _Worker(QObject):
    done = Signal(str, object)

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []
        self.stopped = threading.Event()

    def work(self, label: str, wait: threading.Event | None = None) -> None:
        if wait is not None:
            wait.wait(5)
        self.calls.append((label, threading.get_ident()))
        self.done.emit(label, QThread.currentThread())


def test_posted_calls_run_in_order_on_the_worker_thread(qtbot):
    worker = _Worker()
    host = ThreadHost(worker, "test-worker", stop=worker.stopped.set)
    gate = threading.Event()
    received: list[tuple[str, object]] = []
    worker.done.connect(lambda label, thread: received.append((label, thread)))
    host.post(worker.work, "first", gate)
    host.post(worker.work, "second")
    gate.set()
    qtbot.waitUntil(lambda: len(received) == 2, timeout=5000)
    assert [label for label, _ in received] == ["first", "second"]
    assert {thread for _, thread in received} == {host.thread}
    assert all(ident != threading.get_ident() for _, ident in worker.calls)
    assert host.shutdown(5000)
    assert worker.stopped.is_set()
    assert not host.running


class _Receiver(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[object] = []

    def on_done(self, label: str, thread: object) -> None:
        self.seen.append(QThread.currentThread())


def test_the_worker_signals_reach_a_ui_thread_receiver_queued(qtbot):
    worker = _Worker()
    host = ThreadHost(worker, "test-worker")
    receiver = _Receiver()
    worker.done.connect(receiver.on_done)  # a QObject's slot: queued to its thread
    host.post(worker.work, "x")
    qtbot.waitUntil(lambda: bool(receiver.seen), timeout=5000)
    assert receiver.seen == [QThread.currentThread()]
    assert host.shutdown(5000)
