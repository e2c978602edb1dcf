"""Request bodies of the OpenAI API → checked plain requests.

Every problem is an ``ApiError`` 400 naming the field (``param``), as OpenAI does. Fields the
engine cannot honour (``functions``, ``logit_bias``, audio) are refused rather than silently
ignored; fields that change nothing here (``user``, ``metadata``, ``store``) are accepted.

``n`` choices are ``n`` independent replies, run one after another. With a ``seed``, choice
``i`` is sampled with ``seed + i`` (so choice 0 is the reply the same request with ``n=1``
gives); greedy choices are all the same reply.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.engine.types import Grammar, Message, ParsedToolCall
from app.server.errors import bad_request

MAX_STOP_STRINGS = 16
MAX_SALT_CHARS = 1024
MAX_CHOICES = 16
#: OpenAI's bounds: chat ``top_logprobs`` 0..20; the legacy completions ``logprobs`` 0..5
#: (taken up to 20 here, as vLLM does)
MAX_TOP_LOGPROBS = 20
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
          "tool": "tool"}
_REFUSED = ("functions", "function_call", "audio", "modalities", "prediction", "logit_bias")


@dataclass(frozen=True)
class Sampling:
    """The sampling fields common to both endpoints (None: the model's default)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    stop: tuple[str, ...] = ()
    #: log-probabilities: None = none; k = the chosen token's and the k best alternatives'
    logprobs: int | None = None

    def overrides(self) -> dict[str, Any]:
        """``GenerationSettings.from_model`` overrides (max_new_tokens is set by the job)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed,
                "frequency_penalty": self.frequency_penalty,
                "presence_penalty": self.presence_penalty, "stop_strings": self.stop,
                "logprobs": self.logprobs}

    def for_choice(self, index: int) -> Sampling:
        """The sampling of choice ``index`` of ``n``: its seed is ``seed + index``."""
        if index == 0 or self.seed is None:
            return self
        return replace(self, seed=(self.seed + index) % 2**63)


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False
    include_usage: bool = False
    cache_salt: str = ""
    n: int = 1
    tools: tuple[dict, ...] = ()
    #: "auto", "none", "required" or "function:NAME" (GenerationSettings.tool_choice)
    tool_choice: str = "auto"
    parallel_tool_calls: bool = True
    grammar: Grammar | None = None  # response_format json_object / json_schema


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: str | tuple[int, ...]
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False
    include_usage: bool = False
    cache_salt: str = ""
    n: int = 1


def parse_chat(body: Mapping[str, Any], *, max_messages: int) -> ChatRequest:
    """A ``POST /v1/chat/completions`` body (already JSON-decoded and cleaned)."""
    _refuse_unsupported(body)
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise bad_request("'messages' must be a list of message objects.", "messages")
    if not raw:
        raise bad_request("'messages' must hold at least one message.", "messages")
    if len(raw) > max_messages:
        raise bad_request(f"'messages' holds {len(raw)} messages; this server accepts at most "
                          f"{max_messages}.", "messages")
    messages = tuple(_message(item, f"messages[{i}]") for i, item in enumerate(raw))
    tools, tool_choice, parallel = _tools(body)
    grammar = _response_format(body.get("response_format"))
    max_tokens = _optional_int(body, "max_completion_tokens", minimum=1)
    if max_tokens is None:
        max_tokens = _optional_int(body, "max_tokens", minimum=1)
    stream, include_usage = _stream_fields(body)
    sampling = replace(_sampling(body, max_tokens), logprobs=_chat_logprobs(body))
    return ChatRequest(model=_model(body), messages=messages, sampling=sampling, stream=stream,
                       include_usage=include_usage, cache_salt=_cache_salt(body), n=_n(body),
                       tools=tools, tool_choice=tool_choice, parallel_tool_calls=parallel,
                       grammar=grammar)


def _tools(body: Mapping[str, Any]) -> tuple[tuple[dict, ...], str, bool]:
    raw = body.get("tools")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise bad_request("'tools' must be a list of function tools.", "tools")
    for i, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (tool.get("type") if isinstance(tool, dict) else None) != "function" or not (
                isinstance(function, dict) and isinstance(function.get("name"), str)
                and function["name"]):
            raise bad_request(f"'tools[{i}]' must be {{'type': 'function', 'function': "
                              "{'name': ..., 'parameters': {...}}}.", f"tools[{i}]")
        if not isinstance(function.get("parameters", {}), dict):
            raise bad_request(f"'tools[{i}].function.parameters' must be a JSON Schema "
                              "object.", f"tools[{i}].function.parameters")
    names = {t["function"]["name"] for t in raw}
    choice = body.get("tool_choice")
    if choice is None:
        choice = "auto" if raw else "none"
    elif isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" \
            else None
        if name not in names:
            raise bad_request("'tool_choice' names a function that is not in 'tools'.",
                              "tool_choice")
        choice = f"function:{name}"
    elif choice not in ("none", "auto", "required"):
        raise bad_request("'tool_choice' must be 'none', 'auto', 'required' or "
                          "{'type': 'function', 'function': {'name': ...}}.", "tool_choice")
    if choice == "required" and not raw:
        raise bad_request("'tool_choice' is 'required' but no 'tools' are given.",
                          "tool_choice")
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise bad_request("'parallel_tool_calls' must be true or false.", "parallel_tool_calls")
    return tuple(raw), choice, parallel


def _response_format(value: Any) -> Grammar | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return Grammar("json_object")
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad_request("'response_format.json_schema.schema' must be a JSON Schema "
                              "object.", "response_format")
        return Grammar("json_schema", json.dumps(schema))
    raise bad_request("'response_format.type' must be 'text', 'json_object' or "
                      "'json_schema'.", "response_format")


def parse_completion(body: Mapping[str, Any]) -> CompletionRequest:
    """A ``POST /v1/completions`` body: ``prompt`` is a string, a one-string list or a list
    of token ids."""
    _refuse_unsupported(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(_is_int(t) and t >= 0 for t in prompt):
        parsed: str | tuple[int, ...] = tuple(int(t) for t in prompt)
    elif isinstance(prompt, str) and prompt:
        parsed = prompt
    else:
        raise bad_request("'prompt' must be a non-empty string or a list of token ids "
                          "(one prompt per request).", "prompt")
    for name in ("echo", "suffix", "best_of"):
        value = body.get(name)
        harmless = value is None or value is False or value == "" or (
            name == "best_of" and _is_int(value) and value == 1)  # True == 1 is no int here
        if not harmless:
            raise bad_request(f"'{name}' is not supported by this server.", name)
    stream, include_usage = _stream_fields(body)
    sampling = _sampling(body, _optional_int(body, "max_tokens", minimum=1))
    logprobs = _optional_int(body, "logprobs", minimum=0)  # legacy: the count itself
    if logprobs is not None and logprobs > MAX_TOP_LOGPROBS:
        raise bad_request(f"'logprobs' must be at most {MAX_TOP_LOGPROBS}.", "logprobs")
    return CompletionRequest(model=_model(body), prompt=parsed,
                             sampling=replace(sampling, logprobs=logprobs),
                             stream=stream, include_usage=include_usage,
                             cache_salt=_cache_salt(body), n=_n(body))


# -- fields ------------------------------------------------------------------------------


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    for name in _REFUSED:
        if body.get(name) not in (None, [], {}, "none"):
            raise bad_request(f"'{name}' is not supported by this server.", name)


def _n(body: Mapping[str, Any]) -> int:
    n = _optional_int(body, "n", minimum=1)
    if n is not None and n > MAX_CHOICES:
        raise bad_request(f"'n' must be at most {MAX_CHOICES}.", "n")
    return n or 1


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    """Chat's ``logprobs`` (true/false) and ``top_logprobs`` (0..20) as one count."""
    wanted = body.get("logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise bad_request("'logprobs' must be true or false.", "logprobs")
    top = _optional_int(body, "top_logprobs", minimum=0)
    if top is not None and top > MAX_TOP_LOGPROBS:
        raise bad_request(f"'top_logprobs' must be at most {MAX_TOP_LOGPROBS}.", "top_logprobs")
    if top and not wanted:
        raise bad_request("'top_logprobs' needs 'logprobs': true.", "top_logprobs")
    return (top or 0) if wanted else None


def _cache_salt(body: Mapping[str, Any]) -> str:
    salt = body.get("cache_salt")
    if salt is None:
        return ""
    if not isinstance(salt, str) or not salt or len(salt) > MAX_SALT_CHARS:
        raise bad_request(f"'cache_salt' must be a non-empty string of at most {MAX_SALT_CHARS} "
                          "characters.", "cache_salt")
    return salt


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' must be the id of a model (see GET /v1/models).", "model")
    return model


def _message(item: Any, where: str) -> Message:
    if not isinstance(item, dict):
        raise bad_request(f"'{where}' must be an object with 'role' and 'content'.", where)
    role = item.get("role")
    if role not in _ROLES:
        raise bad_request(f"'{where}.role' must be one of system, developer, user, assistant, "
                          f"tool, not {role!r}.", f"{where}.role")
    content = item.get("content")
    if content is None and role == "assistant":
        content = ""
    calls = _replayed_calls(item.get("tool_calls"), where) if role == "assistant" else ()
    call_id = None
    if role == "tool":
        call_id = item.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise bad_request(f"'{where}.tool_call_id' must name the call this answers.",
                              f"{where}.tool_call_id")
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                raise bad_request(f"'{where}.content[{j}]' must be a text part "
                                  "({'type': 'text', 'text': ...}); this model reads text only.",
                                  f"{where}.content[{j}]")
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise bad_request(f"'{where}.content' must be a string or a list of text parts.",
                          f"{where}.content")
    return Message(_ROLES[role], content, tool_calls=calls, tool_call_id=call_id)


def _replayed_calls(raw: Any, where: str) -> tuple[ParsedToolCall, ...]:
    if raw is None:
        return ()
    bad = bad_request(f"'{where}.tool_calls' must be a list of {{'id', 'type': 'function', "
                      "'function': {'name', 'arguments'}}.", f"{where}.tool_calls")
    if not isinstance(raw, list):
        raise bad
    calls = []
    for call in raw:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append(ParsedToolCall(str(call.get("id") or ""), function["name"], arguments))
    return tuple(calls)


def _sampling(body: Mapping[str, Any], max_tokens: int | None) -> Sampling:
    temperature = _optional_float(body, "temperature", 0.0, 2.0)
    top_p = _optional_float(body, "top_p", 0.0, 1.0)
    if top_p is not None and top_p <= 0.0:
        raise bad_request("'top_p' must be greater than 0 and at most 1.", "top_p")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise bad_request("'seed' must be an integer.", "seed")
    return Sampling(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=None if seed is None else int(seed) % 2**63,
        frequency_penalty=_optional_float(body, "frequency_penalty", -2.0, 2.0),
        presence_penalty=_optional_float(body, "presence_penalty", -2.0, 2.0),
        stop=_stop(body.get("stop")),
    )


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise bad_request("'stop' must be a non-empty string or a list of them.", "stop")
    if len(value) > MAX_STOP_STRINGS:
        raise bad_request(f"'stop' holds at most {MAX_STOP_STRINGS} strings.", "stop")
    return tuple(value)


def _stream_fields(body: Mapping[str, Any]) -> tuple[bool, bool]:
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be true or false.", "stream")
    options = body.get("stream_options")
    include = False
    if options is not None:
        if not isinstance(options, dict):
            raise bad_request("'stream_options' must be an object.", "stream_options")
        include = options.get("include_usage", False)
        if not isinstance(include, bool):
            raise bad_request("'stream_options.include_usage' must be true or false.",
                              "stream_options.include_usage")
    return stream, include


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_int(body: Mapping[str, Any], name: str, *, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not _is_int(value) or value < minimum:
        raise bad_request(f"'{name}' must be an integer of at least {minimum}.", name)
    return int(value)


def _optional_float(body: Mapping[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not math.isfinite(value) or not low <= value <= high):
        raise bad_request(f"'{name}' must be a number from {low:g} to {high:g}.", name)
    return float(value)
