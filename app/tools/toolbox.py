"""``McpToolbox``: the turn layer's ``Toolbox`` (app/chat/turn.py) over MCP servers.

It owns one ``LoopThread`` and a ``ServerConnection`` per server, started on first use
(``tools()`` / ``specs()``) all at once. A server that fails to start or list is left out
of the tools, with its sentence in ``problems``; the others go on. A call never raises: a
server that crashed, hung or answered junk becomes ``ToolResult(is_error=True)`` with a
sentence, and a dead server is started afresh on the next call.

``close()`` stops every server (bounded) and the loop; a toolbox still open when the
process exits is closed by an ``atexit`` hook, so no child process outlives Hearth.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence

from app.chat.parts import ToolCall, ToolResult
from app.tools.config import ServerConfig
from app.tools.connection import (
    CLOSE_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    LIST_TIMEOUT_S,
    ServerConnection,
    ToolError,
)
from app.tools.loop import LoopThread
from app.tools.results import DEFAULT_RESULT_LIMIT, result_text
from app.tools.spec import Tool, exposed_names

_open_toolboxes: weakref.WeakSet[McpToolbox] = weakref.WeakSet()
_MARGIN_S = 5.0  # past the connection's own bound, the loop is not answering at all


class McpToolbox:
    """Tools of the given servers (``allow`` filters which tools are offered)."""

    def __init__(
        self,
        servers: Sequence[ServerConfig],
        *,
        allow: Callable[[Tool], bool] | None = None,
        result_limit: int = DEFAULT_RESULT_LIMIT,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        list_timeout_s: float = LIST_TIMEOUT_S,
    ) -> None:
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise ValueError("two MCP servers share a name")
        self.servers = {s.name: s for s in servers}
        self.allow = allow
        self.result_limit = result_limit
        self.connect_timeout_s = connect_timeout_s
        self.list_timeout_s = list_timeout_s
        self.problems: dict[str, str] = {}  # server → why it offers no tools now
        self._loop = LoopThread()
        self._connections: dict[str, ServerConnection] = {}
        self._tools: list[Tool] | None = None
        self._lock = threading.RLock()
        self._closed = False
        _open_toolboxes.add(self)

    # -- the Toolbox protocol ----------------------------------------------------------

    def specs(self) -> list[dict]:
        return [tool.openai_spec() for tool in self.tools()]

    def call(self, call: ToolCall) -> ToolResult:
        tool = self.resolve(call.name)
        if tool is None:
            offered = ", ".join(t.exposed for t in self.tools()) or "none"
            return self._error(call, f"There is no tool named {call.name} (offered: "
                                     f"{offered}).")
        try:
            arguments = call.parsed_arguments()
        except ValueError as exc:
            return self._error(call, str(exc))
        server = self.servers[tool.server]
        bound = (self.connect_timeout_s + server.call_timeout_s + CLOSE_TIMEOUT_S
                 + _MARGIN_S)
        try:
            result = self._loop.run(self._call(tool, arguments), bound)
        except ToolError as exc:
            return self._error(call, str(exc))
        except TimeoutError:
            return self._error(call, f"The MCP server “{tool.server}” did not answer the call "
                                     f"to {tool.name} within {bound:g} s.")
        return ToolResult(call.id, result_text(result, self.result_limit),
                          is_error=bool(getattr(result, "is_error", False)), name=call.name)

    # -- tools ---------------------------------------------------------------------------

    def tools(self, *, refresh: bool = False) -> list[Tool]:
        """The tools on offer (servers started on first use); ``problems`` says which
        servers offer none and why."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the toolbox is closed")
            if self._tools is None or refresh:
                bound = (self.connect_timeout_s + self.list_timeout_s + CLOSE_TIMEOUT_S
                         + _MARGIN_S)
                try:
                    listed = self._loop.run(self._list_all(self.servers), bound)
                except TimeoutError:  # each server has its own bounds: this is a stuck loop
                    listed = {}
                    for name in self.servers:
                        self.problems.setdefault(name, f"The MCP server “{name}” did not "
                                                       f"list its tools within {bound:g} s.")
                everything = [t for name in self.servers for t in listed.get(name, [])]
                self._tools = exposed_names(everything)
            return [t for t in self._tools if self.allow is None or self.allow(t)]

    def tools_of(self, server: str) -> list[Tool]:
        return [t for t in self.tools() if t.server == server]

    def resolve(self, exposed: str) -> Tool | None:
        """The tool the model named (by the name it was offered)."""
        return next((t for t in self.tools() if t.exposed == exposed), None)

    async def _list_all(self, servers: Iterable[str]) -> dict[str, list[Tool]]:
        names = list(servers)
        found = await asyncio.gather(*(self._list_one(n) for n in names))
        return dict(zip(names, found, strict=True))

    async def _list_one(self, name: str) -> list[Tool]:
        try:
            connection = await self._connected(name)
            tools = await connection.list_tools()
        except ToolError as exc:
            self.problems[name] = str(exc)
            return []
        self.problems.pop(name, None)
        return tools

    async def _connected(self, name: str) -> ServerConnection:
        connection = self._connections.get(name)
        if connection is None or not connection.open:
            if connection is not None:
                await connection.close()
            connection = ServerConnection(self.servers[name],
                                          connect_timeout_s=self.connect_timeout_s,
                                          list_timeout_s=self.list_timeout_s)
            self._connections[name] = connection
            await connection.connect()
        return connection

    async def _call(self, tool: Tool, arguments: dict) -> object:
        connection = await self._connected(tool.server)
        return await connection.call(tool.name, arguments)

    @staticmethod
    def _error(call: ToolCall, sentence: str) -> ToolResult:
        return ToolResult(call.id, sentence, is_error=True, name=call.name)

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every server and the loop; safe to call twice and from any thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._loop.running and self._connections:
            # past the bound the loop is stopped below; the SDK's kill of a child is shielded
            with contextlib.suppress(TimeoutError, RuntimeError):
                self._loop.run(self._close_all(), CLOSE_TIMEOUT_S + _MARGIN_S)
        self._loop.stop()
        _open_toolboxes.discard(self)

    async def _close_all(self) -> None:
        await asyncio.gather(*(c.close() for c in self._connections.values()),
                             return_exceptions=True)
        self._connections.clear()

    def __enter__(self) -> McpToolbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _close_open_toolboxes() -> None:
    for toolbox in list(_open_toolboxes):
        toolbox.close()
