"""What keeps web pages out of a server without an API key: the Host check and the JSON
content type.

A page the user visits can send requests to ``http://127.0.0.1:PORT`` but, under the
browser's same-origin rules, can neither read the answers nor send a JSON POST without a
CORS preflight (answered only for ``--cors-origin`` origins). Two holes remain, closed here:

- *Blind CSRF*: a ``fetch`` with ``Content-Type: text/plain`` or an HTML form POST needs no
  preflight. Every JSON route therefore requires ``Content-Type: application/json``
  (``is_json``), which a cross-site page cannot send without one; other types get 415 before
  the body is read, so nothing is queued.
- *DNS rebinding*: a page on ``evil.example`` whose name is made to resolve to 127.0.0.1 is
  same-origin with the server, and may read it. Its requests carry ``Host: evil.example``.
  On a loopback bind, ``HostGuard`` accepts only the Host names of this machine
  (``localhost``, ``127.0.0.1``, ``[::1]``, the bound address) and those the user adds
  (``--allowed-host``), with or without a port; any other gets 403 (as Ollama does since
  CVE-2024-28224). Before that 403 it reads out the body a page may have sent
  (``lingering.read_out``, bounded by ``limit``), or the close could reset the connection
  and lose the sentence.

On a network bind (``0.0.0.0``, a LAN address) the Host is not checked: the machine is
reached under names Hearth cannot know, and every request must carry the API key, which a
rebinding page does not have.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.server.errors import ApiError
from app.server.lingering import read_out

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})

_PORT = re.compile(r"^[0-9]{1,5}$")


def host_name(header: str) -> str | None:
    """The name in a Host header without its port, lowercased (IPv6 in brackets); None when
    it is not a well-formed Host value."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[:end + 1], value[end + 1:]
    else:
        name, sep, port = value.partition(":")
        rest = sep + port
    if rest and not (rest.startswith(":") and _PORT.match(rest[1:])):
        return None
    return name or None


def bracketed(host: str) -> str:
    """``host`` as it appears in a Host header (an IPv6 address in brackets), lowercased."""
    host = host.strip().lower()
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def is_json(content_type: str) -> bool:
    """Whether a Content-Type header says ``application/json`` (parameters such as
    ``charset`` allowed)."""
    return content_type.partition(";")[0].strip().lower() == "application/json"


class HostGuard:
    """ASGI middleware: HTTP requests whose Host is not one of ``allowed`` get 403, after
    their body is read out (``read_out`` with the body limit ``limit``)."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str], limit: int) -> None:
        self.app = app
        self.allowed = frozenset(bracketed(name) for name in allowed)
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = next((value for key, value in scope["headers"] if key == b"host"), b"")
            name = host_name(header.decode("latin-1"))
            if name not in self.allowed:
                shown = header.decode("latin-1")[:100]
                error = ApiError(
                    403, f"This server only answers requests addressed to this computer "
                    f"(Host {', '.join(sorted(self.allowed))}), not to {shown!r}. Start it "
                    "with --allowed-host NAME to accept another name.",
                    type="invalid_request_error", code="host_not_allowed")
                await read_out(Request(scope, receive), self.limit)  # so that it reads the 403
                await JSONResponse(error.body(), status_code=403,
                                   headers={"Connection": "close"})(scope, receive, send)
                return
        await self.app(scope, receive, send)
