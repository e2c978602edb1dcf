"""OpenAI response objects: completions, stream chunks, the model list.

``reasoning_content`` carries the model's thinking when the engine separates it
(``GenerationChunk.reasoning``), as DeepSeek, vLLM and llama.cpp's servers do; it is left out
when the model gave none.

``logprobs`` follow OpenAI's two shapes: chat's ``{"content": [{"token", "logprob", "bytes",
"top_logprobs"}]}`` and the legacy completions' ``{"tokens", "token_logprobs",
"top_logprobs", "text_offset"}``. A choice of ``n`` carries its ``index``.
"""

from __future__ import annotations

import json
from typing import Any

from app.engine.types import GenerationChunk, ParsedToolCall
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


def chat_choice(index: int, text: str, reasoning: str, finish: str,
                calls: list[ParsedToolCall] | None = None,
                logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One choice of a whole ``chat.completion`` (``logprobs``: its token entries, None when
    they were not asked for)."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["content"] = text or None
        message["tool_calls"] = [{k: v for k, v in tool_call(c, i).items() if k != "index"}
                                 for i, c in enumerate(calls)]
    return {"index": index, "message": message, "logprobs": chat_logprobs(logprobs),
            "finish_reason": finish}


def chat_completion(rid: str, created: int, model: str, choices: list[dict[str, Any]],
                    usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "system_fingerprint": None, "choices": choices, "usage": usage}


def chat_chunk(rid: str, created: int, model: str, delta: dict[str, Any] | None,
               finish: str | None = None, usage: dict[str, Any] | None = None,
               with_usage_field: bool = False, *, index: int = 0,
               logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of choice ``index``; ``delta`` None makes the usage-only
    chunk (no choices) that ``stream_options.include_usage`` asks for."""
    chunk: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": created,
                             "model": model, "system_fingerprint": None}
    chunk["choices"] = [] if delta is None else [
        {"index": index, "delta": delta, "logprobs": chat_logprobs(logprobs),
         "finish_reason": finish}]
    if with_usage_field:
        chunk["usage"] = usage
    return chunk


def chat_delta(text: str, reasoning: str) -> dict[str, Any]:
    delta: dict[str, Any] = {"content": text} if text or not reasoning else {}
    if reasoning:
        delta["reasoning_content"] = reasoning
    return delta


def completion(rid: str, created: int, model: str, text: str | None, finish: str | None,
               usage: dict[str, Any] | None, with_usage_field: bool = True, *,
               index: int = 0, logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``text_completion`` with one choice (also each streamed chunk; the usage-only chunk
    has no choices when ``text`` is None)."""
    choices = [] if text is None else [completion_choice(index, text, finish, logprobs)]
    return completions(rid, created, model, choices, usage, with_usage_field)


def completion_choice(index: int, text: str, finish: str | None,
                      logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}


def completions(rid: str, created: int, model: str, choices: list[dict[str, Any]],
                usage: dict[str, Any] | None, with_usage_field: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"id": rid, "object": "text_completion", "created": created,
                            "model": model, "system_fingerprint": None, "choices": choices}
    if with_usage_field:
        body["usage"] = usage
    return body


# -- log-probabilities -------------------------------------------------------------------

#: what a log-probability of -inf (a token the grammar forbade) is written as: JSON has no
#: infinity, and OpenAI writes -9999.0 for "never"
LOGPROB_FLOOR = -9999.0


def _logprob(value: float) -> float:
    return max(float(value), LOGPROB_FLOOR)


def chat_logprob(chunk: GenerationChunk) -> dict[str, Any]:
    """The chat ``logprobs.content`` entry of one generated token."""
    return {"token": chunk.logprob_token, "logprob": _logprob(chunk.logprob or 0.0),
            "bytes": list(chunk.logprob_token.encode()),
            "top_logprobs": [{"token": t.text, "logprob": _logprob(t.logprob),
                              "bytes": list(t.text.encode())} for t in chunk.top_logprobs]}


def chat_logprobs(entries: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    return None if entries is None else {"content": entries, "refusal": None}


def completion_logprobs(chunks: list[GenerationChunk], offset: int) -> dict[str, Any]:
    """The legacy completions ``logprobs`` of ``chunks``' tokens; ``offset``: where the first
    token's text starts in the choice's text."""
    tokens, values, tops, offsets = [], [], [], []
    for chunk in chunks:
        tokens.append(chunk.logprob_token)
        values.append(_logprob(chunk.logprob or 0.0))
        tops.append({t.text: _logprob(t.logprob) for t in chunk.top_logprobs})
        offsets.append(offset)
        offset += len(chunk.logprob_token)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops,
            "text_offset": offsets}


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()
