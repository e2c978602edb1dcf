"""The one place JSON files are read and written (store, downloader, settings, snapshots…).

Writes are all-or-nothing: a temp file beside the target, flushed to disk, then renamed over
it, so a crash or a full disk never leaves half a file."""

from __future__ import annotations

import json
import os
from pathlib import Path


def read_json(path: Path) -> dict:
    """The JSON object in ``path``, or ``{}`` when it is missing, unreadable or not an object
    (nested past the parser's recursion limit included: a hostile file)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json_atomic(
    path: Path, data: dict | list, *, indent: int | None = 2, ensure_ascii: bool = True,
    mode: int | None = None,
) -> None:
    """Write JSON through a temp file, fsync and a rename; on any error the old file stays
    and the temp file is removed. ``mode`` (e.g. 0o600 for secrets) is set on the temp file
    before anything is written to it."""
    path = Path(path)
    text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    try:
        if mode is not None:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            os.chmod(tmp, mode)  # an older temp file, or the umask, may have other bits
            handle = os.fdopen(fd, "w", encoding="utf-8")
        else:
            handle = open(tmp, "w", encoding="utf-8")  # noqa: SIM115 - closed just below
        with handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
