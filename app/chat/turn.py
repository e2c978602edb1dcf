"""One chat turn as a generator of events: retrieval, rendering, the tool loop.

``run_turn(backend, request, retriever=, toolbox=, approve=, cancel=)``:

1. **Retrieval before rendering.** With a retriever, the last user message's text is the
   query; the passages found are yielded as a ``SourcesEvent`` and attached to that message
   as ``Source`` parts, so they are rendered with it (app/chat/render.py) and stored with it.
2. **Generate.** The conversation is rendered down to the backend's messages and streamed:
   reasoning and text become deltas, the prefill its progress.
3. **The tool loop.** When the model asked for calls (and a toolbox was given to a backend
   that reads calls), each one is shown (``ToolCallEvent``), put to ``approve(call)`` and, if
   allowed, run by the toolbox; a refusal or a failure goes back to the model as an error
   result. Results are ``tool`` messages; then the model continues, at most
   ``request.max_rounds`` generations in all.

It runs on the thread that owns the backend (the generation worker's, or the server's);
``cancel`` may be set from any thread and is checked between events and before each call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from app.chat import render
from app.chat.backend import Backend
from app.chat.events import (
    Finished,
    PrefillProgress,
    ReasoningDelta,
    SourcesEvent,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEvent,
)
from app.chat.parts import ChatMessage, Part, Reasoning, Source, Text, ToolCall, ToolResult
from app.engine.types import GenerationSettings, GenerationStats

DEFAULT_MAX_ROUNDS = 5
DENIED = "The user did not allow this call."


class Retriever(Protocol):
    def search(self, query: str) -> list[Source]:
        """The passages that answer ``query``, best first (may be empty)."""
        ...


class Toolbox(Protocol):
    def specs(self) -> list[dict]:
        """The tools on offer, as OpenAI function schemas
        (``{"type": "function", "function": {"name", "description", "parameters"}}``)."""
        ...

    def call(self, call: ToolCall) -> ToolResult:
        """Run one call; a tool's own failure is an error result, not an exception."""
        ...


Approve = Callable[[ToolCall], bool]


@dataclass(frozen=True)
class TurnRequest:
    """One turn: the conversation so far (its last message the user's), the settings, and
    where its KV cache lives (``caches`` from the backend's ``conversation_caches``)."""

    messages: tuple[ChatMessage, ...]
    settings: GenerationSettings
    conversation_id: str | None = None
    caches: Any = None
    max_rounds: int = DEFAULT_MAX_ROUNDS


def run_turn(
    backend: Backend,
    request: TurnRequest,
    *,
    retriever: Retriever | None = None,
    toolbox: Toolbox | None = None,
    approve: Approve | None = None,
    cancel: threading.Event | None = None,
    on_prefill: Callable[[int, int], None] | None = None,
) -> Iterator[TurnEvent]:
    """Stream one turn's events (see the module's docstring); ends with ``Finished``.

    A toolbox needs ``approve``: the default is to ask, so there is no silent yes (the CLI's
    ``--yes`` passes ``lambda call: True``). ``on_prefill(done, total)``: the backend's
    prefill progress as it happens, from inside the step (the generation worker's live bar);
    given it, the turn yields no ``PrefillProgress`` of its own."""
    if toolbox is not None and approve is None:
        raise ValueError("run_turn needs approve= with a toolbox: every call is consented")
    if request.max_rounds < 1:
        raise ValueError("max_rounds must be at least 1")
    cancel = cancel or threading.Event()
    capabilities = backend.capabilities()
    messages = list(request.messages)
    user_at = _last_user(messages)
    notes: list[str] = []

    if retriever is not None and user_at is not None and not cancel.is_set():
        sources = tuple(retriever.search(messages[user_at].text))
        if sources:
            yield SourcesEvent(sources)
            messages[user_at] = messages[user_at].with_parts(*sources)

    tools: list[dict] | None = None
    if toolbox is not None:
        if capabilities.tools:
            tools = list(toolbox.specs()) or None
        else:
            notes.append("This model has no tool-call format Hearth reads, so it was not "
                         "offered the tools.")

    start = user_at if user_at is not None else len(messages)
    stats: list[GenerationStats] = []
    reason = "cancelled"
    progress: list[tuple[int, int]] = []  # reported by the backend from inside a step

    def collect(done: int, total: int) -> None:
        progress.append((done, total))

    for round_no in range(1, request.max_rounds + 1):
        engine_messages, documents = render.prompt(messages, capabilities)
        stream = backend.chat(
            engine_messages, request.settings, cancel=cancel, caches=request.caches,
            conversation_id=request.conversation_id,
            on_prefill=on_prefill or collect,
            tools=tools, documents=documents)
        text: list[str] = []
        thought: list[str] = []
        calls: list[ToolCall] = []
        for chunk in stream:
            for done, total in progress:
                yield PrefillProgress(done, total)
            progress.clear()
            if chunk.reasoning:
                thought.append(chunk.reasoning)
                yield ReasoningDelta(chunk.reasoning)
            if chunk.text:
                text.append(chunk.text)
                yield TextDelta(chunk.text)
            for parsed in chunk.tool_calls:
                calls.append(ToolCall(parsed.id or f"call_{round_no}_{len(calls) + 1}",
                                      parsed.name, parsed.arguments))
            if chunk.stats is not None:
                stats.append(chunk.stats)
                reason = chunk.finish_reason or "eos"
        parts: list[Part] = []
        if thought:
            parts.append(Reasoning("".join(thought)))
        if text:
            parts.append(Text("".join(text)))
        messages.append(ChatMessage("assistant", (*parts, *calls)))
        for call in calls:
            yield ToolCallEvent(call)
        if not calls or tools is None or reason == "cancelled" or cancel.is_set():
            break
        if round_no == request.max_rounds:
            reason = "tool_calls"
            notes.append(f"The model still asked for tools after {request.max_rounds} "
                         "rounds; those calls were not run.")
            break
        for call in calls:
            if cancel.is_set():
                break
            result = _run_call(toolbox, approve, call)  # type: ignore[arg-type]
            yield ToolResultEvent(result)
            messages.append(ChatMessage("tool", (result,)))
        if cancel.is_set():
            reason = "cancelled"
            break
    yield Finished(reason, tuple(stats), tuple(messages[start:]),
                   " ".join(notes) if notes else None)


def _run_call(toolbox: Toolbox, approve: Approve, call: ToolCall) -> ToolResult:
    if not approve(call):
        return ToolResult(call.id, DENIED, is_error=True, name=call.name)
    started = time.monotonic()
    try:
        result = toolbox.call(call)
    except Exception as exc:  # a toolbox's bug must not end the chat: the model hears of it
        return ToolResult(call.id, f"The tool {call.name} failed: {exc}", is_error=True,
                          name=call.name, duration_ms=_ms_since(started))
    return replace(result, call_id=call.id, name=result.name or call.name,
                   duration_ms=_ms_since(started))


def _ms_since(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


def _last_user(messages: Sequence[ChatMessage]) -> int | None:
    return next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i].role == "user"), None)
