"""One generic owner for a worker QObject and its QThread.

The worker lives on its own thread; the UI connects straight to the worker's signals (Qt
queues them to the receiver's thread) and sends requests with ``post``, which queues a call
to run on the worker's thread in FIFO order. Shutdown is the one order that never leaves a
running thread behind: stop (a flag the worker checks) → quit → wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

W = TypeVar("W", bound=QObject)


class _Dispatcher(QObject):
    """Runs posted calls on the thread it lives on."""

    @Slot(object)
    def run(self, call: object) -> None:
        function, args = call  # type: ignore[misc]
        function(*args)


class ThreadHost(QObject, Generic[W]):
    """Moves ``worker`` onto a new QThread named ``name`` and starts it.

    Signals: posted(object) — internal, queued to the worker thread.
    ``stop`` (optional) is called directly from the caller's thread on shutdown: it must only
    set flags (thread-safe), never touch the worker's state."""

    posted = Signal(object)

    def __init__(
        self,
        worker: W,
        name: str,
        *,
        stop: Callable[[], None] | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.worker = worker
        self._stop = stop
        self.thread = QThread()
        self.thread.setObjectName(name)
        self._dispatcher = _Dispatcher()
        worker.moveToThread(self.thread)
        self._dispatcher.moveToThread(self.thread)
        self.posted.connect(self._dispatcher.run, Qt.ConnectionType.QueuedConnection)
        self.thread.start()

    def post(self, method: Callable[..., Any], *args: Any) -> None:
        """Run ``method(*args)`` on the worker's thread, after everything posted before."""
        self.posted.emit((method, args))

    @property
    def running(self) -> bool:
        return self.thread.isRunning()

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Stop → quit → wait. True when the thread has ended."""
        if not self.thread.isRunning():
            return True
        if self._stop is not None:
            self._stop()
        self.thread.quit()
        return self.thread.wait(timeout_ms)
