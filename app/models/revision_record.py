"""The commit each unpinned Hub repo resolved to when it was first downloaded.

A catalog entry without a pinned commit (``revision: "main"``) and a Hub repo planned by name
are resolved once; the commit is kept here, in the models folder, outside any model's own
folder so it outlives removing the model. Every later download of that repo fetches that
commit again, so its bytes are checked against the same file listing (sizes, sha256) as the
first time, whatever ``main`` points to by then.
"""

from __future__ import annotations

from pathlib import Path

from app.fileio import read_json, write_json_atomic

RECORD_NAME = ".hub-revisions.json"


class RevisionRecord:
    """``repo -> commit`` for the repos downloaded into one models folder."""

    def __init__(self, models_root: Path) -> None:
        self.path = Path(models_root) / RECORD_NAME

    def get(self, repo: str) -> str | None:
        """The commit ``repo`` resolved to at its first download, if any."""
        commit = read_json(self.path).get(repo)
        return commit if isinstance(commit, str) else None

    def remember(self, repo: str, commit: str) -> None:
        """Record ``commit`` for ``repo`` unless a commit is already recorded for it."""
        data = read_json(self.path)
        if repo not in data:
            write_json_atomic(self.path, {**data, repo: commit})
