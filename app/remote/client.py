"""HTTP to one OpenAI-compatible server (vLLM, llama-server, Ollama's /v1, TGI, LM Studio,
``hearth serve``): JSON requests, a streamed POST whose socket a cancel Event shuts at once,
and the server-sent events of a streamed reply.

Every request is refused up front in offline mode unless the server is on this machine
(loopback, which the socket guard allows too), and every connection is tagged
"remote engine" in the network log. A user name and password in the address are sent as
HTTP Basic auth and never kept in ``base_url``. Redirects are followed only within the
server's origin (scheme, host, port): a redirect elsewhere is refused before anything is
sent there, so a 307/308 can never carry a chat (or the key) to another server.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx2

from app.network import feature, is_offline, record_refusal
from app.network.guard import is_loopback
from app.remote.errors import RemoteError, describe, offline_error, status_error
from app.remote.urls import Login, normalize_base_url, origin, origin_text, split_login

FEATURE = "remote engine"
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0  # a big model's prefill may take minutes before the first token


def iter_sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The ``data`` of each server-sent event (multi-line data joined with newlines)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


class _CancelWatch:
    """Shuts the response's socket down as soon as ``cancel`` is set, so a read blocked on a
    silent server returns at once (closing a socket from another thread would not wake it)."""

    def __init__(self, cancel: threading.Event, response: httpx2.Response) -> None:
        self._cancel = cancel
        self._response = response
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hearth-remote-cancel",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            if self._cancel.wait(0.05):
                if not self._done.is_set():
                    self._abort()
                return

    def _abort(self) -> None:
        stream = self._response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self._done.set()


class OpenAIClient:
    """One server's ``/v1`` API. ``base_url`` may or may not end in ``/v1``; a user name
    and password in it (or ``login``, which wins) go out as HTTP Basic auth, which then
    replaces the ``api_key``'s Bearer header (one Authorization header per request)."""

    def __init__(self, base_url: str, api_key: str | None = None, *,
                 login: Login | None = None,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 read_timeout_s: float = READ_TIMEOUT_S) -> None:
        clean, in_url = split_login(base_url)
        self.base_url = normalize_base_url(clean)
        self.read_timeout_s = read_timeout_s
        login = login or in_url
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx2.Client(
            headers=headers,
            auth=httpx2.BasicAuth(*login) if login else None,
            timeout=httpx2.Timeout(read_timeout_s, connect=connect_timeout_s),
            follow_redirects=True,
            event_hooks={"request": [self._same_origin]},
            trust_env=False,  # never send a chat through a proxy the user did not pick
        )

    def _same_origin(self, request: httpx2.Request) -> None:
        """Every request, redirects included, runs before it is sent: one that leaves the
        server's origin is refused (nothing is sent to the other server)."""
        target = str(request.url)
        if origin(target) != origin(self.base_url):
            raise RemoteError(
                f"The remote engine at {self.base_url} redirected the request to another "
                f"server ({origin_text(target)}); Hearth follows redirects only within the "
                "same server, so nothing was sent there.", kind="redirect",
                hint=f"If that server is the right one, add it with its own address "
                     f"({origin_text(target)}).")

    @property
    def is_local(self) -> bool:
        return is_loopback(urlsplit(self.base_url).hostname or "")

    def url(self, endpoint: str) -> str:
        """``endpoint`` under ``/v1`` ("models"), or at the server's root ("/tokenize")."""
        if endpoint.startswith("/"):
            return self.base_url + endpoint
        return f"{self.base_url}/v1/{endpoint}"

    def check_allowed(self) -> None:
        """Raise the offline sentence when offline mode forbids this server."""
        if is_offline() and not self.is_local:
            with feature(FEATURE):
                record_refusal(self.base_url)
            raise offline_error(self.base_url)

    def get_json(self, endpoint: str, *, timeout_s: float | None = None) -> Any:
        return self._json("GET", endpoint, None, timeout_s)

    def post_json(self, endpoint: str, payload: dict, *, timeout_s: float | None = None) -> Any:
        return self._json("POST", endpoint, payload, timeout_s)

    def _json(self, method: str, endpoint: str, payload: dict | None,
              timeout_s: float | None) -> Any:
        self.check_allowed()
        url = self.url(endpoint)
        timeout = httpx2.Timeout(timeout_s) if timeout_s else httpx2.USE_CLIENT_DEFAULT
        try:
            with feature(FEATURE):
                response = self._http.request(method, url, json=payload, timeout=timeout)
        except httpx2.HTTPError as exc:
            raise describe(exc, url, timeout_s=timeout_s or self.read_timeout_s) from exc
        if response.status_code >= 400:
            raise status_error(response.status_code, url, response.content,
                               endpoint=urlsplit(url).path)
        try:
            return response.json()
        except ValueError:
            raise RemoteError(
                f"The server at {url} answered, but not with JSON (is this the address of an "
                "OpenAI-compatible API?).", kind="protocol") from None

    @contextlib.contextmanager
    def stream_post(self, endpoint: str, payload: dict,
                    cancel: threading.Event | None = None) -> Iterator[httpx2.Response]:
        """POST and hand over the open response (status checked); while it is open, setting
        ``cancel`` shuts its socket down."""
        self.check_allowed()
        url = self.url(endpoint)
        request = self._http.build_request("POST", url, json=payload,
                                           headers={"Accept": "text/event-stream"})
        try:
            with feature(FEATURE):
                response = self._http.send(request, stream=True)
        except httpx2.HTTPError as exc:
            raise describe(exc, url, timeout_s=self.read_timeout_s) from exc
        watch = _CancelWatch(cancel, response) if cancel is not None else None
        try:
            if response.status_code >= 400:
                try:
                    body = response.read()
                except httpx2.HTTPError:
                    body = b""
                raise status_error(response.status_code, url, body,
                                   endpoint=urlsplit(url).path)
            yield response
        finally:
            if watch is not None:
                watch.stop()
            response.close()

    def close(self) -> None:
        self._http.close()


def parse_event(data: str, url: str) -> dict | None:
    """One event's JSON (None for the ``[DONE]`` sentinel); an ``error`` event raises."""
    if data.strip() == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except ValueError:
        raise RemoteError(f"The remote engine at {url} streamed something that is not JSON: "
                          f"{data[:120]!r}.", kind="protocol") from None
    if not isinstance(event, dict):
        raise RemoteError(f"The remote engine at {url} streamed an unexpected event: "
                          f"{data[:120]!r}.", kind="protocol")
    if "error" in event and not event.get("choices"):
        from app.remote.errors import server_message

        raise RemoteError(f"The remote engine at {url} stopped with an error: "
                          f"{server_message(data)}", kind="http")
    return event
