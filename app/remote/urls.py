"""Remote engines' addresses as a person types them, made into one form (no network, no
httpx2: the chat window and the sources list read them before any request)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from app.remote.errors import RemoteError


def normalize_base_url(url: str) -> str:
    """``http(s)://host[:port][/prefix]`` without a trailing ``/`` or ``/v1``; a bare
    ``host:port`` gets ``http://``. Raises RemoteError for anything else."""
    text = url.strip()
    if text and "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"“{url}” is not an address Hearth can use for a remote engine.",
                          kind="url", hint="Use an address like http://localhost:8000/v1.")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise RemoteError(f"“{url}” has an invalid port number.", kind="url",
                          hint="Use an address like http://localhost:8000/v1.") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))
