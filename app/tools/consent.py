"""Consent for tool calls: every call is asked about, unless the user said "always" for
that tool of that server.

``ApprovalPolicy(ask, resolve=toolbox.resolve)`` is the ``approve`` that ``run_turn``
(app/chat/turn.py) takes. ``ask(call, tool)`` is the UI's question (or the CLI's) and
answers a ``Decision``:

- ``ALLOW_ONCE``: run this call;
- ``ALWAYS``: run it, and every later call of this tool of this server without asking
  (kept in ``tool-approvals.json`` in the data folder, written all-or-nothing);
- ``DENY``: do not run it; run_turn sends the model a refusal as the tool's (error) result.

A call of a tool the toolbox does not know is never approved (there is nothing to run).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from pathlib import Path

from app.chat.parts import ToolCall
from app.fileio import read_json, write_json_atomic
from app.paths import data_root
from app.tools.spec import Tool

APPROVALS_NAME = "tool-approvals.json"


class Decision(enum.Enum):
    ALLOW_ONCE = "once"
    ALWAYS = "always"
    DENY = "deny"


Ask = Callable[[ToolCall, Tool], Decision]


class AlwaysAllowed:
    """The tools the user always allows, as ``server/tool`` keys, in one JSON file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_root() / APPROVALS_NAME
        self._lock = threading.Lock()

    def keys(self) -> set[str]:
        keys = read_json(self.path).get("always")
        return {str(k) for k in keys} if isinstance(keys, list) else set()

    def __contains__(self, tool: Tool) -> bool:
        return tool.key in self.keys()

    def add(self, tool: Tool) -> None:
        with self._lock:
            self._write(self.keys() | {tool.key})

    def revoke(self, key: str) -> bool:
        with self._lock:
            keys = self.keys()
            if key not in keys:
                return False
            self._write(keys - {key})
            return True

    def forget_server(self, server: str) -> None:
        """Drop every "always" of a server (it was removed)."""
        with self._lock:
            keys = self.keys()
            kept = {k for k in keys if k.split("/", 1)[0] != server}
            if kept != keys:
                self._write(kept)

    def _write(self, keys: set[str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, {"version": 1, "always": sorted(keys)}, ensure_ascii=False)


class ApprovalPolicy:
    """``policy(call) -> bool``: run_turn's ``approve``."""

    def __init__(self, ask: Ask, resolve: Callable[[str], Tool | None],
                 always: AlwaysAllowed | None = None) -> None:
        self.ask = ask
        self.resolve = resolve
        self.always = always if always is not None else AlwaysAllowed()
        self.decisions: list[tuple[ToolCall, Decision]] = []  # this policy's, in order

    def __call__(self, call: ToolCall) -> bool:
        tool = self.resolve(call.name)
        if tool is None:
            return False
        if tool in self.always:
            return True
        decision = self.ask(call, tool)
        self.decisions.append((call, decision))
        if decision is Decision.ALWAYS:
            self.always.add(tool)
        return decision in (Decision.ALLOW_ONCE, Decision.ALWAYS)


def allow_all(call: ToolCall) -> bool:
    """The CLI's ``--yes``: the user approved every call up front."""
    return True
