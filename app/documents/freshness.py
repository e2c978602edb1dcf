"""When a library checks its folders on its own: at most once per ``interval_s`` per library.

``LibraryWatch.check(library, names)`` runs ``DocumentLibrary.changes`` (walk + stat, nothing
read) for each library whose last check is older than the interval, drops the files gone
from disk at once (a quick delete: the next search no longer finds them), and returns the
files that may have changed, per library, for the caller to index in the background
(``DocumentLibrary.sync_files``: the content hash decides). Thread-safe: the window checks
from its documents thread (when the library opens) and from a turn's search (the generation
thread), never from the UI thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.errors import HearthError

if TYPE_CHECKING:  # (the window imports this at start: numpy only once a library opens)
    from app.documents.library import DocumentLibrary

#: a library's folders are walked at most this often (seconds) by the checks on their own
CHECK_INTERVAL_S = 120.0


class LibraryWatch:
    def __init__(self, interval_s: float = CHECK_INTERVAL_S, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def due(self, name: str) -> bool:
        with self._lock:
            last = self._last.get(name)
        return last is None or self.clock() - last >= self.interval_s

    def check(self, library: DocumentLibrary, names: Sequence[str]) -> dict[str, list[Path]]:
        """Check each of ``names`` that is due; drop its gone files; its changed ones back."""
        changed: dict[str, list[Path]] = {}
        for name in names:
            with self._lock:  # claimed before the walk: a second check meanwhile skips it
                last = self._last.get(name)
                now = self.clock()
                if last is not None and now - last < self.interval_s:
                    continue
                self._last[name] = now
            try:
                found = library.changes(name)
                library.drop_gone(name, found.gone)
            except HearthError:
                continue  # removed meanwhile
            if found.changed:
                changed[name] = found.changed
        return changed
