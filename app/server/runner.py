"""uvicorn on a background thread: start on a socket bound first (so port 0 works and a busy
port fails with a sentence), stop gracefully within a bound.

Used by both hosts: ``hearth serve`` (the main thread waits for Ctrl-C) and the desktop
app's ``ServerController``. The server only accepts connections; it opens none.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass

import uvicorn

from app.server.app import HearthApi
from app.server.connections import (
    ConnectionLimits,
    connection_cap,
    protocol_class,
    quiet_accept_errors,
)
from app.server.errors import ServerConfigError

GRACEFUL_SHUTDOWN_S = 2.0
KEEP_ALIVE_S = 5
BACKLOG = 128
MAX_HEADER_BYTES = 16 * 1024  # request line and headers together (h11's own default)


@dataclass(frozen=True)
class Address:
    host: str
    port: int
    scheme: str = "http"

    @property
    def base_url(self) -> str:
        """What a client is given, e.g. ``http://127.0.0.1:8080/v1``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/v1"


class ServerRunner:
    """Runs ``api.app`` with uvicorn on a thread of its own."""

    def __init__(self, api: HearthApi) -> None:
        self.api = api
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.address: Address | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 10.0) -> Address:
        """Bind ``config.host:config.port`` and serve; returns the bound address."""
        config = self.api.config.validate()
        sock = _bind(config.host, config.port)
        host, port = sock.getsockname()[:2]
        cap = connection_cap(config.max_connections)
        limits = ConnectionLimits(
            header_timeout_s=config.header_timeout_s, body_timeout_s=config.body_timeout_s,
            write_timeout_s=config.write_timeout_s, max_connections=cap)
        self._server = _Server(uvicorn.Config(
            self.api.app, lifespan="off", log_level="warning", access_log=False,
            timeout_graceful_shutdown=int(GRACEFUL_SHUTDOWN_S), ws="none",
            http=protocol_class(limits), timeout_keep_alive=KEEP_ALIVE_S,
            limit_concurrency=cap + 1,  # requests: the cap on connections is ours
            h11_max_incomplete_event_size=MAX_HEADER_BYTES, log_config=None,
            ssl_certfile=config.ssl_certfile, ssl_keyfile=config.ssl_keyfile))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="hearth-server-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise ServerConfigError(f"The server on {host}:{port} did not start.")
            time.sleep(0.01)
        self.address = Address(host, port, config.scheme)
        return self.address

    def stop(self, timeout: float = GRACEFUL_SHUTDOWN_S + 0.5) -> bool:
        """Refuse new requests, stop the generations in flight, close the connections.
        True when the server thread ended within ``timeout``."""
        if self._server is None or self._thread is None:
            return True
        self.api.admission.drain()
        self.api.cancel_all()
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(0.5)
        ended = not self._thread.is_alive()
        if ended:
            self._server = self._thread = None
        return ended


class _Server(uvicorn.Server):
    """uvicorn's server with accept errors logged a line at a time (``connections.py``)."""

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(quiet_accept_errors)
        await super().serve(sockets)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServerConfigError(
            f"Hearth cannot listen on {host}:{port}: {exc.strerror or exc}.",
            hint="Another program may use that port: pick another with --port.",
        ) from None
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock
