"""The server's settings and the checks that keep it safe by default."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from app.network.guard import is_loopback, is_loopback_address
from app.server.errors import ServerConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_QUEUE = 8
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_MESSAGES = 1024
MAX_CONNECTIONS = 64

# http(s) origins, and an app's own scheme (app://…, vscode-webview://…, tauri://…)
_ORIGIN = re.compile(r"^[a-z][a-z0-9+.\-]*://[A-Za-z0-9.\-\[\]:]+$")
_LABEL = r"[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?"
_HOST_NAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")


def split_hosts(text: str) -> tuple[str, ...]:
    """Host names typed as one line (separated by spaces or commas), lowercased."""
    return tuple(name.lower() for name in re.split(r"[\s,]+", text.strip()) if name)


@dataclass(frozen=True)
class ServerConfig:
    """Where and how the server listens.

    ``queue``: how many requests may wait while one runs (more get 429). ``cors_origins``:
    browser origins allowed to call the API (none by default). ``api_key``: required as
    ``Authorization: Bearer KEY`` when set; mandatory on a non-loopback ``host``.
    ``allowed_hosts``: Host names accepted besides this machine's own on a loopback bind
    (see ``guard.py``)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    more_api_keys: tuple[str, ...] = ()  # further keys; clients of different keys share no cache
    queue: int = DEFAULT_QUEUE
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = MAX_BODY_BYTES
    max_messages: int = MAX_MESSAGES
    allowed_hosts: tuple[str, ...] = ()
    header_timeout_s: float = 10.0  # request line and headers, from connect (or last reply)
    body_timeout_s: float = 60.0  # the body, from the end of the headers
    write_timeout_s: float = 30.0  # a client reading nothing of its reply is dropped
    max_connections: int = MAX_CONNECTIONS
    ssl_certfile: str | None = None  # TLS for LAN mode: a PEM certificate (chain) ...
    ssl_keyfile: str | None = None  # ... and its private key; both or neither

    @property
    def scheme(self) -> str:
        """``https`` when the server speaks TLS, else ``http``."""
        return "https" if self.ssl_certfile else "http"

    @property
    def api_keys(self) -> tuple[str, ...]:
        """Every key a client may send (none: no key is asked for)."""
        return ((self.api_key,) if self.api_key is not None else ()) + self.more_api_keys

    @property
    def checks_host(self) -> bool:
        """Whether requests must name this machine in their Host header (a loopback bind)."""
        return is_loopback(self.host)

    def validate(self) -> ServerConfig:
        """Raise ``ServerConfigError`` with a sentence when the settings are unsafe or
        impossible; returns self."""
        if not is_loopback_address(self.host) and not self.api_keys:
            raise ServerConfigError(
                f"Hearth will not serve on {self.host} without an API key: anyone who can "
                "reach this machine could use the model.",
                hint="Set HEARTH_API_KEY or pass --api-key-file PATH (clients send the key as "
                "'Authorization: Bearer KEY'), or keep the default host 127.0.0.1.",
            )
        if not 0 <= self.port <= 65535:
            raise ServerConfigError(f"The port {self.port} is not a TCP port (0 to 65535).")
        if self.queue < 0:
            raise ServerConfigError(f"The queue length {self.queue} cannot be negative.")
        if any(not key.strip() for key in self.api_keys):
            raise ServerConfigError("The API key is empty.", hint="Give a non-empty key.")
        for origin in self.cors_origins:
            if not _ORIGIN.match(origin):
                raise ServerConfigError(
                    f"The CORS origin {origin!r} is not an origin like http://localhost:3000 or app://my-editor.",
                    hint="Name each web page origin allowed to call the server ('*' is not "
                    "accepted).",
                )
        for name in self.allowed_hosts:
            if not _HOST_NAME.match(name.lower()) or len(name) > 253:
                raise ServerConfigError(
                    f"The allowed host {name!r} is not a host name like myhost.lan.",
                    hint="Give a name without scheme, port or path (localhost and 127.0.0.1 "
                    "are always allowed).")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ServerConfigError(
                "TLS needs both a certificate and its key.",
                hint="Pass --ssl-certfile CERT.pem and --ssl-keyfile KEY.pem together.")
        for label, path in (("certificate", self.ssl_certfile), ("key", self.ssl_keyfile)):
            if path and not os.path.isfile(path):
                raise ServerConfigError(f"The TLS {label} file {path} does not exist.")
        if min(self.header_timeout_s, self.body_timeout_s, self.write_timeout_s) <= 0 \
                or self.max_connections < 1:
            raise ServerConfigError("The connection timeouts and limit must be positive.")
        if self.max_body_bytes < 1024 or self.max_messages < 1:
            raise ServerConfigError("The request limits are too small to serve a chat.")
        return self
