"""What a server's ``GET /v1/models`` says: the model ids and, where it tells, each model's
context length (vLLM's ``max_model_len``, llama-server's ``meta.n_ctx_train``, LM Studio's
and OpenRouter's ``context_length``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.remote.errors import RemoteError

if TYPE_CHECKING:  # the client (httpx2, ~60 ms) is imported where a request is made
    from app.remote.client import OpenAIClient

LIST_TIMEOUT_S = 4.0  # short: listing runs on a job thread that shutdown waits for


def fetch_models(client: OpenAIClient, *, timeout_s: float = LIST_TIMEOUT_S) -> list[dict]:
    """The model entries (each with an ``id``). RemoteError ``not_found`` means the server
    has no ``/v1/models``."""
    data = client.get_json("models", timeout_s=timeout_s)
    rows = data.get("data") if isinstance(data, dict) else data
    if isinstance(data, dict) and rows is None and isinstance(data.get("models"), list):
        rows = data["models"]  # some servers use {"models": [...]}
    if not isinstance(rows, list):
        raise RemoteError(f"The server at {client.url('models')} answered, but not with a "
                          "list of models.", kind="protocol")
    entries = []
    for row in rows:
        if isinstance(row, dict) and isinstance(row.get("id") or row.get("model"), str):
            entries.append({**row, "id": row.get("id") or row.get("model")})
        elif isinstance(row, str):
            entries.append({"id": row})
    return entries


def context_length_of(entry: dict[str, Any]) -> int:
    """The model's context length when the entry says, else 0 (unknown)."""
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for value in (entry.get("max_model_len"), entry.get("context_length"),
                  entry.get("max_context_length"), meta.get("n_ctx_train")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0
