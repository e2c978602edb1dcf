"""OpenAI response objects: completions, stream chunks, the model list.

``reasoning_content`` carries the model's thinking when the engine separates it
(``GenerationChunk.reasoning``), as DeepSeek, vLLM and llama.cpp's servers do; it is left out
when the model gave none.
"""

from __future__ import annotations

import json
from typing import Any

from app.engine.types import ParsedToolCall
from app.server.executor import ServedModel


def model_object(model: ServedModel) -> dict[str, Any]:
    """OpenAI's model object, with ``context_length`` where known (as LM Studio and
    OpenRouter write it; a gateway in front of this server reads it)."""
    out: dict[str, Any] = {"id": model.id, "object": "model", "created": model.created,
                           "owned_by": "hearth"}
    if model.context_length > 0:
        out["context_length"] = model.context_length
    return out


def tool_call(call: ParsedToolCall, index: int) -> dict[str, Any]:
    """A call as OpenAI writes it (``index`` is what a streamed delta adds)."""
    return {"index": index, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def call_ids(calls: list[ParsedToolCall], rid: str) -> list[ParsedToolCall]:
    """The calls with ids (the model's format has none: the reply's id and the index)."""
    return [c if c.id else ParsedToolCall(f"call_{rid[-12:]}_{i}", c.name, c.arguments)
            for i, c in enumerate(calls)]


def chat_completion(rid: str, created: int, model: str, text: str, reasoning: str,
                    finish: str, usage: dict[str, Any],
                    calls: list[ParsedToolCall] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["content"] = text or None
        message["tool_calls"] = [{k: v for k, v in tool_call(c, i).items() if k != "index"}
                                 for i, c in enumerate(calls)]
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish}],
            "usage": usage}


def chat_chunk(rid: str, created: int, model: str, delta: dict[str, Any] | None,
               finish: str | None = None, usage: dict[str, Any] | None = None,
               with_usage_field: bool = False) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta`` None makes the usage-only chunk (no
    choices) that ``stream_options.include_usage`` asks for."""
    chunk: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": created,
                             "model": model, "system_fingerprint": None}
    chunk["choices"] = [] if delta is None else [
        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    if with_usage_field:
        chunk["usage"] = usage
    return chunk


def chat_delta(text: str, reasoning: str) -> dict[str, Any]:
    delta: dict[str, Any] = {"content": text} if text or not reasoning else {}
    if reasoning:
        delta["reasoning_content"] = reasoning
    return delta


def completion(rid: str, created: int, model: str, text: str, finish: str | None,
               usage: dict[str, Any] | None, with_usage_field: bool = True) -> dict[str, Any]:
    """A ``text_completion`` (also each streamed chunk; the usage-only chunk has no
    choices when ``text`` is None)."""
    body: dict[str, Any] = {"id": rid, "object": "text_completion", "created": created,
                            "model": model, "system_fingerprint": None}
    body["choices"] = [] if text is None else [
        {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]
    if with_usage_field:
        body["usage"] = usage
    return body


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()
