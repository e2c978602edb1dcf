"""Small JSON file helpers shared by the store, the downloader and the settings."""

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


def write_json_atomic(path: Path, data: dict, *, indent: int = 2) -> None:
    """Write JSON through a temp file and a rename, so a crash never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=indent) + "\n", encoding="utf-8")
    os.replace(tmp, path)
