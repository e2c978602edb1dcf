"""Tool calls out of the streamed answer, one small parser per model family.

A model offered tools writes its calls in its family's own markup; the parser for that
family takes the markup out of the answer text and returns the calls as
``ParsedToolCall``. :func:`tool_call_format` reads the family from the chat template's
source, ``PARSERS`` maps a family to its parser, and :func:`split_tool_calls` wraps a chunk
stream (after the reasoning splitter: only the answer is parsed) with one.

Families:

- ``hermes``: Qwen2.5 / Qwen3 / Hermes / SmolLM3,
  ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``;
- ``llama3``: Llama 3.1–3.3, a reply that is ``{"name": …, "parameters": {…}}`` (several
  ``;``-separated), or the same after ``<|python_tag|>``;
- ``mistral``: ``[TOOL_CALLS][{"name": …, "arguments": {…}}]`` (v3 tokenizers) or
  ``[TOOL_CALLS]NAME[ARGS]{…}`` (v11+);
- ``phi4``: Phi-4-mini, ``<|tool_call|>[{…}]<|/tool_call|>``, or ``functools[{…}, …]``
  (what the model writes under templates that list tools in the system message: vLLM's
  ``phi4_mini_json`` parser and sglang's Phi-4-mini detector read the same form);
- ``granite``: Granite 3.x, ``<|tool_call|>[{…}]`` to the end of the reply;
- ``harmony``: gpt-oss, ``<|channel|>commentary to=functions.NAME <|constrain|>json
  <|message|>{…}<|call|>``.

Markers that are special tokens (``[TOOL_CALLS]``, ``<|python_tag|>``, Harmony's) are
left out of decoded text; :func:`split_tool_calls` puts them back from the token ids
(:func:`hidden_markers`) before the parser reads the text.

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
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from app.engine.grammar import json_schema_lark, lark_literal
from app.engine.types import GenerationChunk, Grammar, ParsedToolCall

if TYPE_CHECKING:
    from app.engine.tokenizer import Tokenizer

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
LLAMA_TAG = "<|python_tag|>"
MISTRAL_OPEN, MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"
PHI_OPEN, PHI_CLOSE = "<|tool_call|>", "<|/tool_call|>"
PHI_FUNCTOOLS = "functools["  # a JSON list follows the word, up to its own closing "]"
GRANITE_OPEN = "<|tool_call|>"
HARMONY_START, HARMONY_CHANNEL, HARMONY_CONSTRAIN = "<|start|>", "<|channel|>", "<|constrain|>"
HARMONY_MESSAGE, HARMONY_CALL, HARMONY_RECIPIENT = "<|message|>", "<|call|>", "to=functions."


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


def _list_end(buf: str, start: int) -> int:
    """Where the JSON list whose ``[`` comes just before ``start`` ends in ``buf`` (the
    index past its ``]``, strings skipped), or -1 while it has not closed yet."""
    depth, in_string, escaped = 1, False, False
    for i in range(start, len(buf)):
        c = buf[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


#: ``close`` as a function: where the call that ``buf`` opens ends (past the close), or -1
CloseFinder = Callable[[str, int], int]


class MarkedParser:
    """Calls after an ``open`` marker, up to ``close`` (or to the end of the reply when the
    family has none; a function when the end is found otherwise, e.g. the ``]`` that closes
    a list: it is then part of the body), read by ``read(body)``: the calls, or None when
    the body is not what the family promises (it then stays in the answer as written). Used
    by the families whose markup is one marker before JSON: Phi-4-mini, Granite, Mistral,
    Llama's ``<|python_tag|>``."""

    def __init__(self, open_: str, close: str | CloseFinder | None,
                 read: Callable[[str], list[ParsedToolCall] | None]) -> None:
        self._open, self._close, self._read = open_, close, read
        self._buf = ""
        self._inside = False
        self._trim = False

    def feed(self, text: str) -> tuple[str, list[ParsedToolCall]]:
        self._buf += text
        answer: list[str] = []
        calls: list[ParsedToolCall] = []
        while True:
            if not self._inside:
                pos = self._buf.find(self._open)
                if pos == -1:
                    keep = _partial_suffix(self._buf, self._open)
                    answer.append(self._plain(self._buf[: len(self._buf) - keep]))
                    self._buf = self._buf[len(self._buf) - keep:]
                    break
                answer.append(self._plain(self._buf[:pos]))
                self._buf = self._buf[pos:]
                self._inside = True
            if self._close is None:
                break  # the calls run to the end of the reply
            if isinstance(self._close, str):
                end = self._buf.find(self._close)
                if end == -1:
                    break
                raw = self._buf[: end + len(self._close)]
                body = raw[len(self._open): -len(self._close)]
            else:
                end = self._close(self._buf, len(self._open))
                if end == -1:
                    break
                raw = self._buf[:end]
                body = raw[len(self._open):]
            self._buf = self._buf[len(raw):]
            self._inside = False
            found = self._read(body)
            if found is None:
                answer.append(raw)
            else:
                calls.extend(found)
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
        rest, inside = self._buf, self._inside
        self._buf, self._inside = "", False
        if inside and self._close is None:
            found = self._read(rest[len(self._open):])
            if found is not None:
                return "", found
        return (rest.lstrip() if self._trim else rest), []


