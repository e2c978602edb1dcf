"""Sets up the starter model on a worker thread via ``app.models.starter.ensure_starter``."""

from __future__ import annotations

import os
import traceback
from numbers import Real

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from app.errors import HearthError


def describe_progress(*args: object, **kwargs: object) -> tuple[str, int]:
    """Turn whatever ``ensure_starter`` reports into (text, percent or -1).

    Accepts ``(done, total)``, ``(fraction,)``, ``(text,)``, ``(text, done, total)`` or an
    object with ``message``/``fraction``/``done``/``total`` attributes.
    """
    text = ""
    numbers: list[float] = []
    for value in [*args, *kwargs.values()]:
        if isinstance(value, str):
            text = value
        elif isinstance(value, Real) and not isinstance(value, bool):
            numbers.append(float(value))
        elif value is not None:
            text = str(getattr(value, "message", "") or getattr(value, "stage", "") or text)
            fraction = getattr(value, "fraction", None)
            if fraction is not None:
                numbers = [float(fraction)]
            elif getattr(value, "total", None):
                numbers = [float(value.done), float(value.total)]  # type: ignore[attr-defined]
    percent = -1
    if len(numbers) >= 2 and numbers[-1] > 0:
        percent = int(100 * numbers[-2] / numbers[-1])
    elif len(numbers) == 1 and 0 <= numbers[0] <= 1:
        percent = int(100 * numbers[0])
    return text or "Setting up the starter model…", max(-1, min(100, percent))


def starter_path(result: object) -> str:
    """The model folder from what ``ensure_starter`` returned (a path or an object with one)."""
    if isinstance(result, (str, os.PathLike)):
        return os.fspath(result)
    for attr in ("path", "model_dir", "root"):
        value = getattr(result, attr, None)
        if isinstance(value, (str, os.PathLike)):
            return os.fspath(value)
    return str(result)


class StarterWorker(QObject):
    """Signals: progress(str text, int percent), done(str model_dir), failed(str message)."""

    progress = Signal(str, int)
    done = Signal(str)
    failed = Signal(str)

    def on_progress(self, *args: object, **kwargs: object) -> None:
        """The callback handed to ensure_starter (runs on this worker's thread)."""
        self.progress.emit(*describe_progress(*args, **kwargs))

    @Slot()
    def run(self) -> None:
        try:
            from app.models.starter import ensure_starter
        except ImportError:
            self.failed.emit(
                "The starter model setup is not part of this build yet. Put an ONNX model "
                "folder in the models folder, then pick it in the toolbar."
            )
            return
        try:
            result = ensure_starter(progress=self.on_progress)
        except HearthError as exc:
            self.failed.emit(str(exc))
            return
        except Exception as exc:
            self.failed.emit(
                f"Setting up the starter model failed: {exc}\n\n{traceback.format_exc()}"
            )
            return
        path = starter_path(result)
        self.done.emit(str(path))


class StarterHost(QObject):
    """Runs one StarterWorker on its own thread; relays its signals to the UI thread.

    Signals: start_requested(); progress, done, failed as on StarterWorker.
    """

    start_requested = Signal()
    progress = Signal(str, int)
    done = Signal(str)
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.thread = QThread()
        self.thread.setObjectName("hearth-starter")
        self.worker = StarterWorker()
        self.worker.moveToThread(self.thread)
        queued = Qt.ConnectionType.QueuedConnection
        self.start_requested.connect(self.worker.run, queued)
        self.worker.progress.connect(self.progress, queued)
        self.worker.done.connect(self.done, queued)
        self.worker.failed.connect(self.failed, queued)
        self.thread.start()

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        self.thread.quit()
        return self.thread.wait(timeout_ms)
