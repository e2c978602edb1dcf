"""The one place JSON files are read and written (store, downloader, settings, snapshots…).

Writes are all-or-nothing: a temp file beside the target, flushed to disk, then renamed over
it, so a crash or a full disk never leaves half a file."""

from __future__ import annotations

import json
import os
from pathlib import Path


def read_json(path: Path) -> dict:
    """The JSON object in ``path``, or ``{}`` when it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json_atomic(
    path: Path, data: dict | list, *, indent: int | None = 2, ensure_ascii: bool = True
) -> None:
    """Write JSON through a temp file, fsync and a rename; on any error the old file stays
    and the temp file is removed."""
    path = Path(path)
    text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
