"""Remote engines' addresses as a person types them, made into one form (no network, no
httpx2: the chat window and the sources list read them before any request).

A user name and password in the address (``http://alice:SECRET@host/v1``) never stay in it:
``split_login`` takes them out (the sources keep them in the secret store, the client sends
them as HTTP Basic auth), and every ``RemoteError`` sentence is redacted
(``app.remote.errors.redact``)."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

from app.network.guard import is_loopback
from app.remote.errors import RemoteError

Login = tuple[str, str]  # (user name, password) from an address's userinfo
_HINT = "Use an address like http://localhost:8000/v1."


def split_login(url: str) -> tuple[str, Login | None]:
    """(the address without its userinfo, the (user, password) it held or None)."""
    text = url.strip()
    if text and "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if "@" not in parts.netloc:
        return text, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    clean = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    login = (unquote(user), unquote(password))
    return clean, login if any(login) else None


def normalize_base_url(url: str) -> str:
    """``http(s)://host[:port][/prefix]`` without a trailing ``/`` or ``/v1``, and without
    any user name or password; a bare ``host:port`` gets ``http://``. Raises RemoteError
    (whose sentence never shows the password) for anything else."""
    text, login = split_login(url)
    shown = text if login else url.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"“{shown}” is not an address Hearth can use for a remote engine.",
                          kind="url", hint=_HINT)
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise RemoteError(f"“{shown}” has an invalid port number.", kind="url",
                          hint=_HINT) from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) with the scheme's default port filled in: what a redirect may
    not leave."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or (443 if scheme == "https" else 80)


def origin_text(url: str) -> str:
    """``scheme://host:port`` of ``url`` (never its userinfo or path), for sentences."""
    scheme, host, port = origin(url)
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}"


def is_cleartext_remote(url: str) -> bool:
    """True for plain ``http://`` to another machine: the chats and the API key would
    cross the network unencrypted."""
    scheme, host, _ = origin(normalize_base_url(url))
    return scheme == "http" and not is_loopback(host)
