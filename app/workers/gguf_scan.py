"""The GGUF finder's scan of other apps' folders (LM Studio, Ollama, GPT4All, Jan), off the
UI thread, so a slow or hung disk never freezes the window.

``GGUFScan.start()`` runs ``app.models.gguf.locations`` on a thread of its own and reports,
each by a signal queued to the UI thread: ``folders`` (the apps' folders that exist),
``found`` (one GGUF, as soon as it is found), then ``finished``. ``stop()`` sets a flag the
scan checks between entries. The thread is a daemon: a ``scandir`` stuck on a dead network
mount can hold neither the dialog's close nor the app's quit (its late results go nowhere:
the receiver is gone).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.models.gguf import locations

#: off the UI thread the scan may take longer than the dialog's old 1 s cap
SCAN_BUDGET_S = 15.0

Scanner = Callable[..., Iterator["locations.FoundGGUF"]]


class GGUFScan(QObject):
    """Signals:
    folders(object list[(app, Path)]): the apps' folders that exist (first).
    found(object FoundGGUF): one GGUF file, as it is found.
    finished(bool stopped): the scan ended (``stopped``: by ``stop()``).
    """

    folders = Signal(object)
    found = Signal(object)
    finished = Signal(bool)

    def __init__(self, home: Path | None = None, *, scanner: Scanner | None = None,
                 budget_s: float = SCAN_BUDGET_S) -> None:
        super().__init__()  # no parent: it outlives its dialog while a stuck scan ends
        self.home = home
        self.scanner: Scanner = scanner or locations.scan_iter
        self.budget_s = budget_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hearth-gguf-scan",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the scan's thread (tests); True when it has ended."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _run(self) -> None:
        try:
            self.folders.emit(locations.existing_folders(self.home))
            for item in self.scanner(self.home, time_budget_s=self.budget_s,
                                     stop=self._stop.is_set):
                if self._stop.is_set():
                    break
                self.found.emit(item)
        except RuntimeError:  # the signal's object was deleted at quit: nobody listens
            return
        self.finished.emit(self._stop.is_set())
