"""Tool calls out of the streamed answer, one small parser per model family.

A model offered tools writes its calls in its family's own markup; the parser for that
family takes the markup out of the answer text and returns the calls as
``ParsedToolCall``. :func:`tool_call_format` reads the family from the chat template's
source, ``PARSERS`` maps a family to its parser, and :func:`split_tool_calls` wraps a chunk
stream (after the reasoning splitter: only the answer is parsed) with one.

Families (issue 26 lists the rest: Llama 3.x JSON and ``<|python_tag|>``, Mistral
``[TOOL_CALLS]``, Phi-4-mini ``<|tool_call|>``, Granite, SmolLM3, gpt-oss Harmony):

- ``hermes``: Qwen2.5 / Qwen3 / Hermes, ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``.

Parsing works on text, like the reasoning splitter: text that could be the start of a
marker is held back until it is known not to be one, so a marker split over several
tokens (``<``, ``tool``, ``_call``, ``>``) is found. A call whose body is not the JSON the
family promises, or that never closes, stays in the answer as the model wrote it: the user
sees it, and nothing is run from a guess.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Protocol

from app.engine.types import GenerationChunk, ParsedToolCall

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"


class ToolCallParser(Protocol):
    """Streamed answer text in, (answer text, completed calls) out."""

    def feed(self, text: str) -> tuple[str, list[ParsedToolCall]]: ...

    def finish(self) -> tuple[str, list[ParsedToolCall]]: ...


def _partial_suffix(buf: str, marker: str) -> int:
    """Length of the longest end of ``buf`` that begins ``marker`` (shorter than it)."""
    for size in range(min(len(marker) - 1, len(buf)), 0, -1):
        if buf.endswith(marker[:size]):
            return size
    return 0


class HermesParser:
    """``<tool_call>`` JSON ``</tool_call>`` (Qwen2.5, Qwen3, Hermes 2/3 templates)."""

    def __init__(self) -> None:
        self._buf = ""
        self._inside = False
        self._trim = False  # drop the whitespace between one call and the next

    def feed(self, text: str) -> tuple[str, list[ParsedToolCall]]:
        self._buf += text
        answer: list[str] = []
        calls: list[ParsedToolCall] = []
        while True:
            if not self._inside:
                pos = self._buf.find(HERMES_OPEN)
                if pos == -1:
                    keep = _partial_suffix(self._buf, HERMES_OPEN)
                    answer.append(self._plain(self._buf[: len(self._buf) - keep]))
                    self._buf = self._buf[len(self._buf) - keep:]
                    break
                answer.append(self._plain(self._buf[:pos]))
                self._buf = self._buf[pos:]  # the call is kept whole until it closes
                self._inside = True
            end = self._buf.find(HERMES_CLOSE)
            if end == -1:
                break
            raw = self._buf[: end + len(HERMES_CLOSE)]
            self._buf = self._buf[end + len(HERMES_CLOSE):]
            self._inside = False
            call = _hermes_call(raw[len(HERMES_OPEN): -len(HERMES_CLOSE)])
            if call is None:
                answer.append(raw)
            else:
                calls.append(call)
                self._trim = True
        return "".join(answer), calls

    def _plain(self, text: str) -> str:
        if self._trim:
            stripped = text.lstrip()
            if stripped:
                self._trim = False
            return stripped
        return text

    def finish(self) -> tuple[str, list[ParsedToolCall]]:
        """What is held back: a marker prefix that was plain text, or a call never closed."""
        rest, self._buf, self._inside = self._buf, "", False
        return (rest.lstrip() if self._trim else rest), []


def _hermes_call(body: str) -> ParsedToolCall | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    # some fine-tunes write the arguments as a JSON string
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ParsedToolCall(id="", name=data["name"], arguments=text)


#: family name → a new parser for one reply
PARSERS: dict[str, Callable[[], ToolCallParser]] = {"hermes": HermesParser}


def tool_call_format(template_source: str | None) -> str | None:
    """The family whose calls this chat template asks for, or None (no tool-call format
    Hearth reads: the model is not offered tools)."""
    source = template_source or ""
    if HERMES_OPEN in source and "tools" in source:
        return "hermes"
    return None


def split_tool_calls(
    stream: Iterator[GenerationChunk], parser: ToolCallParser
) -> Iterator[GenerationChunk]:
    """Pass ``stream`` through ``parser``: each chunk's ``text`` loses its call markup and
    the calls it completed go to ``tool_calls``; the last chunk flushes what was held."""
    for chunk in stream:
        text, calls = parser.feed(chunk.text)
        if chunk.stats is not None:
            more, more_calls = parser.finish()
            text, calls = text + more, calls + more_calls
        chunk.text = text
        if calls:
            chunk.tool_calls = chunk.tool_calls + tuple(calls)
        yield chunk
