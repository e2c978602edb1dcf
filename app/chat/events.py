"""What a turn streams (``run_turn`` yields these, in order).

A turn is: ``SourcesEvent`` (when a retriever found passages), then per generation round
``PrefillProgress``\\* and ``ReasoningDelta`` / ``TextDelta``\\* and ``ToolCallEvent``\\*; after
each call its ``ToolResultEvent``; the turn ends with exactly one ``Finished``.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.chat.parts import ChatMessage, Source, ToolCall, ToolResult
from app.engine.types import GenerationStats


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    """The model asked for a call (shown before it is approved or run)."""

    call: ToolCall


@dataclass(frozen=True)
class ToolResultEvent:
    """A call's result, or its refusal (``is_error``), as the model will read it."""

    result: ToolResult


@dataclass(frozen=True)
class SourcesEvent:
    """The passages retrieval found; they are rendered with the user's message."""

    sources: tuple[Source, ...]


@dataclass(frozen=True)
class PrefillProgress:
    """``done`` of ``total`` prompt tokens are in the cache. With today's engines these come
    out together just before the round's first token (the engine reports them from inside
    one step); the worker's own ``on_prefill`` stays the live bar until the prefill yields."""

    done: int
    total: int


@dataclass(frozen=True)
class Finished:
    """The end of the turn.

    ``finish_reason`` is the last round's (``GenerationChunk.finish_reason``), or
    "tool_calls" when the round limit stopped a model that still asked for tools (those
    calls were not run). ``stats``: each round's figures, in order. ``turn``: the messages to
    store: the user's message as rendered (its sources attached), then the assistant's
    (tool calls among its parts), each tool result, and the final answer. ``note``: what
    the turn left out, in a sentence (None when nothing)."""

    finish_reason: str
    stats: tuple[GenerationStats, ...]
    turn: tuple[ChatMessage, ...]
    note: str | None = None

    @property
    def rounds(self) -> int:
        return len(self.stats)


TurnEvent = (TextDelta | ReasoningDelta | ToolCallEvent | ToolResultEvent | SourcesEvent
             | PrefillProgress | Finished)
