"""A tiny MCP server (the official SDK's MCPServer, over stdio) that misbehaves on request:
``crash`` exits mid-call, ``hang`` never answers, ``huge`` answers a megabyte, ``echo``
answers what it was given, ``touch`` creates a file, ``pid`` answers its process id.
``--hang-at-start`` never finishes starting; ``--http PORT`` serves streamable HTTP on
127.0.0.1."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("flaky")


@server.tool()
def echo(text: str) -> str:
    """Answer the text given."""
    return text


@server.tool()
def crash() -> str:
    """Exit in the middle of the call."""
    print("flaky: about to crash", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
def hang() -> str:
    """Never answer."""
    while True:
        time.sleep(1)


@server.tool()
def huge(size: int = 1_000_000) -> str:
    """Answer ``size`` characters."""
    return "x" * size


@server.tool()
def touch(path: str) -> str:
    """Create the file at ``path`` (proof that a call ran)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("ran")
    return f"created {path}"


@server.tool()
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())


if __name__ == "__main__":
    if "--hang-at-start" in sys.argv:
        time.sleep(3600)
    if "--http" in sys.argv:  # streamable HTTP on 127.0.0.1:PORT
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()
