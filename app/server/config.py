"""The server's settings and the checks that keep it safe by default."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.network.guard import is_loopback_address
from app.server.errors import ServerConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_QUEUE = 8
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_MESSAGES = 1024

_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")


@dataclass(frozen=True)
class ServerConfig:
    """Where and how the server listens.

    ``queue``: how many requests may wait while one runs (more get 429). ``cors_origins``:
    browser origins allowed to call the API (none by default). ``api_key``: required as
    ``Authorization: Bearer KEY`` when set; mandatory on a non-loopback ``host``."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    queue: int = DEFAULT_QUEUE
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = MAX_BODY_BYTES
    max_messages: int = MAX_MESSAGES

    def validate(self) -> ServerConfig:
        """Raise ``ServerConfigError`` with a sentence when the settings are unsafe or
        impossible; returns self."""
        if not is_loopback_address(self.host) and not self.api_key:
            raise ServerConfigError(
                f"Hearth will not serve on {self.host} without an API key: anyone who can "
                "reach this machine could use the model.",
                hint="Pass --api-key KEY (clients send it as 'Authorization: Bearer KEY'), "
                "or keep the default host 127.0.0.1.",
            )
        if not 0 <= self.port <= 65535:
            raise ServerConfigError(f"The port {self.port} is not a TCP port (0 to 65535).")
        if self.queue < 0:
            raise ServerConfigError(f"The queue length {self.queue} cannot be negative.")
        if self.api_key is not None and not self.api_key.strip():
            raise ServerConfigError("The API key is empty.", hint="Give a non-empty key.")
        for origin in self.cors_origins:
            if not _ORIGIN.match(origin):
                raise ServerConfigError(
                    f"The CORS origin {origin!r} is not an origin like http://localhost:3000.",
                    hint="Name each web page origin allowed to call the server ('*' is not "
                    "accepted).",
                )
        if self.max_body_bytes < 1024 or self.max_messages < 1:
            raise ServerConfigError("The request limits are too small to serve a chat.")
        return self
