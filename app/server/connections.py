"""Connections that cannot pile up: read and write deadlines, a cap on open connections, and
a bounded log of accept errors.

uvicorn (h11) times out only an idle keep-alive connection: a connection that sends nothing,
or stops mid-headers or mid-body, stays open for ever, and a client that stops reading its
reply blocks the response (and so the engine) for ever. ``protocol_class(limits)`` is
uvicorn's h11 protocol with

- a *request deadline*: the request line and headers must arrive within
  ``header_timeout_s`` of the connection opening (or of the previous response), the body
  within ``body_timeout_s`` of the headers; then the client gets 408 and is closed;
- a *write deadline*: when the reply waits in the buffer (the client reads nothing) for
  ``write_timeout_s``, the connection is dropped; the app sees a disconnect, which cancels
  the generation;
- a *cap*: beyond ``max_connections`` open connections (at most half the process's file
  handle limit) a new one gets 503 and is closed.

The 408 does not read out a body first, unlike the app's refusals (why: the end of
``lingering.py``'s docstring). The 503 reads out briefly: a client usually sends its request
at once, and closing on its unread bytes resets the connection, which can throw the 503's
sentence away before the client reads it. So the refused connection half-closes after its
503 (the client sees the end of the reply), reads and drops what arrives, and closes when
the client does, after ``REFUSED_LINGER_S`` or past ``REFUSED_READ_BYTES``, whichever comes
first. At most ``REFUSED_LINGERING_MAX`` refused connections linger at a time; beyond that
one is closed at once, so a flood cannot hold more file handles than the cap plus that.

When the process runs out of file handles anyway, asyncio logs one traceback per failed
``accept()``, thousands a second; ``quiet_accept_errors`` turns them into one line per
``ACCEPT_LOG_EVERY_S``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

ACCEPT_LOG_EVERY_S = 10.0
REFUSED_LINGER_S = 1.0  # a refused connection reads out for at most this long ...
REFUSED_READ_BYTES = 1 << 20  # ... and at most this much
REFUSED_LINGERING_MAX = 16  # refused connections reading out at one time
_REQUEST_OVER = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    write_timeout_s: float = 30.0
    max_connections: int = 64


def protocol_class(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's ``http`` protocol class enforcing ``limits``."""
    return type("HearthH11Protocol", (_LimitedH11Protocol,), {"limits": limits})


def connection_cap(wanted: int) -> int:
    """``wanted``, lowered to half this process's open-file limit (the other half is for
    the model, logs and the rest)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # Windows: no rlimit
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(2, min(wanted, soft // 2))


def _raw_response(status: int, reason: str, message: str, code: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": code}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


class _LimitedH11Protocol(H11Protocol):
    limits: ConnectionLimits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._timed_cycle: Any = None  # the request whose body the read timer bounds
        self._refused_read: int | None = None  # bytes read out after a 503, once refused

    # -- connection ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refuse_over_cap(transport)
            return
        self._arm_read(self.limits.header_timeout_s)

    def _refuse_over_cap(self, transport: asyncio.Transport) -> None:
        """503 to a connection beyond the cap, then read out briefly (the module docstring)."""
        over = len(self.connections) - self.limits.max_connections
        _limited_log("refused a connection: %d are open already", len(self.connections) - 1)
        transport.write(_raw_response(
            503, "Service Unavailable", "The server has too many open connections; "
            "retry in a moment.", "too_many_connections"))
        if over > REFUSED_LINGERING_MAX or not transport.can_write_eof():
            transport.close()
            return
        self._refused_read = 0
        transport.write_eof()
        self._read_timer = self.loop.call_later(REFUSED_LINGER_S, transport.close)

    def eof_received(self) -> bool | None:
        if self._refused_read is not None:
            self.transport.close()  # the refused client has read its 503 and left
            return None
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read()
        self._cancel_write()
        super().connection_lost(exc)

    # -- reading a request -----------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._refused_read is not None:  # refused: drop it, never parse it
            self._refused_read += len(data)
            if self._refused_read > REFUSED_READ_BYTES:
                self.transport.close()
            return
        super().data_received(data)
        self._track_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.cycle is self._timed_cycle:  # no pipelined request: the next one's deadline
            self._arm_read(self.limits.header_timeout_s)
        self._track_request()

    def _track_request(self) -> None:
        cycle = self.cycle
        if cycle is not None and cycle is not self._timed_cycle:
            self._timed_cycle = cycle  # headers are in: now the body's deadline
            self._arm_read(self.limits.body_timeout_s)
        if (cycle is not None and not cycle.response_complete
                and self.conn.their_state in _REQUEST_OVER):
            self._cancel_read()  # the whole request is in (or the connection failed)

    def _arm_read(self, seconds: float) -> None:
        self._cancel_read()
        self._read_timer = self.loop.call_later(seconds, self._read_timed_out)

    def _cancel_read(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        part = "body" if self.conn.their_state is h11.SEND_BODY else "headers"
        _limited_log("closed a connection whose request %s did not arrive in time", part)
        if (self.cycle is None or not self.cycle.response_started
                or self.conn.our_state is h11.IDLE):
            self.transport.write(_raw_response(
                408, "Request Timeout", f"The request {part} did not arrive in time.",
                "request_timeout"))
        self.transport.close()

    # -- writing a reply -------------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.limits.write_timeout_s,
                                                     self._write_timed_out)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel_write()

    def _cancel_write(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_timed_out(self) -> None:
        self._write_timer = None
        _limited_log("dropped a client that read nothing of its reply for %g s",
                     self.limits.write_timeout_s)
        self.transport.abort()  # close() would wait for the buffer to drain: for ever


class _EveryFewSeconds:
    """Logs a warning at most once per ``every_s`` seconds per message, counting the rest."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def __call__(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last.get(message, -self.every_s) < self.every_s:
            self._skipped[message] = self._skipped.get(message, 0) + 1
            return
        skipped = self._skipped.pop(message, 0)
        self._last[message] = now
        suffix = f" ({skipped} more like it in the last {self.every_s:g} s)" if skipped else ""
        log.warning(message + suffix, *args)


_limited_log = _EveryFewSeconds(ACCEPT_LOG_EVERY_S)


def quiet_accept_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An event-loop exception handler: "out of file handles" on ``accept()`` becomes one
    warning line every few seconds; everything else goes to asyncio's default handler."""
    if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
        exc = context.get("exception")
        _limited_log("the server cannot accept connections: %s", getattr(exc, "strerror", exc))
        return
    loop.default_exception_handler(context)
