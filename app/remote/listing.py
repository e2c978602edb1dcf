"""What the model picker and the remote dialog ask of the remote sources (run as jobs off
the UI thread): each source's models, and "Test connection" for an address not yet saved."""

from __future__ import annotations

from dataclasses import dataclass

from app.remote.errors import RemoteError
from app.remote.models import context_length_of, fetch_models
from app.remote.sources import RemoteSource, SourceStore
from app.remote.urls import Login


@dataclass(frozen=True)
class RemoteModel:
    """One model a remote source offers; ``target`` is what ``ModelController.use`` loads."""

    source_id: str
    source_name: str
    model_id: str
    target: str
    context_length: int = 0  # 0: the server did not say
    typed: bool = False  # the user typed the id (the server cannot list its models)

    @property
    def label(self) -> str:
        return f"{self.model_id} · {self.source_name} (remote)"


@dataclass(frozen=True)
class SourceListing:
    """A source's models, or why there are none; ``note`` says what the server lacks."""

    source: RemoteSource
    models: tuple[RemoteModel, ...] = ()
    error: str | None = None
    note: str | None = None


def _typed(source: RemoteSource) -> tuple[RemoteModel, ...]:
    return tuple(RemoteModel(source.id, source.name, m, source.target(m), typed=True)
                 for m in source.models)


def _client(url: str, api_key: str | None, login: Login | None = None):
    """An ``OpenAIClient`` (imported here: httpx2 costs ~60 ms, and the chat window imports
    this module before it can paint)."""
    from app.remote.client import OpenAIClient

    return OpenAIClient(url, api_key, login=login)


def list_source(source: RemoteSource, api_key: str | None,
                login: Login | None = None) -> SourceListing:
    client = _client(source.base_url, api_key, login)
    try:
        entries = fetch_models(client)
    except RemoteError as exc:
        if exc.kind == "not_found":
            return SourceListing(source, _typed(source), note=(
                f"{source.name} has no /v1/models, so it cannot list its models: "
                + ("showing the model ids you typed." if source.models else
                   "type a model id to use it.")))
        return SourceListing(source, _typed(source), error=str(exc))
    finally:
        client.close()
    listed = tuple(RemoteModel(source.id, source.name, e["id"], source.target(e["id"]),
                               context_length_of(e)) for e in entries)
    ids = {m.model_id for m in listed}
    return SourceListing(source, listed + tuple(m for m in _typed(source)
                                                if m.model_id not in ids))


def list_all(store: SourceStore) -> list[SourceListing]:
    return [list_source(s, store.api_key(s), store.login(s)) for s in store.list()]


@dataclass(frozen=True)
class ConnectionTest:
    ok: bool
    message: str
    kind: str = "ok"  # RemoteError.kind when it failed; "no_models" when it cannot list
    models: tuple[str, ...] = ()


def check_connection(url: str, api_key: str | None) -> ConnectionTest:
    """Ask ``GET /v1/models`` and say exactly what happened."""
    try:
        client = _client(url, api_key or None)
    except RemoteError as exc:
        return ConnectionTest(False, str(exc), exc.kind)
    try:
        entries = fetch_models(client)
    except RemoteError as exc:
        if exc.kind == "not_found":
            return ConnectionTest(True, (
                f"Connected to {client.base_url}, but it has no /v1/models (HTTP 404), so it "
                "cannot list its models: type the model id below."), "no_models")
        return ConnectionTest(False, str(exc), exc.kind)
    finally:
        client.close()
    ids = tuple(e["id"] for e in entries)
    shown = ", ".join(ids[:5]) + (" …" if len(ids) > 5 else "")
    if not ids:
        return ConnectionTest(True, f"Connected to {client.base_url}, but it offers no models "
                                    "yet.", models=ids)
    plural = "model" if len(ids) == 1 else "models"
    return ConnectionTest(True, f"Connected to {client.base_url}: {len(ids)} {plural} "
                                f"({shown}).", models=ids)
