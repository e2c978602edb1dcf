"""One chat turn against an OpenAI-compatible server, in plain Python: the request body for
Hearth's settings, the stop strings checked on our side too, and the reply's figures.

Finish reasons map as: ``stop`` → "eos" (or "stop" when a stop string ended it: vLLM's
``stop_reason`` or our own check), ``length`` → "max_tokens", anything else → "eos".
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.engine.types import FinishReason, GenerationSettings, GenerationStats, Message

#: Sampling options outside OpenAI's API (vLLM, llama-server, LM Studio take them); sent only
#: when set, and dropped when a server refuses them.
EXTRA_OPTIONS = ("top_k", "min_p", "repetition_penalty")
MAX_STOP_STRINGS = 4  # OpenAI's limit; more are checked on our side only


def payload_message(message: Message) -> dict[str, Any]:
    """One message in OpenAI's shape: earlier thinking stays home (servers such as DeepSeek's
    refuse ``reasoning_content``); an assistant's calls as ``tool_calls`` with their
    arguments as JSON text, a tool result with its ``tool_call_id``."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out


def build_payload(model: str, messages: Sequence[Message], settings: GenerationSettings, *,
                  stream: bool, extras: bool = True,
                  tools: Sequence[dict] | None = None) -> dict[str, Any]:
    """The ``/v1/chat/completions`` body for ``settings`` (and ``tools``, OpenAI function
    schemas, when given, with a ``tool_choice`` other than "auto"); a grammar goes as
    OpenAI's ``response_format`` (json_object, json_schema), the server enforcing it."""
    body: dict[str, Any] = {"model": model,
                            "messages": [payload_message(m) for m in messages]}
    body.update(_sampling(settings, stream=stream, extras=extras))
    if tools:
        body["tools"] = list(tools)
        choice = settings.tool_choice
        if choice.startswith("function:"):
            body["tool_choice"] = {"type": "function",
                                   "function": {"name": choice.split(":", 1)[1]}}
        elif choice != "auto":
            body["tool_choice"] = choice
        if not settings.parallel_tool_calls:
            body["parallel_tool_calls"] = False
    grammar = settings.grammar
    if grammar is not None and grammar.kind == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif grammar is not None and grammar.kind == "json_schema":
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "response", "schema": json.loads(grammar.source), "strict": True}}
    return body


def build_completion_payload(model: str, prompt: str | Sequence[int],
                             settings: GenerationSettings, *, stream: bool,
                             extras: bool = True) -> dict[str, Any]:
    """The ``/v1/completions`` body: a raw ``prompt`` (text, or token ids)."""
    body: dict[str, Any] = {"model": model,
                            "prompt": prompt if isinstance(prompt, str) else list(prompt)}
    body.update(_sampling(settings, stream=stream, extras=extras))
    return body


def _sampling(settings: GenerationSettings, *, stream: bool, extras: bool) -> dict[str, Any]:
    s = settings.sampling
    body: dict[str, Any] = {
        "max_tokens": settings.max_new_tokens,
        "temperature": s.temperature,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if s.top_p < 1.0:
        body["top_p"] = s.top_p
    if s.presence_penalty:
        body["presence_penalty"] = s.presence_penalty
    if s.frequency_penalty:
        body["frequency_penalty"] = s.frequency_penalty
    if s.seed is not None:
        body["seed"] = s.seed
    if settings.stop_strings:
        body["stop"] = list(settings.stop_strings[:MAX_STOP_STRINGS])
    if extras:
        if s.top_k > 0:
            body["top_k"] = s.top_k
        if s.min_p > 0:
            body["min_p"] = s.min_p
        if s.repetition_penalty != 1.0:
            body["repetition_penalty"] = s.repetition_penalty
    return body


def has_extras(body: dict) -> bool:
    return any(k in body for k in EXTRA_OPTIONS) or "stream_options" in body


def estimate_tokens(text: str) -> int:
    """A rough count for servers that do not say: about four characters a token."""
    return math.ceil(len(text) / 4) if text else 0


def estimate_message_tokens(messages: Sequence[Message]) -> int:
    """Rough prompt size: the text at four characters a token plus four per message for the
    chat template's markers."""
    return sum(estimate_tokens(m.content) + 4 for m in messages)


class StopScanner:
    """Checks stop strings on our side (a server may ignore ``stop``, and only four are
    sent): holds back text that could be the start of one."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.buffer = ""
        self.hit: str | None = None

    def push(self, text: str) -> str:
        """The text that is safe to show now; after a hit, nothing more."""
        if self.hit is not None:
            return ""
        self.buffer += text
        if not self.stops:
            out, self.buffer = self.buffer, ""
            return out
        found = [(self.buffer.find(s), s) for s in self.stops if s in self.buffer]
        if found:
            index, self.hit = min(found)
            out, self.buffer = self.buffer[:index], ""
            return out
        keep = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(self.buffer)), keep, -1):
                if self.buffer.endswith(stop[:n]):
                    keep = n
                    break
        out = self.buffer[: len(self.buffer) - keep]
        self.buffer = self.buffer[len(self.buffer) - keep:]
        return out

    def flush(self) -> str:
        out, self.buffer = ("" if self.hit else self.buffer), ""
        return out


def finish_reason(server: str | None, stop_reason: object, settings: GenerationSettings,
                  scanner: StopScanner) -> FinishReason:
    if scanner.hit is not None:
        return "stop"
    if server == "length":
        return "max_tokens"
    if server == "stop" and isinstance(stop_reason, str) and stop_reason in settings.stop_strings:
        return "stop"
    return "eos"


@dataclass
class ReplyClock:
    """Times and counts of one reply; turns them into GenerationStats."""

    started: float = field(default_factory=time.perf_counter)
    first: float | None = None
    last: float | None = None
    deltas: int = 0  # streamed events with text (about one token each on vLLM / llama-server)
    text: str = ""
    usage: dict | None = None

    def saw(self, text: str) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        self.last = now
        self.deltas += 1
        self.text += text

    def stats(self, *, prompt_estimate: int, context_max: int, notes: list[str],
              streamed: bool) -> GenerationStats:
        end = time.perf_counter()
        usage = self.usage or {}
        prompt = usage.get("prompt_tokens")
        generated = usage.get("completion_tokens")
        if not isinstance(generated, int) or not isinstance(prompt, int):
            notes = [*notes, "The server sent no token usage, so the token counts are "
                             "estimates."]
            prompt = prompt if isinstance(prompt, int) else prompt_estimate
            if not isinstance(generated, int):
                generated = self.deltas if streamed else estimate_tokens(self.text)
        first = self.first if self.first is not None else end
        last = self.last if self.last is not None else end
        decode_s = last - first
        rate = (generated - 1) / decode_s if generated > 1 and decode_s > 0 else 0.0
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        cached = cached if isinstance(cached, int) and 0 <= cached <= prompt else 0
        return GenerationStats(
            prompt_tokens=prompt,
            reused_tokens=cached,
            prefilled_tokens=prompt - cached,
            generated_tokens=generated,
            ttft_ms=(first - self.started) * 1000.0,
            decode_tok_s=rate,
            total_ms=(end - self.started) * 1000.0,
            provider="remote",
            context_used=prompt + generated,
            context_max=context_max,
            context_note=" ".join(notes) or None,
        )
