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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from app.engine.grammar import json_schema_lark, lark_literal
from app.engine.types import GenerationChunk, Grammar, ParsedToolCall

if TYPE_CHECKING:
    from app.engine.tokenizer import Tokenizer

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


# -- constrained calls (app/engine/grammar.py) -------------------------------------------


@dataclass(frozen=True)
class CallSyntax:
    """How a family writes one call, for the grammar that constrains it: ``open`` and
    ``close`` around a JSON object whose name key is "name" and whose arguments key is
    ``arguments_key``."""

    open: str
    close: str
    arguments_key: str = "arguments"


#: family → its call syntax (families without one are parsed, not constrained)
SYNTAX: dict[str, CallSyntax] = {"hermes": CallSyntax(HERMES_OPEN, HERMES_CLOSE)}


def call_schema(tools: Sequence[dict], name: str | None = None,
                arguments_key: str = "arguments") -> dict[str, Any]:
    """The JSON Schema of one call object among ``tools`` (OpenAI function specs), or of a
    call of ``name`` alone."""
    options = []
    for tool in tools:
        function = tool.get("function", tool)
        if name is not None and function.get("name") != name:
            continue
        parameters = function.get("parameters") or {"type": "object"}
        options.append({"type": "object",
                        "properties": {"name": {"const": function.get("name")},
                                       arguments_key: parameters},
                        "required": ["name", arguments_key], "additionalProperties": False})
    if not options:
        raise ValueError(f"no tool named {name!r} is offered")
    return options[0] if len(options) == 1 else {"anyOf": options}


def tool_call_grammar(family: str, tools: Sequence[dict], choice: str, *, parallel: bool,
                      tokenizer: Tokenizer) -> Grammar | None:
    """The grammar that keeps ``family``'s calls to ``tools`` well formed: from the first
    token for "required" and "function:NAME", after the start marker for "auto"; None for
    "none" or a family without a call syntax."""
    syntax = SYNTAX.get(family)
    if syntax is None or choice == "none" or not tools:
        return None
    name = choice.removeprefix("function:") if choice.startswith("function:") else None
    body = json_schema_lark(call_schema(tools, name, syntax.arguments_key))
    open_, close = lark_literal(syntax.open, tokenizer), lark_literal(syntax.close, tokenizer)
    more = f" (NL {open_} rest)*" if parallel else ""
    rules = "\n".join([f"rest: NL? body NL? {close}", f"body: {body}", 'NL: "\\n"', ""])
    if choice == "auto":
        return Grammar("lark", f"start: rest{more}\n{rules}", trigger=syntax.open)
    return Grammar("lark", f"start: {open_} rest{more}\n{rules}")


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
