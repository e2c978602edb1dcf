"""Which MCP servers and tools each chat has switched on (the data model of the per-chat
tools menu; the UI is its next step).

A chat starts with none: tools are offered only where the user switched a server on.
Within a server every tool is on unless switched off (``tools_off``, ``server/tool`` keys).
Kept in ``chat-tools.json`` in the data folder, by conversation id, written all-or-nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from app.fileio import read_json, write_json_atomic
from app.paths import data_root
from app.tools.spec import Tool

SELECTION_NAME = "chat-tools.json"


@dataclass(frozen=True)
class ChatTools:
    servers: frozenset[str] = field(default_factory=frozenset)
    tools_off: frozenset[str] = field(default_factory=frozenset)

    def allows(self, tool: Tool) -> bool:
        """Whether ``tool`` is offered in this chat (McpToolbox's ``allow``)."""
        return tool.server in self.servers and tool.key not in self.tools_off

    def with_server(self, server: str, on: bool = True) -> ChatTools:
        servers = self.servers | {server} if on else self.servers - {server}
        return ChatTools(frozenset(servers), self.tools_off)

    def with_tool(self, tool: Tool, on: bool = True) -> ChatTools:
        off = self.tools_off - {tool.key} if on else self.tools_off | {tool.key}
        return ChatTools(self.servers, frozenset(off))


class ChatToolsStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_root() / SELECTION_NAME
        self._lock = threading.Lock()

    def get(self, conversation_id: str) -> ChatTools:
        row = self._rows().get(conversation_id)
        if not isinstance(row, dict):
            return ChatTools()
        return ChatTools(frozenset(map(str, row.get("servers") or ())),
                         frozenset(map(str, row.get("tools_off") or ())))

    def set(self, conversation_id: str, choice: ChatTools) -> None:
        with self._lock:
            rows = self._rows()
            if choice.servers or choice.tools_off:
                rows[conversation_id] = {"servers": sorted(choice.servers),
                                         "tools_off": sorted(choice.tools_off)}
            else:
                rows.pop(conversation_id, None)
            self._write(rows)

    def forget(self, conversation_id: str) -> None:
        """The chat was deleted."""
        self.set(conversation_id, ChatTools())

    def forget_server(self, server: str) -> None:
        """The server was removed: no chat keeps it switched on."""
        with self._lock:
            rows = self._rows()
            for row in rows.values():
                if isinstance(row, dict):
                    row["servers"] = [s for s in row.get("servers") or () if s != server]
                    row["tools_off"] = [k for k in row.get("tools_off") or ()
                                        if str(k).split("/", 1)[0] != server]
            self._write({k: v for k, v in rows.items()
                         if isinstance(v, dict) and (v["servers"] or v["tools_off"])})

    def _rows(self) -> dict:
        chats = read_json(self.path).get("chats")
        return dict(chats) if isinstance(chats, dict) else {}

    def _write(self, rows: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, {"version": 1, "chats": rows}, ensure_ascii=False)
