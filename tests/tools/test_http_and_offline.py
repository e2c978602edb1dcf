"""Streamable-HTTP MCP servers: a real one on loopback (the SDK's MCPServer in a child
process), headers from the secret store; offline mode refuses one on another host up front,
says so and logs it, while stdio servers and loopback go on working."""

from __future__ import annotations

import json
import socket
import subprocess
import time

import pytest

from app.chat.parts import ToolCall
from app.tools.config import ServerConfig, ServerStore
from app.tools.toolbox import McpToolbox
from tests.tools.conftest import PYTHON, SERVERS, junk_server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_server():
    port = free_port()
    child = subprocess.Popen([PYTHON, str(SERVERS / "flaky_server.py"), "--http", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    else:
        child.kill()
        pytest.fail("the HTTP MCP server did not start")
    yield f"http://127.0.0.1:{port}/mcp"
    child.terminate()
    child.wait(10)


def test_a_loopback_http_server_is_listed_and_called_even_offline(offline, http_server):
    store = ServerStore()
    store.add(ServerConfig("web", "http", url=http_server,
                           headers={"Authorization": "Bearer LOCAL"}))
    server = store.get("web")
    assert server.headers == {"Authorization": "Bearer LOCAL"}
    with McpToolbox([server]) as toolbox:
        assert "echo" in {t.exposed for t in toolbox.tools()}, toolbox.problems
        result = toolbox.call(ToolCall("c1", "echo", json.dumps({"text": "over http"})))
        assert (result.is_error, result.content) == (False, "over http")
    assert not offline.log.blocked()


def test_offline_mode_refuses_an_http_server_on_another_host_and_says_so(offline, tripwire):
    remote = ServerConfig("faraway", "http", url="https://mcp.example.com/mcp")
    with McpToolbox([remote, junk_server()]) as toolbox:
        assert {t.server for t in toolbox.tools()} == {"junk"}  # stdio still runs
        problem = toolbox.problems["faraway"]
        assert problem.startswith("Offline mode is on, so Hearth did not connect to the MCP "
                                  "server “faraway” at https://mcp.example.com/mcp.")
    blocked = offline.log.blocked()
    assert [(e.host, e.port, e.feature) for e in blocked] == [
        ("mcp.example.com", 443, "MCP server")]
    assert tripwire == []  # refused before any socket (or DNS) call


def test_online_the_guard_sees_the_http_servers_connection(guard, tripwire):
    remote = ServerConfig("faraway", "http", url="http://mcp.example.com/mcp")
    with McpToolbox([remote], connect_timeout_s=10) as toolbox:
        assert toolbox.tools() == []
        assert "Hearth could not connect to the MCP server “faraway”" in \
            toolbox.problems["faraway"]
    # online the attempt went through the socket layer (under the guard) to the tripwire
    assert ("getaddrinfo", (b"mcp.example.com", 80)) in tripwire
