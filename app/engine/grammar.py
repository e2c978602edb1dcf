"""Constrained decoding: a grammar turns into a logits mask per step (llguidance).

A reply asked for structure (``GenerationSettings.grammar``, a ``Grammar``) gets one
:class:`GrammarMatcher`: before each token the sampler masks the logits with
:meth:`GrammarMatcher.mask` (tokens the grammar forbids get ``-inf``), and the decode loop
advances the matcher with :meth:`GrammarMatcher.accept` once the token is chosen. When the
grammar is complete only end-of-sequence is allowed, so the reply ends.

With speculation (app/engine/speculative.py) a draft is first cut at the first token the
grammar forbids (:meth:`GrammarMatcher.valid_prefix`, which does not advance the matcher);
the verify step then decides each position with the grammar's mask at that position, and
only the decided tokens are accepted, so nothing is ever rolled back and the reply is the
one a plain run writes, token for token.

Why llguidance (bench/bench_constrained.py measures it): on SmolLM2's 49k vocabulary a JSON
Schema compiles in about a millisecond and a mask takes microseconds; it is a Rust wheel
with no Python dependencies. xgrammar, the other well-kept choice, requires torch,
transformers and triton and imports torch at module level, which a desktop app cannot ship.

Whitespace is bounded: JSON is compiled with fixed separators (``", "`` and ``": "``) and no
free whitespace, so a model that likes spaces cannot fill max_tokens with them. Strings and
numbers are not, so a reply that nears its token budget is *closed*: in the last
:data:`closing_reserve` tokens, where the grammar allows end-of-sequence or a closing
character (``"``, ``}``, ``]``, then ``,``), only the first of those that it allows is kept.
A model that writes a string forever (a random-weight one does) still ends with valid JSON.

``Grammar.trigger`` (tool_choice "auto"): the reply is free text until it contains the
trigger (the family's tool-call start marker); from there the grammar, which describes what
follows the marker, constrains the rest.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from app.engine.types import Grammar
from app.errors import HearthError

if TYPE_CHECKING:
    from app.engine.tokenizer import Tokenizer

NEG_INF = np.float32(-np.inf)
#: JSON with fixed separators and no free whitespace (see the module's docstring)
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ",
                                "key_separator": ": "}


class GrammarError(HearthError, ValueError):
    """The grammar (a schema, a regex, …) cannot be compiled or the reply broke it."""


def _llg() -> Any:
    import llguidance  # a compiled wheel: loaded when a reply first asks for structure

    return llguidance


def compile_grammar(grammar: Grammar) -> str:
    """The llguidance grammar for ``grammar``; GrammarError with a sentence when it is not
    one (a malformed schema or regex)."""
    llg = _llg()
    try:
        if grammar.kind == "json_schema":
            schema = json.loads(grammar.source)
            text = llg.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
        elif grammar.kind == "json_object":
            text = llg.LLMatcher.grammar_from_json_schema({"type": "object"},
                                                          defaults=JSON_OPTIONS)
        elif grammar.kind == "regex":
            text = llg.LLMatcher.grammar_from_lark(
                "start: /" + llg.regex_to_lark(grammar.source, "dw") + "/")
        elif grammar.kind == "choice":
            choices = json.loads(grammar.source)
            if not choices or not all(isinstance(c, str) for c in choices):
                raise ValueError("a choice is a non-empty list of strings")
            text = llg.LLMatcher.grammar_from_lark(
                "start: " + " | ".join(json.dumps(c) for c in choices))
        elif grammar.kind == "lark":
            text = llg.LLMatcher.grammar_from_lark(grammar.source)
        else:
            raise ValueError(f"unknown grammar kind {grammar.kind!r}")
        if grammar.leading_newlines > 0:
            text = _after_newlines(text, grammar.leading_newlines)
        failed, messages = llg.LLMatcher.validate_grammar_with_warnings(text)
    except (ValueError, TypeError) as exc:
        raise GrammarError(f"The {grammar.kind} grammar cannot be compiled: {exc}") from None
    if failed:
        raise GrammarError(f"The {grammar.kind} grammar cannot be compiled: "
                           f"{_first_line(messages)}")
    return text


def _after_newlines(text: str, count: int) -> str:
    """``text`` (a compiled grammar: llguidance's JSON, or Lark source) after up to
    ``count`` newlines: a Lark start rule that references it as a sub-grammar."""
    if text.lstrip().startswith("{"):
        inner = json.loads(text)["grammars"]
    else:
        inner = [{"lark_grammar": text}]
    inner = [dict(inner[0], name="after_newlines"), *inner[1:]]
    lead = f"start: {'NL? ' * count}@after_newlines\nNL: \"\\n\""
    return json.dumps({"grammars": [{"lark_grammar": lead}, *inner]})


def json_schema_lark(schema: dict[str, Any]) -> str:
    """A ``%json`` block for a Lark grammar, with the bounded whitespace."""
    schema = dict(schema)
    schema["x-guidance"] = {**JSON_OPTIONS, **schema.get("x-guidance", {})}
    return "%json " + json.dumps(schema, ensure_ascii=False)


def lark_literal(text: str, tokenizer: Tokenizer) -> str:
    """``text`` in a Lark grammar: the special token itself where the vocabulary has it as
    one (``<tool_call>`` in Qwen's), else the quoted text."""
    token_id = tokenizer.token_to_id(text)
    if token_id is not None and token_id in tokenizer.special_ids:
        return f"<[{token_id}]>"
    return json.dumps(text)


def _first_line(warnings: Any) -> str:
    text = warnings if isinstance(warnings, str) else "; ".join(map(str, warnings or ()))
    return (text.strip().splitlines() or ["it is not a valid grammar"])[0]


# -- the tokenizer, once per model ------------------------------------------------------

_TOKENIZERS: dict[int, tuple[Any, Any]] = {}
_TOKENIZERS_LOCK = threading.Lock()


def grammar_tokenizer(tokenizer: Tokenizer, eos_ids: Sequence[int]) -> Any:
    """llguidance's view of ``tokenizer`` (built once per tokenizer and EOS set: about a
    second for a 49k vocabulary)."""
    key = hash((id(tokenizer), tuple(sorted(eos_ids))))
    with _TOKENIZERS_LOCK:
        held = _TOKENIZERS.get(key)
        if held is not None and held[0] is tokenizer:
            return held[1]
        llg_tok = _llg().LLTokenizer(tokenizer.inner.to_str(),
                                     n_vocab=tokenizer.vocab_size,
                                     eos_token=list(eos_ids) or None)
        _TOKENIZERS[key] = (tokenizer, llg_tok)
        return llg_tok


# -- one reply ---------------------------------------------------------------------------


#: the characters that close what is open, in the order a closing reply prefers them
CLOSERS = ('"', "}", "]", ",")


def closing_reserve(max_tokens: int, shortest: int = 0) -> int:
    """How many of a reply's last tokens are spent closing its structure: what the shortest
    document of the grammar takes (``shortest`` tokens), and some; at most 3/4 of the budget."""
    return min(max_tokens * 3 // 4, max(8, 2 * shortest + 8))


def shortest_instance(schema: Any, depth: int = 0) -> Any:
    """A small document of ``schema`` (required keys only, empty strings and arrays, the first
    enum value): what closing a reply must still write, at most."""
    if not isinstance(schema, dict) or depth > 16:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return shortest_instance(schema[key][0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0] if kind else None
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {k: shortest_instance(props.get(k, {}), depth + 1)
                for k in schema.get("required", [])}
    if kind == "array":
        count = int(schema.get("minItems", 0))
        return [shortest_instance(schema.get("items", {}), depth + 1)] * min(count, 8)
    if kind == "string":
        return "x" * min(int(schema.get("minLength", 0)), 64)
    return {"integer": 0, "number": 0, "boolean": False}.get(kind)


def _literals(grammar: Grammar) -> list[str]:
    """The quoted strings of a Lark grammar outside its ``%json`` blocks (its markers)."""
    if grammar.kind != "lark":
        return []
    source = grammar.source.split("%json ")[0]
    return [json.loads(m) for m in re.findall(r'"(?:[^"\\]|\\.)*"', source)]


def _schemas(grammar: Grammar) -> list[Any]:
    """The JSON Schemas in ``grammar`` (a schema itself, or a Lark grammar's ``%json``)."""
    if grammar.kind == "json_schema":
        try:
            return [json.loads(grammar.source)]
        except ValueError:
            return []
    found, decoder, at = [], json.JSONDecoder(), 0
    while grammar.kind == "lark" and (at := grammar.source.find("%json ", at)) != -1:
        try:
            schema, at = decoder.raw_decode(grammar.source, at + len("%json "))
        except ValueError:
            break
        found.append(schema)
    return found


class GrammarMatcher:
    """The grammar's state over one reply: ``mask(logits)`` before a token, ``accept(token)``
    after it. ``max_tokens``: the reply's budget, for closing in time (None: never)."""

    def __init__(self, grammar: Grammar, tokenizer: Tokenizer, eos_ids: Sequence[int],
                 max_tokens: int | None = None) -> None:
        self.grammar = grammar
        self._compiled = compile_grammar(grammar)
        self._tokenizer = tokenizer
        self._llg_tok = grammar_tokenizer(tokenizer, eos_ids)
        self._vocab = self._llg_tok.vocab_size
        self._words = np.zeros((self._vocab + 31) // 32, dtype=np.int32)
        self._bits32 = self._words.view(np.uint32)
        self._fresh = False  # whether _words holds the mask for the next token
        self._eos = tuple(eos_ids)
        self._matcher: Any = None
        self._text: list[int] = []  # tokens before the trigger (auto mode)
        self._accepted = 0
        shortest = sum(len(tokenizer.encode(json.dumps(shortest_instance(x), ensure_ascii=False,
                                                         separators=(", ", ": "))))
                       for x in _schemas(grammar))
        shortest += sum(len(tokenizer.encode(text)) for text in _literals(grammar))
        self._close_from = None if max_tokens is None else max_tokens - closing_reserve(
            max_tokens, shortest)
        closers = [tokenizer.token_to_id(c) for c in CLOSERS]  # byte-level BPE: as written
        self._closers: list[list[int]] = [list(self._eos)] + [[t] for t in closers
                                                              if t is not None]
        if grammar.trigger is None:
            self._start([])

    @property
    def active(self) -> bool:
        """Whether the grammar constrains the next token (auto mode: after the trigger)."""
        return self._matcher is not None

    def _start(self, leftover: list[int]) -> None:
        self._fresh = False
        self._matcher = _llg().LLMatcher(self._llg_tok, self._compiled, log_level=0)
        self._check()
        for token in leftover:
            self._matcher.consume_token(token)
            self._check()

    def _check(self) -> None:
        if self._matcher.is_error():
            raise GrammarError("The reply could not follow its grammar: "
                               f"{_first_line(self._matcher.get_error())}")

    def _compute(self) -> None:
        """The next token's bitmask into ``_words`` (once per token, however often asked)."""
        if not self._fresh:
            self._matcher.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
            self._check()
            self._fresh = True

    def _closing(self) -> bool:
        return self._close_from is not None and self._accepted >= self._close_from

    def allows(self, token: int) -> bool:
        """Whether the grammar allows ``token`` next; False while a reply is being closed
        (then only :meth:`mask` says which token). A greedy sampler whose best token is
        allowed needs no mask at all: the best allowed token is that one."""
        if self._matcher is None:
            return True
        if self._closing() or not 0 <= token < self._vocab:
            return False
        self._compute()
        return bool((int(self._bits32[token >> 5]) >> (token & 31)) & 1)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` with the forbidden tokens at ``-inf`` (a new array; unchanged while an
        auto grammar waits for its trigger)."""
        if self._matcher is None:
            return logits
        x = np.asarray(logits, dtype=np.float32).reshape(-1)
        self._compute()
        n = min(x.size, self._vocab)
        allowed = np.unpackbits(self._words.view(np.uint8), count=n,
                                bitorder="little").view(bool)
        if self._closing():
            for ids in self._closers:
                ids = [i for i in ids if i < n and allowed[i]]
                if ids:
                    out = np.full(x.size, NEG_INF, dtype=np.float32)
                    out[ids] = x[ids]
                    return out
        out = x.copy()  # the decoder may own ``logits``
        np.putmask(out[:n], ~allowed, NEG_INF)
        out[n:] = NEG_INF
        return out

    def fork(self) -> GrammarMatcher:
        """An independent copy in the same state (a draft model proposes under it without
        moving this one)."""
        twin = copy.copy(self)
        twin._matcher = None if self._matcher is None else self._matcher.deep_copy()
        twin._words = self._words.copy()
        twin._bits32 = twin._words.view(np.uint32)
        twin._text = list(self._text)
        return twin

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens``, from the next token on, the grammar allows in a row (the
        matcher is not advanced: llguidance's ``validate_tokens``). Speculation cuts a draft
        there, since the verify step could never accept a guess past it. Before an auto
        grammar's trigger every draft passes whole; in the closing tokens none does (only
        :meth:`mask` knows which closer comes); an end-of-sequence token the grammar stops
        at is kept (whether the JSON may end there is the verify step's call)."""
        if self._matcher is None:
            return len(tokens)
        n = len(tokens)
        if self._close_from is not None:
            n = min(n, max(0, self._close_from - self._accepted))
        n = next((i for i, t in enumerate(tokens[:n]) if not 0 <= t < self._vocab), n)
        if n == 0:
            return 0
        valid = int(self._matcher.validate_tokens([int(t) for t in tokens[:n]]))
        if valid < n and tokens[valid] in self._eos:
            valid += 1
        return valid

    def accept(self, token: int) -> None:
        """Advance past the chosen token."""
        self._accepted += 1
        self._fresh = False
        if self._matcher is not None:
            if token in self._eos and self._matcher.is_accepting():
                return
            self._matcher.consume_token(int(token))
            self._check()
            return
        self._text.append(int(token))
        trigger = self.grammar.trigger or ""
        text = self._tokenizer.decode(self._text[-64:], skip_special_tokens=False)
        if trigger in text:
            # what the tokens hold after the marker is the grammar's first input
            after = text[text.rfind(trigger) + len(trigger):]
            self._start(self._llg_tok.tokenize_str(after) if after else [])

    @property
    def accepting(self) -> bool:
        return self._matcher is not None and bool(self._matcher.is_accepting())
