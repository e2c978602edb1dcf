"""Which libraries (document collections) each chat searches: ``chat-libraries.json`` in
the data folder, by conversation id, written all-or-nothing. A chat starts with none."""

from __future__ import annotations

import threading
from pathlib import Path

from app.fileio import read_json, write_json_atomic
from app.paths import data_root

SELECTION_NAME = "chat-libraries.json"


class ChatLibrariesStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_root() / SELECTION_NAME
        self._lock = threading.Lock()

    def get(self, conversation_id: str) -> frozenset[str]:
        names = self._rows().get(conversation_id)
        return frozenset(map(str, names)) if isinstance(names, list) else frozenset()

    def set(self, conversation_id: str, names: frozenset[str]) -> None:
        with self._lock:
            rows = self._rows()
            if names:
                rows[conversation_id] = sorted(names)
            else:
                rows.pop(conversation_id, None)
            self._write(rows)

    def forget_library(self, name: str) -> None:
        """The library was removed: no chat searches it any more."""
        with self._lock:
            rows = {cid: [n for n in names if n != name] for cid, names in self._rows().items()
                    if isinstance(names, list)}
            self._write({cid: names for cid, names in rows.items() if names})

    def _rows(self) -> dict:
        chats = read_json(self.path).get("chats")
        return dict(chats) if isinstance(chats, dict) else {}

    def _write(self, rows: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, {"version": 1, "chats": rows}, ensure_ascii=False)
