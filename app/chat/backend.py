"""The one contract between a chat turn and whatever generates: ``Backend``.

``app.engine.engine.Engine`` (a local ONNX model) and ``app.remote.engine.RemoteEngine``
(an OpenAI-compatible server) implement it whole; tests/chat/test_backend.py compares
their signatures with this protocol's.

``chat`` streams ``GenerationChunk``\\s, the engine's own unit (text, reasoning, the calls
a chunk completed, and the last chunk's stats), not turn events: the engines sit below this
layer and do not import it. ``run_turn`` (app/chat/turn.py) turns chunks into events.

Honest answers where a backend cannot know:

- ``encode_chat`` returns None when the token ids are out of reach (a remote server without
  ``/tokenize``); ``count_tokens`` then estimates, and ``capabilities().exact_tokens`` says
  whether counts are the model's own;
- ``encode_prompt`` (a raw completion's prompt) returns None for text a remote server
  would tokenize on its side;
- ``capabilities().documents`` is False where the template cannot be given ``documents``;
  the turn layer then writes sources into the user's message (app/chat/render.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from app.engine.types import (
    BackendInfo,
    Capabilities,
    GenerationChunk,
    GenerationSettings,
    Message,
    ThinkingMode,
)

__all__ = ["Backend", "BackendInfo", "Capabilities"]


@runtime_checkable
class Backend(Protocol):
    def chat(
        self,
        messages: Sequence[Message],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        caches: Any = None,
        conversation_id: str | None = None,
        reuse: bool = True,
        on_prefill: Callable[[int, int], None] | None = None,
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> Iterator[GenerationChunk]:
        """Stream the assistant's reply; ``tools`` (OpenAI function schemas) and
        ``documents`` (``{"title", "text"}``, only where ``capabilities().documents``) reach
        the template; calls come back in ``GenerationChunk.tool_calls``."""
        ...

    def encode_chat(
        self,
        messages: Sequence[Message],
        *,
        stop: threading.Event | None = None,
        thinking: ThinkingMode = "default",
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> list[int] | None:
        """The prompt's token ids, or None where the backend cannot know them."""
        ...

    def complete(
        self,
        prompt: str | Sequence[int],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        reuse: bool = True,
    ) -> Iterator[GenerationChunk]:
        """Stream a raw continuation of ``prompt`` (text, or token ids), no chat template
        (OpenAI's ``/v1/completions``); ``reuse``: the backend's own cache may be reused."""
        ...

    def encode_prompt(self, prompt: str | Sequence[int]) -> list[int] | None:
        """A raw prompt's token ids (``PromptError`` for ids outside the vocabulary or a
        prompt of no tokens), or None where the backend cannot know them."""
        ...

    def count_tokens(self, messages: Sequence[Message]) -> int:
        """The prompt's size in tokens (an estimate where ``exact_tokens`` is False)."""
        ...

    def capabilities(self) -> Capabilities: ...

    def describe(self) -> BackendInfo:
        """The model details' facts (name, provider, context, thinking switch, draft, how
        it reads long prompts, notes), so nobody probes a backend with ``getattr``."""
        ...

    def prepare(self) -> None:
        """Finish what loading left for after the model shows as loaded (the local engine's
        fp32 prompt session, ~0.4 s on the starter); nothing for a remote one. On the
        backend's thread, between replies; a failure leaves it usable as it was."""
        ...

    def conversation_caches(
        self,
        *,
        budget_bytes: int = ...,
        snapshot_folder: Path | None = None,
        min_tokens: int = 256,
    ) -> Any:
        """The per-conversation KV caches its ``chat(caches=)`` takes (a remote one keeps
        nothing)."""
        ...

    def close(self) -> None: ...