class HermesParser(MarkedParser):
    """``<tool_call>`` JSON ``</tool_call>`` (Qwen2.5, Qwen3, Hermes 2/3 templates)."""

    def __init__(self) -> None:
        super().__init__(HERMES_OPEN, HERMES_CLOSE, _hermes_calls)


def _hermes_calls(body: str) -> list[ParsedToolCall] | None:
    call = _hermes_call(body)
    return None if call is None else [call]


def _call_of(data: Any) -> ParsedToolCall | None:
    """A call object (``name`` and ``arguments`` or ``parameters``; OpenAI's nested
    ``{"type": "function", "function": {...}}`` too)."""
    if isinstance(data, dict) and isinstance(data.get("function"), dict):
        data = data["function"]
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ParsedToolCall(id="", name=data["name"], arguments=text)


def _json_calls(body: str) -> list[ParsedToolCall] | None:
    """One call object or a list of them (Phi-4-mini, Granite, Mistral's older format)."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    items = data if isinstance(data, list) else [data]
    calls = [_call_of(item) for item in items]
    return calls if calls and all(c is not None for c in calls) else None  # type: ignore


class Phi4Parser:
    """Phi-4-mini: ``<|tool_call|>[…]<|/tool_call|>``, and ``functools[…]`` (the JSON
    list's own ``]`` ends it; a list that never closes stays in the answer). The first form
    is read first; what it leaves as answer text is read for the second."""

    def __init__(self) -> None:
        self._marked = MarkedParser(PHI_OPEN, PHI_CLOSE, _json_calls)
        self._functools = MarkedParser(PHI_FUNCTOOLS, _list_end,
                                       lambda body: _json_calls("[" + body))

    def feed(self, text: str) -> tuple[str, list[ParsedToolCall]]:
        answer, calls = self._marked.feed(text)
        answer, more = self._functools.feed(answer)
        return answer, calls + more

    def finish(self) -> tuple[str, list[ParsedToolCall]]:
        rest, calls = self._marked.finish()
        answer, more = self._functools.feed(rest)
        tail, last = self._functools.finish()
        return answer + tail, calls + more + last


def _mistral_calls(body: str) -> list[ParsedToolCall] | None:
    """``[TOOL_CALLS]`` then a JSON list (v3 tokenizers), or ``NAME[ARGS]{…}`` repeated with
    a ``[TOOL_CALLS]`` before each (v11+: Mistral Small 3.2, Magistral, Devstral)."""
    if MISTRAL_ARGS not in body:
        return _json_calls(body)
    calls = []
    for part in body.split(MISTRAL_OPEN):
        name, sep, arguments = part.partition(MISTRAL_ARGS)
        try:
            data = json.loads(arguments)
        except ValueError:
            return None
        if not sep or not name.strip() or not isinstance(data, dict):
            return None
        calls.append(ParsedToolCall("", name.strip(), json.dumps(data, ensure_ascii=False)))
    return calls


def _llama_calls(body: str) -> list[ParsedToolCall] | None:
    """Llama 3.1–3.3: ``{"name": …, "parameters": {…}}`` objects, ``;``-separated when
    there are several (python code after ``<|python_tag|>`` is no call Hearth reads)."""
    decoder, at, calls = json.JSONDecoder(), 0, []
    body = body.strip()
    while at < len(body):
        try:
            data, at = decoder.raw_decode(body, at)
        except ValueError:
            return None
        call = _call_of(data)
        if call is None:
            return None
        calls.append(call)
        while at < len(body) and body[at] in " \t\n;":
            at += 1
    return calls or None


class LlamaParser:
    """Llama 3.1–3.3: a reply that *is* a call (it starts with ``{``) or calls after
    ``<|python_tag|>``. A reply that starts with anything else is text."""

    def __init__(self) -> None:
        self._start = ""  # the reply's leading whitespace, while undecided
        self._call: list[str] | None = None  # the reply is a call: all of it, held
        self._tagged = MarkedParser(LLAMA_TAG, None, _llama_calls)
        self._decided = False

    def feed(self, text: str) -> tuple[str, list[ParsedToolCall]]:
        if self._call is not None:
            self._call.append(text)
            return "", []
        if not self._decided:
            self._start += text
            head = self._start.lstrip()
            if not head:
                return "", []
            self._decided = True
            text, self._start = self._start, ""
            if head.startswith("{"):
                self._call = [text]
                return "", []
        return self._tagged.feed(text)

    def finish(self) -> tuple[str, list[ParsedToolCall]]:
        if self._call is not None:
            raw, self._call = "".join(self._call), None
            found = _llama_calls(raw)
            return ("", found) if found is not None else (raw, [])
        if not self._decided:
            rest, self._start = self._start, ""
            return rest, []
        return self._tagged.finish()


class HarmonyParser:
    """gpt-oss: ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}``
    then ``<|call|>`` (the recipient may come before the channel instead). It reads the raw
    stream, markers written out, *before* the reasoning splitter, and leaves the text as it
    is: Harmony's commentary channel is reasoning, so the answer never held the call."""

    observes = True

    def __init__(self) -> None:
        self._buf = ""

    def feed(self, text: str) -> tuple[str, list[ParsedToolCall]]:
        self._buf += text
        calls = []
        while (end := self._buf.find(HARMONY_CALL)) != -1:
            call = _harmony_call(self._buf[:end])
            self._buf = self._buf[end + len(HARMONY_CALL):]
            if call is not None:
                calls.append(call)
        return text, calls

    def finish(self) -> tuple[str, list[ParsedToolCall]]:
        call = _harmony_call(self._buf)  # a reply that ended on another end token
        self._buf = ""
        return "", [call] if call is not None else []


def _harmony_call(segment: str) -> ParsedToolCall | None:
    start = segment.rfind(HARMONY_START)
    head = segment[start + len(HARMONY_START):] if start != -1 else segment
    header, sep, body = head.rpartition(HARMONY_MESSAGE)
    at = header.find(HARMONY_RECIPIENT)
    if not sep or at == -1:
        return None
    name = header[at + len(HARMONY_RECIPIENT):].replace(HARMONY_CHANNEL, " ")
    name = name.replace(HARMONY_CONSTRAIN, " ").split()[0] if name.strip() else ""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not name or not isinstance(data, dict):
        return None
    return ParsedToolCall("", name, json.dumps(data, ensure_ascii=False))


#: family name → a new parser for one reply
PARSERS: dict[str, Callable[[], ToolCallParser]] = {
    "hermes": HermesParser,
    "llama3": LlamaParser,
    "mistral": lambda: MarkedParser(MISTRAL_OPEN, None, _mistral_calls),
    "phi4": Phi4Parser,
    "granite": lambda: MarkedParser(GRANITE_OPEN, None, _json_calls),
    "harmony": HarmonyParser,
}

#: family → the marker strings its calls use (special tokens in the family's vocabulary,
#: which decoding leaves out of the text: ``split_tool_calls`` puts them back)
MARKERS: dict[str, tuple[str, ...]] = {
    "hermes": (HERMES_OPEN, HERMES_CLOSE),
    "llama3": (LLAMA_TAG,),
    "mistral": (MISTRAL_OPEN, MISTRAL_ARGS),
    "phi4": (PHI_OPEN, PHI_CLOSE),
    "granite": (GRANITE_OPEN,),
    "harmony": (HARMONY_START, HARMONY_CHANNEL, HARMONY_CONSTRAIN, HARMONY_MESSAGE,
                HARMONY_CALL),
}


def tool_call_format(template_source: str | None) -> str | None:
    """The family whose calls this chat template asks for, or None (no tool-call format
    Hearth reads: the model is not offered tools). SmolLM3's template writes Hermes'
    ``<tool_call>`` JSON, so it is read as "hermes"."""
    source = template_source or ""
    if "tools" not in source:
        return None
    if HARMONY_CHANNEL in source and "functions." in source:
        return "harmony"
    if MISTRAL_OPEN in source or "[AVAILABLE_TOOLS]" in source:
        return "mistral"
    if "available_tools" in source and GRANITE_OPEN in source:
        return "granite"
    if "<|/tool|>" in source or PHI_OPEN in source:
        return "phi4"
    if HERMES_OPEN in source:
        return "hermes"
    if LLAMA_TAG in source or '"parameters": dictionary of argument name' in source:
        return "llama3"
    return None


def hidden_markers(family: str, tokenizer: Tokenizer) -> dict[int, str]:
    """The ids of ``family``'s markers that are special tokens (left out of decoded text)."""
    found = {}
    for marker in MARKERS.get(family, ()):
        token_id = tokenizer.token_to_id(marker)
        if token_id is not None and token_id in tokenizer.special_ids:
            found[token_id] = marker
    return found


# -- constrained calls (app/engine/grammar.py) -------------------------------------------


@dataclass(frozen=True)
class CallSyntax:
    """How a family writes one call, for the grammar that constrains it: ``open``, then a
    JSON call object (name key "name", arguments key ``arguments_key``; a JSON list of them
    when ``listed``), then ``close`` ("" when the reply just ends). ``separator``: between
    parallel calls (each with its own ``open``, unless ``listed``)."""

    open: str
    close: str
    arguments_key: str = "arguments"
    listed: bool = False
    separator: str = "\n"


#: family → its call syntax (families without one are parsed, not constrained; Harmony's
#: name sits in its header: :func:`harmony_grammar`)
SYNTAX: dict[str, CallSyntax] = {
    "hermes": CallSyntax(HERMES_OPEN, HERMES_CLOSE),
    "llama3": CallSyntax(LLAMA_TAG, "", "parameters", separator="; "),
    "mistral": CallSyntax(MISTRAL_OPEN, "", listed=True),
    "phi4": CallSyntax(PHI_OPEN, PHI_CLOSE, listed=True),
    "granite": CallSyntax(GRANITE_OPEN, "", listed=True),
}


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
    if choice == "none" or not tools:
        return None
    name = choice.removeprefix("function:") if choice.startswith("function:") else None
    if family == "harmony":
        return harmony_grammar(tools, name, auto=choice == "auto", tokenizer=tokenizer)
    syntax = SYNTAX.get(family)
    if syntax is None:
        return None
    schema = call_schema(tools, name, syntax.arguments_key)
    if syntax.listed:
        schema = {"type": "array", "items": schema, "minItems": 1,
                  **({} if parallel else {"maxItems": 1})}
        parallel = False  # the list holds them
    body = json_schema_lark(schema)
    open_ = lark_literal(syntax.open, tokenizer)
    close = f" {lark_literal(syntax.close, tokenizer)}" if syntax.close else ""
    sep = json.dumps(syntax.separator)
    more = f" (SEP {open_} rest)*" if parallel else ""
    ws = "NL? " if syntax.close else ""
    rules = "\n".join([f"rest: {ws}body {ws}{close.strip()}".rstrip(), f"body: {body}",
                       'NL: "\\n"', f"SEP: {sep}", ""])
    if choice == "auto":
        return Grammar("lark", f"start: rest{more}\n{rules}", trigger=syntax.open)
    return Grammar("lark", f"start: {open_} rest{more}\n{rules}")


def harmony_grammar(tools: Sequence[dict], name: str | None, *, auto: bool,
                    tokenizer: Tokenizer) -> Grammar:
    """gpt-oss: ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>``
    then the arguments (``<|call|>``, an end-of-sequence token, follows). "auto": after the
    model wrote ``to=functions.`` itself."""
    lit = partial(lark_literal, tokenizer=tokenizer)
    options = []
    for tool in tools:
        function = tool.get("function", tool)
        if name is not None and function.get("name") != name:
            continue
        parameters = function.get("parameters") or {"type": "object"}
        options.append(f"{json.dumps(function.get('name') + ' ')} {lit(HARMONY_CONSTRAIN)} "
                       f'"json" {lit(HARMONY_MESSAGE)} {json_schema_lark(parameters)}')
    if not options:
        raise ValueError(f"no tool named {name!r} is offered")
    rules = "call: " + "\n    | ".join(options) + "\n"
    if auto:
        return Grammar("lark", "start: call\n" + rules, trigger=HARMONY_RECIPIENT)
    head = f'{lit(HARMONY_CHANNEL)} "commentary {HARMONY_RECIPIENT}"'
    return Grammar("lark", f"start: {head} call\n" + rules)


def split_tool_calls(
    stream: Iterator[GenerationChunk], parser: ToolCallParser,
    hidden: dict[int, str] | None = None,
) -> Iterator[GenerationChunk]:
    """Pass ``stream`` through ``parser``: each chunk's ``text`` loses its call markup and
    the calls it completed go to ``tool_calls``; the last chunk flushes what was held.
    ``hidden``: marker token ids → their strings (:func:`hidden_markers`), fed to the
    parser where the token's text has none. A parser that ``observes`` (Harmony's) leaves
    the text as it is."""
    hidden = hidden or {}
    observes = getattr(parser, "observes", False)
    for chunk in stream:
        marker = hidden.get(chunk.token_id) if chunk.token_id is not None else None
        text, calls = parser.feed(chunk.text + marker if marker else chunk.text)
        if chunk.stats is not None:
            more, more_calls = parser.finish()
            text, calls = text + more, calls + more_calls
        if not observes:
            chunk.text = text
        if calls:
            chunk.tool_calls = chunk.tool_calls + tuple(calls)
        yield chunk
