"""When a library checks its folders on its own: at most once per ``interval_s`` per library.

``LibraryWatch.check(library, names)`` runs ``DocumentLibrary.changes`` (walk + stat, nothing
read) for each library whose last check is older than the interval, drops the files gone
from disk at once (a quick delete: the next search no longer finds them), and returns the
files that may have changed, per library, for the caller to index in the background
(``DocumentLibrary.sync_files``: the content hash decides). Thread-safe: the window checks
from its documents thread (when the library opens) and from a turn's search (the generation
thread), never from the UI thread.

``has_watched_folders(index_path)`` answers, without opening the library (no embedder, no
numpy), whether any library in the index has folders to check: the window opens the library
at start only then (a read-only SQLite query, run on the documents thread).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.documents.attach import CHAT_PREFIX
from app.errors import HearthError

if TYPE_CHECKING:  # (the window imports this at start: numpy only once a library opens)
    from app.documents.library import DocumentLibrary

log = logging.getLogger(__name__)

#: a locked index waits this long (seconds) before the start gives up on checking it
PROBE_TIMEOUT_S = 2.0

#: a library the user made (not a chat's own collection) with at least one folder or file
_WATCHED = """
SELECT 1 FROM collections AS c JOIN roots AS r ON r.collection_id = c.id
WHERE substr(c.name, 1, length(?)) != ? LIMIT 1
"""


def has_watched_folders(index_path: Path) -> bool:
    """Whether the index at ``index_path`` holds a library with folders to check (read-only,
    nothing created). A missing, locked or unreadable index: False (logged), the start
    leaves it alone; opening the library later says what is wrong with it."""
    if not index_path.is_file():
        return False
    try:
        uri = f"{index_path.resolve().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=PROBE_TIMEOUT_S)
        try:
            row = conn.execute(_WATCHED, (CHAT_PREFIX, CHAT_PREFIX)).fetchone()
        finally:
            conn.close()
    except (sqlite3.Error, OSError) as exc:
        log.warning("could not check the document index %s for libraries: %s", index_path, exc)
        return False
    return row is not None


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
