"""What went wrong talking to a remote engine, as one sentence naming the URL.

``describe(exc, url)`` turns an ``httpx2`` exception (or an HTTP status) into a
``RemoteError`` whose ``kind`` tells the cases apart for the dialog's "Test connection":
"offline", "dns", "refused", "tls", "timeout", "auth", "not_found", "http", "broken",
"protocol", "cancelled".
"""

from __future__ import annotations

import json
import re
import socket
import ssl
from urllib.parse import urlsplit

from app.errors import HearthError
from app.network import OfflineBlockedError

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#@\s]*@")


def redact(text: str) -> str:
    """``text`` with the ``user:password@`` of every address in it taken out."""
    return _USERINFO.sub(r"\1", text)


class RemoteError(HearthError):
    """A remote engine could not be used; ``kind`` says which way it failed. Its sentence
    and hint never show a password that was in an address (``redact``)."""

    def __init__(self, message: str, *, kind: str, hint: str | None = None,
                 status: int | None = None) -> None:
        super().__init__(redact(message), hint=redact(hint) if hint else hint)
        self.kind = kind
        self.status = status


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _host_port(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname or url, str(port)


def offline_error(url: str) -> RemoteError:
    return RemoteError(
        f"Hearth's offline mode is on, so the remote engine at {url} was not contacted.",
        kind="offline",
        hint="Turn offline mode off in Settings to use an engine on another machine "
             "(engines on this computer, at localhost, keep working offline).",
    )


def describe(exc: BaseException, url: str, *, timeout_s: float | None = None) -> RemoteError:
    """The user's sentence for a transport failure while requesting ``url``."""
    import httpx2  # here: the chat window imports this module, and httpx2 costs ~60 ms

    if isinstance(exc, RemoteError):
        return exc
    host, port = _host_port(url)
    chain = _chain(exc)
    text = " ".join(str(e) for e in chain)
    if any(isinstance(e, OfflineBlockedError) for e in chain):
        return offline_error(url)
    if isinstance(exc, httpx2.TimeoutException) or any(isinstance(e, TimeoutError)
                                                       for e in chain):
        within = f" within {timeout_s:g} s" if timeout_s else " in time"
        what = "connect" if isinstance(exc, httpx2.ConnectTimeout) else "answer"
        return RemoteError(
            f"The remote engine at {url} did not {what}{within} (timeout).",
            kind="timeout", hint="Check that the server is up and not overloaded.")
    if any(isinstance(e, socket.gaierror) for e in chain) or "Name or service not known" in text \
            or "nodename nor servname" in text or "getaddrinfo failed" in text:
        return RemoteError(
            f"The remote engine at {url} could not be reached: the host name {host} was not "
            "found (DNS lookup failed).", kind="dns", hint="Check the spelling of the address.")
    if any(isinstance(e, ssl.SSLError) for e in chain) or "SSL" in text or "CERTIFICATE" in text:
        reason = next((str(e) for e in chain if isinstance(e, ssl.SSLError)), text)
        return RemoteError(
            f"The secure (TLS) connection to {url} failed: {reason}.", kind="tls",
            hint="Check the server's certificate, or use http:// if it does not speak TLS.")
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "refused" in text.lower():
        return RemoteError(
            f"The remote engine at {url} refused the connection: nothing is listening on "
            f"{host} port {port}.", kind="refused", hint="Is the server running?")
    if isinstance(exc, httpx2.ConnectError):
        return RemoteError(f"The remote engine at {url} could not be reached: {exc}.",
                           kind="refused", hint="Is the server running?")
    if isinstance(exc, (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError,
                        httpx2.CloseError, OSError)):
        return RemoteError(
            f"The connection to the remote engine at {url} broke off: {exc or 'closed'}.",
            kind="broken", hint="The server may have stopped or restarted.")
    if isinstance(exc, httpx2.UnsupportedProtocol | httpx2.InvalidURL):
        return RemoteError(f"{url} is not a web address Hearth can use: {exc}.", kind="protocol",
                           hint="Use an address like http://host:8000/v1.")
    return RemoteError(f"The request to the remote engine at {url} failed: {exc}.", kind="broken")


def server_message(body: bytes | str) -> str:
    """The error text an OpenAI-compatible server put in its body (``{"error": {"message"}}``,
    ``{"error": "..."}``, ``{"detail": ...}``, or the raw text, cut short)."""
    raw = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(raw)
    except ValueError:
        return raw.strip()[:300]
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return str(error)[:300]
    return raw.strip()[:300]


def status_error(status: int, url: str, body: bytes | str = b"", *,
                 endpoint: str = "") -> RemoteError:
    """The sentence for an HTTP error status answering ``url``."""
    detail = server_message(body)
    said = f" The server said: {detail}" if detail else ""
    if status in (401, 403):
        return RemoteError(
            f"The remote engine at {url} refused the API key (HTTP {status}).{said}",
            kind="auth", status=status, hint="Check the API key of this remote engine.")
    if status == 404:
        where = f" has no {endpoint} endpoint" if endpoint else " does not know this request"
        return RemoteError(
            f"The server at {url}{where} (HTTP 404), or does not know the model asked for."
            f"{said}", kind="not_found", status=status,
            hint="Check that the address ends where the server's /v1 API starts.")
    return RemoteError(f"The remote engine at {url} answered HTTP {status}.{said}",
                       kind="http", status=status)
