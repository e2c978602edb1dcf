"""One live MCP server: a stdio child process or a streamable-HTTP endpoint.

Runs on the toolbox's loop (app/tools/loop.py). The SDK's ``Client`` must be entered and left
by one task, so ``_serve`` holds it open until ``close``; calls are made from other tasks.
Every wait is bounded: connecting (``connect_timeout_s``), listing (``list_timeout_s``),
calling (the server's ``call_timeout_s``), closing (the SDK's own bounded stop of the child:
close stdin, wait, terminate, kill).

Failures become ``ToolError`` with a sentence that names the server: it would not start,
it stopped (with the last line it wrote to stderr), it did not answer in time, it answered
something that is not MCP. A server that stopped or hung is closed and marked dead; the
toolbox starts it afresh on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from typing import Any
from urllib.parse import urlsplit

from app.network import feature, is_offline, record_refusal
from app.network.guard import is_loopback
from app.tools.config import ServerConfig
from app.tools.spec import Tool

CONNECT_TIMEOUT_S = 30.0
LIST_TIMEOUT_S = 15.0
CLOSE_TIMEOUT_S = 10.0  # the SDK's own stop of a child is bounded at ~6 s
MAX_TOOLS = 500  # listing pages stop here: a server that pages forever cannot hang us
NETWORK_FEATURE = "MCP server"
# The SDK logs a server's junk lines with tracebacks; without a handler of the app's own they
# would reach the terminal through logging's last resort. Failures reach the user as
# sentences (ToolError) instead.
logging.getLogger("mcp").addHandler(logging.NullHandler())


class ToolError(Exception):
    """A server-side failure, as a sentence for the user and the model."""


def offline_refusal(config: ServerConfig) -> str | None:
    """The sentence that refuses an HTTP server in offline mode (None when it may connect).
    A server on this computer (loopback) is local, as stdio servers are."""
    if config.transport != "http" or not is_offline():
        return None
    host = urlsplit(config.url).hostname or ""
    if is_loopback(host):
        return None
    record_refusal(config.url)  # the network log shows it, though no socket was opened
    return (f"Offline mode is on, so Hearth did not connect to the MCP server "
            f"“{config.name}” at {config.url}. Servers that run on this computer (stdio) "
            "still work.")


class ServerConnection:
    """One server's session. Its coroutines run on the toolbox's loop only."""

    def __init__(self, config: ServerConfig, *, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 list_timeout_s: float = LIST_TIMEOUT_S) -> None:
        self.config = config
        self.connect_timeout_s = connect_timeout_s
        self.list_timeout_s = list_timeout_s
        self._client: Any = None
        self._task: asyncio.Task | None = None
        self._stop: asyncio.Event | None = None
        self._errlog: Any = None
        self.dead = False

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def open(self) -> bool:
        return self._client is not None and not self.dead

    # -- connecting ------------------------------------------------------------------------

    def _transport(self) -> Any:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        config = self.config
        if config.transport == "http":
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            timeout = httpx2.Timeout(self.connect_timeout_s, read=max(config.call_timeout_s,
                                                                       self.list_timeout_s))
            client = httpx2.AsyncClient(headers=config.headers, timeout=timeout,
                                        follow_redirects=True)
            return streamable_http_client(config.url, http_client=client)
        env = {"PYTHONUNBUFFERED": "1", **config.env}
        if is_offline():  # a child of an offline Hearth is offline too (app/network/offline)
            env.update({k: os.environ[k] for k in ("HEARTH_OFFLINE", "HF_HUB_OFFLINE",
                                                   "PIP_NO_INDEX") if k in os.environ})
        params = StdioServerParameters(command=config.command, args=list(config.args),
                                       env=env, cwd=config.cwd or None,
                                       encoding_error_handler="replace")
        # the child's stderr: its last lines go into the sentence when it fails (closed in
        # close())
        self._errlog = tempfile.TemporaryFile(  # noqa: SIM115
            "w+", encoding="utf-8", errors="replace")
        return stdio_client(params, errlog=self._errlog)

    async def connect(self) -> None:
        """Start (or reach) the server and finish the handshake; ToolError otherwise."""
        with feature(NETWORK_FEATURE):
            refusal = offline_refusal(self.config)
        if refusal:
            raise ToolError(refusal)
        loop = asyncio.get_running_loop()
        ready: asyncio.Future = loop.create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._serve(ready), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout_s)
        except asyncio.TimeoutError:
            await self.close()
            raise ToolError(f"The MCP server “{self.name}” did not finish starting within "
                            f"{self.connect_timeout_s:g} s{self._stderr_tail()}.") from None
        except ToolError:
            await self.close()
            raise

    async def _serve(self, ready: asyncio.Future) -> None:
        from mcp import Client
        from mcp_types import Implementation

        from app import __version__

        with feature(NETWORK_FEATURE):
            try:
                transport = self._transport()
                async with Client(transport, client_info=Implementation(
                        name="Hearth", version=__version__)) as client:
                    self._client = client
                    if not ready.done():
                        ready.set_result(None)
                    assert self._stop is not None
                    await self._stop.wait()
            except asyncio.CancelledError:
                if not ready.done():
                    ready.cancel()
                raise
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(ToolError(self._start_failure(exc)))
            finally:
                self._client = None
                self.dead = True

    def _start_failure(self, exc: BaseException) -> str:
        detail = _describe(exc)
        if self.config.transport == "http":
            return f"Hearth could not connect to the MCP server “{self.name}” at " \
                   f"{self.config.url}: {detail}."
        if isinstance(_leaf(exc), FileNotFoundError):
            return (f"The MCP server “{self.name}” could not start: the command "
                    f"“{self.config.command}” was not found.")
        return (f"The MCP server “{self.name}” could not start ({detail})"
                f"{self._stderr_tail()}.")

    def _stderr_tail(self, lines: int = 3) -> str:
        handle = self._errlog
        if handle is None:
            return ""
        try:
            handle.flush()
            handle.seek(0)
            text = handle.read()[-4000:]
            handle.seek(0, os.SEEK_END)
        except (OSError, ValueError):
            return ""
        tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return f"; it last wrote: “{' / '.join(tail)[:300]}”" if tail else ""

    # -- requests --------------------------------------------------------------------------

    async def list_tools(self) -> list[Tool]:
        client = self._require()
        tools: list[Tool] = []
        cursor = None
        try:
            deadline = asyncio.get_running_loop().time() + self.list_timeout_s
            while len(tools) < MAX_TOOLS:
                left = deadline - asyncio.get_running_loop().time()
                page = await asyncio.wait_for(client.list_tools(cursor=cursor), max(left, 0))
                tools += [Tool(self.name, t.name, t.description or "",
                               dict(t.input_schema or {})) for t in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    break
        except asyncio.TimeoutError:
            await self.close()
            raise ToolError(f"The MCP server “{self.name}” did not list its tools within "
                            f"{self.list_timeout_s:g} s.") from None
        except Exception as exc:
            raise await self._failure("listing its tools", exc) from None
        return tools[:MAX_TOOLS]

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """The ``CallToolResult``; ToolError when the server fails (a tool's own error is
        a result with ``is_error``)."""
        client = self._require()
        timeout = self.config.call_timeout_s
        try:
            return await asyncio.wait_for(client.call_tool(name, arguments), timeout)
        except asyncio.TimeoutError:
            await self.close()
            raise ToolError(f"The MCP server “{self.name}” did not answer the call to {name} "
                            f"within {timeout:g} s, so Hearth stopped waiting (and stopped "
                            "the server; it starts again on the next call).") from None
        except Exception as exc:
            raise await self._failure(f"running {name}", exc) from None

    def _require(self) -> Any:
        if self._client is None or self.dead:
            raise ToolError(f"The MCP server “{self.name}” is not running.")
        return self._client

    async def _failure(self, doing: str, exc: BaseException) -> ToolError:
        from mcp.shared.exceptions import MCPError
        from mcp_types.jsonrpc import CONNECTION_CLOSED

        if (isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED) or self.dead:
            await asyncio.sleep(0.05)  # let the child's last words reach the log
            tail = self._stderr_tail()
            await self.close()
            return ToolError(f"The MCP server “{self.name}” stopped while {doing}{tail}.")
        if isinstance(exc, MCPError):
            return ToolError(f"The MCP server “{self.name}” refused {doing.split(' ', 1)[-1]}:"
                             f" {exc.error.message}.")
        return ToolError(f"The MCP server “{self.name}” sent an answer Hearth cannot read "
                         f"while {doing} ({_describe(exc)}).")

    # -- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the session (and the child process); bounded."""
        task, self._task = self._task, None
        if self._stop is not None:
            self._stop.set()
        if task is not None and task is not asyncio.current_task():
            try:
                await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT_S)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(task, CLOSE_TIMEOUT_S)
            except BaseException:
                pass  # the session's own error was reported where it happened
        self.dead = True
        self._client = None
        if self._errlog is not None:
            with contextlib.suppress(OSError):
                self._errlog.close()
            self._errlog = None


def _leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (anyio wraps failures in groups)."""
    while getattr(exc, "exceptions", None):  # an (anyio / exceptiongroup) group
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def _describe(exc: BaseException) -> str:
    leaf = _leaf(exc)
    text = str(leaf).strip() or type(leaf).__name__
    return text.splitlines()[0][:300]

