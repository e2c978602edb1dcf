"""``POST /v1/embeddings`` in OpenAI's shape, over Hearth's text embedder.

Request: ``model`` (the embedder's id, as ``/v1/models`` lists it), ``input`` (a string or a
list of up to ``MAX_INPUTS`` strings), ``encoding_format`` (``float``, the default, or
``base64``: the float32 little-endian bytes, which the openai SDK asks for by default),
optional ``dimensions`` (only the embedder's own) and ``user`` (ignored). Token-id inputs are
refused with a sentence: their ids would be another tokenizer's. Each text is truncated at the
embedder's window, as sentence-transformers does; ``usage`` counts the tokens embedded.

The embedder is loaded on the first request (``EmbeddingService``) on its own thread
(``app/documents/embedding.py``); requests wait for it off the event loop. Texts are embedded
as given: a client that wants an embedder's query or document prefix sends it.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from app.server.errors import ApiError, bad_request

MAX_INPUTS = 2048  # OpenAI's own bound on one request's inputs
MAX_INPUT_CHARS = 100_000  # a text beyond this is cut before tokenising (the window is smaller)
FORMATS = ("float", "base64")


class EmbeddingService:
    """One embedder for the API: listed by id at once, loaded on first use, closed at exit."""

    def __init__(self, embedder_id: str, folder: Callable[[], Path], *,
                 created: int = 0, threads: int | None = None) -> None:
        self.id = embedder_id
        self.created = created
        self._folder = folder
        self._threads = threads
        self._thread = None
        self._lock = threading.Lock()

    @classmethod
    def starter(cls) -> EmbeddingService | None:
        """The starter embedder when it is installed or its wheel is at hand, else None."""
        from app.documents.starter_embedder import (
            EMBEDDER_ID,
            ensure_embedder,
            find_embedder_wheel,
            installed_embedder,
        )

        if installed_embedder() is None and find_embedder_wheel() is None:
            return None
        return cls(EMBEDDER_ID, ensure_embedder)

    @classmethod
    def downloaded(cls, embedder_id: str) -> EmbeddingService:
        """The embedder ``embedder_id`` from the embedders folder (HearthError, a sentence,
        when Hearth does not know it or it is not downloaded)."""
        from app.documents.embedders import EmbedderStore

        folder = EmbedderStore().folder(embedder_id)
        return cls(embedder_id, lambda: folder)

    def model_object(self) -> dict[str, Any]:
        return {"id": self.id, "object": "model", "created": self.created,
                "owned_by": "hearth"}

    def _embedder(self):
        from app.documents.embedding import EmbeddingThread

        with self._lock:
            if self._thread is None:
                self._thread = EmbeddingThread(self._folder(), threads=self._threads)
            return self._thread

    def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """Unit vectors of ``texts`` (no prefix) and the number of tokens embedded."""
        return self._embedder().embed_counted(texts)

    def close(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._thread.close()
                self._thread = None


def parse_request(body: dict[str, Any]) -> tuple[str, list[str], str, int | None]:
    """``(model, texts, encoding_format, dimensions)`` of a request body, or a 400."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required: the embedder's id from /v1/models.", "model")
    raw = body.get("input")
    if isinstance(raw, str):
        texts = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(t, str) for t in raw):
        texts = list(raw)
    elif isinstance(raw, list) and raw and all(isinstance(t, (int, list)) for t in raw):
        raise bad_request("'input' as token ids is not supported here: send the text (this "
                          "embedder's tokenizer is not the one that made those ids).", "input")
    else:
        raise bad_request("'input' must be a string or a non-empty list of strings.", "input")
    if len(texts) > MAX_INPUTS:
        raise bad_request(f"'input' holds {len(texts)} texts; at most {MAX_INPUTS} are "
                          "accepted in one request.", "input")
    if any(not t for t in texts):
        raise bad_request("'input' must not contain empty strings.", "input")
    fmt = body.get("encoding_format") or "float"
    if fmt not in FORMATS:
        raise bad_request(f"'encoding_format' must be 'float' or 'base64', not {fmt!r}.",
                          "encoding_format")
    dimensions = body.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int)
                                   or isinstance(dimensions, bool)):
        raise bad_request("'dimensions' must be an integer.", "dimensions")
    return model, [t[:MAX_INPUT_CHARS] for t in texts], fmt, dimensions


def response(model: str, vectors: np.ndarray, tokens: int, fmt: str) -> dict[str, Any]:
    data = []
    for i, row in enumerate(np.asarray(vectors, np.float32)):
        value: Any = (base64.b64encode(row.astype("<f4").tobytes()).decode("ascii")
                      if fmt == "base64" else [float(x) for x in row])
        data.append({"object": "embedding", "index": i, "embedding": value})
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


async def embeddings(service: EmbeddingService | None, body: dict[str, Any]) -> dict[str, Any]:
    """The route's work once the request is authorised and its JSON read."""
    model, texts, fmt, dimensions = parse_request(body)
    if service is None or model != service.id:
        listed = f" (this server's embedder is '{service.id}')" if service else \
            " (this server has no embedder)"
        raise ApiError(404, f"The model '{model}' does not exist{listed}.", param="model",
                       code="model_not_found")
    try:
        vectors, tokens = await asyncio.to_thread(service.embed, texts)
    except Exception as exc:  # a missing wheel, an unreadable folder: a sentence
        raise ApiError(503, f"The embedder '{service.id}' cannot run: {exc}",
                       type="server_error", code="embedder_unavailable") from None
    if dimensions is not None and dimensions != vectors.shape[1]:
        raise bad_request(f"'{service.id}' makes {vectors.shape[1]}-dimensional embeddings; "
                          f"'dimensions' cannot be {dimensions}.", "dimensions")
    return response(model, vectors, tokens, fmt)
