"""``hearth serve --remote BASE_URL``: Hearth's server in front of a remote OpenAI-compatible
engine (vLLM, llama.cpp's server, Ollama, another ``hearth serve``).

A team's big machine then serves every local tool that points at Hearth, with Hearth's
routes, API keys, Host and CORS checks, queue, request records and offline rules: each
request is a job on the executor's thread like a local model's, run by a ``RemoteEngine``
(the same ``Backend`` the window uses for a remote model). The remote's models are this
server's models (``RemoteModels``, a ``ModelSource``): a request names one, and switching is
only a new client, so nothing is loaded or unloaded on the remote.

Offline mode refuses a remote that is not on this machine, at the start and on every request
(``OpenAIClient.check_allowed``). Plain ``http://`` to another machine is refused unless the
user says the network is trusted (``--remote-allow-http``): the chats and the remote's key
would cross it unencrypted.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from app.remote.client import OpenAIClient
from app.remote.engine import RemoteEngine
from app.remote.errors import RemoteError
from app.remote.models import context_length_of, fetch_models
from app.remote.sources import RemoteSource, cleartext_error
from app.remote.urls import is_cleartext_remote, normalize_base_url, split_login
from app.server.errors import ServerConfigError
from app.server.executor import ServedModel

SOURCE_ID = "gateway"
LIST_FOR_S = 5.0  # a listing is reused this long (every request's model check reads it)


@dataclass(frozen=True)
class Remote:
    """Where the remote engine is and how to reach it."""

    base_url: str
    api_key: str | None = None
    model: str | None = None  # the model served first (None: the first the remote lists)
    allow_http: bool = False


class RemoteModels:
    """The remote engine's models as this server's (``ModelSource``), under their own ids."""

    def __init__(self, remote: Remote) -> None:
        clean, self._login = split_login(remote.base_url)
        self.base_url = normalize_base_url(clean)
        self.remote = remote
        self.source = RemoteSource(SOURCE_ID, self.base_url, self.base_url)
        self._client = self._new_client()
        self._lock = threading.Lock()
        self._listed: list[ServedModel] | None = None
        self._listed_at = 0.0
        self._lists = True  # False: the remote has no /v1/models

    def _new_client(self) -> OpenAIClient:
        return OpenAIClient(self.base_url, self.remote.api_key, login=self._login)

    def open(self) -> str:
        """Check that the remote may be used and answers; returns the id served first.
        Raises ``ServerConfigError`` / ``RemoteError`` with a sentence."""
        if is_cleartext_remote(self.base_url) and not self.remote.allow_http:
            error = cleartext_error(self.base_url)
            raise ServerConfigError(error.message, hint="Use https://, or pass "
                                    "--remote-allow-http if this network is trusted.")
        self._client.check_allowed()  # offline mode: only a remote on this machine
        listed = self._fetch()
        wanted = self.remote.model
        if not self._lists:
            if wanted is None:
                raise ServerConfigError(
                    f"The remote engine at {self.base_url} does not list its models "
                    "(no /v1/models), so Hearth cannot tell which one to serve.",
                    hint="Name it with --remote-model ID.")
            return wanted
        if not listed:
            raise ServerConfigError(f"The remote engine at {self.base_url} offers no model.")
        if wanted is None:
            return listed[0].id
        if all(m.id != wanted for m in listed):
            offered = ", ".join(m.id for m in listed[:8])
            raise ServerConfigError(f"The remote engine at {self.base_url} does not offer the "
                                    f"model '{wanted}' (it offers: {offered}).",
                                    hint="Pick one of those with --remote-model.")
        return wanted

    def available(self) -> list[ServedModel]:
        """The remote's models (asked again after ``LIST_FOR_S``); the last listing while
        the remote does not answer."""
        with self._lock:
            fresh = time.monotonic() - self._listed_at < LIST_FOR_S
            if self._listed is not None and fresh:
                return list(self._listed)
        try:
            return self._fetch()
        except RemoteError:
            with self._lock:
                return list(self._listed or [])

    def _fetch(self) -> list[ServedModel]:
        try:
            rows = fetch_models(self._client)
        except RemoteError as exc:
            if exc.kind != "not_found":
                raise
            self._lists = False
            typed = self.remote.model
            rows = [{"id": typed}] if typed else []
        listed = [ServedModel(str(row["id"]), self.source.target(str(row["id"])),
                              context_length_of(row), _created(row)) for row in rows]
        with self._lock:
            self._listed, self._listed_at = listed, time.monotonic()
        return listed

    def load(self, model: str) -> RemoteEngine:
        """A ``RemoteEngine`` for ``model`` with a client of its own (closing the engine
        closes it); named by the remote's id, so ``describe().name`` is what clients send."""
        known = next((m for m in self._listed or [] if m.id == model), None)
        return RemoteEngine(self.source, model, self._new_client(), name=model,
                            context_length=known.context_length if known else 0)

    def close(self) -> None:
        self._client.close()


def _created(row: dict) -> int:
    value = row.get("created")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
