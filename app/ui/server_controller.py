"""The local server inside the app: start / stop it over the chat's generation worker.

Owns one ``ServerRunner`` (uvicorn on a background thread) over a ``WorkerEngineExecutor``,
so requests share the loaded model with the chat window and wait their turn behind its
replies. The settings window shows its switch, address and live counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal, Slot

from app.errors import HearthError
from app.workers.engine_executor import WorkerEngineExecutor
from app.workers.generation_worker import GenerationWorker
from app.workers.thread_host import ThreadHost

if TYPE_CHECKING:  # Starlette and uvicorn: loaded when the server first starts
    from app.server.app import HearthApi
    from app.server.config import ServerConfig
    from app.server.runner import ServerRunner


class ServerController(QObject):
    """Starts and stops the local OpenAI-compatible server (UI thread).

    Signals:
        started(str base_url): the server listens at this address (for "copy").
        stopped(): the server has stopped.
        failed(str message): it could not start (unsafe settings, port in use, ...).
        requests_changed(int active, int served): requests running or waiting, and finished.
    """

    started = Signal(str)
    stopped = Signal()
    failed = Signal(str)
    requests_changed = Signal(int, int)
    _counts = Signal(int, int)  # from the server's threads; relayed on the UI thread

    def __init__(self, host: ThreadHost[GenerationWorker], parent: QObject | None = None):
        super().__init__(parent)
        self._executor = WorkerEngineExecutor(host)
        self._runner: ServerRunner | None = None
        self._counts.connect(self._on_counts)

    @property
    def running(self) -> bool:
        return self._runner is not None and self._runner.running

    @property
    def address(self) -> str | None:
        """The base URL clients use (``http://127.0.0.1:PORT/v1``), while running."""
        if self._runner is None or self._runner.address is None:
            return None
        return self._runner.address.base_url

    @property
    def model_id(self) -> str | None:
        """The id under which the loaded model is served (None while none is loaded)."""
        served = self._executor.served_model()
        return served.id if served is not None else None

    @property
    def api(self) -> HearthApi | None:
        return self._runner.api if self._runner is not None else None

    def start(self, config: ServerConfig) -> bool:
        """Start serving (stopping a running server first); False, with ``failed``, when it
        cannot."""
        from app.server.app import HearthApi
        from app.server.runner import ServerRunner

        self.stop()
        api = HearthApi(self._executor, config)
        api.admission.add_listener(self._counts.emit)
        runner = ServerRunner(api)
        try:
            address = runner.start()
        except HearthError as exc:
            self.failed.emit(str(exc))
            return False
        self._runner = runner
        self.started.emit(address.base_url)
        return True

    def stop(self) -> bool:
        """Stop within about 2 s (generations in flight are cancelled). True when stopped."""
        if self._runner is None:
            return True
        ended = self._runner.stop()
        self._runner = None
        self.stopped.emit()
        return ended

    @Slot(int, int)
    def _on_counts(self, active: int, served: int) -> None:
        self.requests_changed.emit(active, served)
