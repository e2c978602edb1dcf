"""Reasoning apart from the answer, while the reply streams.

Reasoning models write their thinking before the answer: Qwen3, SmolLM3, Phi-4-mini-reasoning
and the DeepSeek-R1 distills between ``<think>`` and ``</think>``; gpt-oss in Harmony channels
(``<|channel|>analysis<|message|>…<|end|>`` then ``<|channel|>final<|message|>…``). A
:class:`ReasoningSplitter` routes the streamed text into ``GenerationChunk.reasoning`` and
``GenerationChunk.text``, and :func:`split_reasoning` wraps a chunk stream with one.

The markers come from the tokenizer's added tokens (their ids, when decoding leaves the
special ones out of the text) and from the chat template's source. Splitting works on text,
so a marker written over several tokens (``<``, ``think``, ``>``) is found as well: text
that could be the start of a marker is held back until it is known not to be one.

The per-chat "Think" switch (``GenerationSettings.thinking``) becomes what the template reads:
``enable_thinking`` (Qwen3, SmolLM3) or a ``/think`` / ``/no_think`` flag in the system prompt
(templates that only look for those flags); see :func:`thinking_control`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from app.engine.tokenizer import Tokenizer
from app.engine.types import GenerationChunk, Grammar, Message, ThinkingMode

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CHANNEL, MESSAGE, END, START = "<|channel|>", "<|message|>", "<|end|>", "<|start|>"
HARMONY_MARKERS = (CHANNEL, MESSAGE, END, START, "<|constrain|>")
FINAL_CHANNEL = "final"  # Harmony's answer; analysis and commentary are reasoning


@dataclass(frozen=True)
class ReasoningFormat:
    """How one model marks its reasoning.

    ``style`` is "think" or "harmony"; ``hidden_markers`` maps the ids of marker tokens that
    decoding leaves out of the text (special tokens) to their strings, so the splitter still
    sees them; ``starts_inside``: the prompt has opened a ``<think>`` block the reply must
    close (a template whose generation prompt ends in ``<think>``)."""

    style: Literal["think", "harmony"]
    hidden_markers: dict[int, str] = field(default_factory=dict)
    starts_inside: bool = False

    @property
    def markers(self) -> tuple[str, ...]:
        return (THINK_OPEN, THINK_CLOSE) if self.style == "think" else HARMONY_MARKERS

    def after_prompt(self, prompt_tail: str) -> ReasoningFormat:
        """This format for a reply to a prompt ending in ``prompt_tail`` (special tokens
        written out): inside reasoning when the prompt opened a ``<think>`` it did not close
        (DeepSeek-R1 distills; not Qwen3's empty ``<think></think>`` when thinking is off)."""
        inside = self.style == "think" and (
            prompt_tail.rfind(THINK_OPEN) > prompt_tail.rfind(THINK_CLOSE))
        return ReasoningFormat(self.style, self.hidden_markers, inside)


def grammar_after_reasoning(grammar: Grammar | None, fmt: ReasoningFormat | None,
                            prompt_tail: str, thinking: str) -> Grammar | None:
    """``grammar`` for a reply that may reason first: a ``<think>`` model whose reply will
    think (the prompt opened ``<think>``, or closed none and thinking is not "off") gets
    its grammar from ``</think>`` on, so the reasoning is free and the answer constrained.
    A grammar that already waits for a trigger (tool_choice "auto") is left as it is."""
    if grammar is None or grammar.trigger is not None or fmt is None or fmt.style != "think":
        return grammar
    opened, closed = prompt_tail.rfind(THINK_OPEN), prompt_tail.rfind(THINK_CLOSE)
    if opened > closed or (closed == -1 and thinking != "off"):
        # the blank line a thinking model writes after ``</think>`` (Qwen3: "\n\n")
        return replace(grammar, trigger=THINK_CLOSE, leading_newlines=2)
    return grammar


def reasoning_format(tokenizer: Tokenizer, template_source: str | None) -> ReasoningFormat | None:
    """The model's reasoning markers, or None when it has none (its replies pass unchanged).

    Harmony when the tokenizer has ``<|channel|>`` and ``<|message|>`` tokens; ``<think>``
    when it has ``<think>`` / ``</think>`` tokens or its template writes them."""
    source = template_source or ""
    if tokenizer.token_to_id(CHANNEL) is not None and tokenizer.token_to_id(MESSAGE) is not None:
        style: Literal["think", "harmony"] = "harmony"
    elif (tokenizer.token_to_id(THINK_OPEN) is not None
          and tokenizer.token_to_id(THINK_CLOSE) is not None) or THINK_CLOSE in source:
        style = "think"
    else:
        return None
    fmt = ReasoningFormat(style)
    hidden = {}
    for marker in fmt.markers:
        token_id = tokenizer.token_to_id(marker)
        if token_id is not None and token_id in tokenizer.special_ids:
            hidden[token_id] = marker
    return ReasoningFormat(style, hidden)


class ReasoningSplitter:
    """Routes streamed text into (answer, reasoning) pieces.

    ``feed(text, token_id)`` takes one chunk's text and token; ``finish()`` flushes what was
    held back. A reasoning block that never closes stays reasoning to the end."""

    def __init__(self, fmt: ReasoningFormat) -> None:
        self._fmt = fmt
        self._markers = fmt.markers
        self._pending = ""
        self.reasoning = fmt.starts_inside
        """Whether text now goes to reasoning."""
        # Harmony: "content" (routing by channel), "role" (after <|start|>, until a channel),
        # "channel" (the channel name, until <|message|>), "idle" (after <|end|>).
        self._state = "content"
        self._header = ""
        self._trim = fmt.starts_inside  # drop whitespace right after a marker

    @property
    def holding(self) -> bool:
        """Whether text is held back because it may begin a marker, or belongs to a Harmony
        header whose channel is not known yet."""
        return bool(self._pending) or self._state in ("role", "channel")

    def feed(self, text: str, token_id: int | None = None) -> tuple[str, str]:
        """The answer and reasoning text of one more chunk."""
        self._pending += text
        marker = self._fmt.hidden_markers.get(token_id) if token_id is not None else None
        if marker is not None:
            self._pending += marker
        return self._drain(final=False)

    def finish(self) -> tuple[str, str]:
        """Everything still held back (text that turned out not to be a marker)."""
        answer, reasoning = self._drain(final=True)
        if self._state in ("role", "channel") and self._header.strip():
            answer += self._header  # a header that never led to a message was plain text
        self._header, self._state = "", "content"
        return answer, reasoning

    def _drain(self, *, final: bool) -> tuple[str, str]:
        answer: list[str] = []
        reasoning: list[str] = []
        buf = self._pending
        while buf:
            pos, marker = self._next_marker(buf)
            if marker is None:
                keep = 0 if final else self._partial_marker(buf)
                self._emit(buf[: len(buf) - keep], answer, reasoning)
                buf = buf[len(buf) - keep:]
                break
            self._emit(buf[:pos], answer, reasoning)
            self._on_marker(marker)
            buf = buf[pos + len(marker):]
        self._pending = buf
        return "".join(answer), "".join(reasoning)

    def _next_marker(self, buf: str) -> tuple[int, str | None]:
        best, found = len(buf), None
        for marker in self._markers:
            pos = buf.find(marker)
            if pos != -1 and pos < best:
                best, found = pos, marker
        return best, found

    def _partial_marker(self, buf: str) -> int:
        """Length of the longest end of ``buf`` that begins a marker."""
        longest = 0
        for marker in self._markers:
            for size in range(min(len(marker) - 1, len(buf)), longest, -1):
                if buf.endswith(marker[:size]):
                    longest = size
                    break
        return longest

    def _emit(self, text: str, answer: list[str], reasoning: list[str]) -> None:
        if not text:
            return
        if self._state != "content":
            self._header += text
            return
        if self._trim:
            text = text.lstrip()
            if not text:
                return
            self._trim = False
        (reasoning if self.reasoning else answer).append(text)

    def _on_marker(self, marker: str) -> None:
        if marker == THINK_OPEN:
            self.reasoning, self._trim = True, True
        elif marker == THINK_CLOSE:
            self.reasoning, self._trim = False, True
        elif marker == START:
            self._state, self._header = "role", ""
        elif marker == CHANNEL:
            self._state, self._header = "channel", ""
        elif marker == MESSAGE:
            if self._state == "channel":
                name = self._header.strip().split()[0] if self._header.strip() else ""
                self.reasoning = name != FINAL_CHANNEL
            self._state, self._header, self._trim = "content", "", False
        elif marker == END:
            self._state, self._header = "idle", ""
        # <|constrain|> (a tool call's format) only belongs to the header it appears in


def split_reasoning(
    stream: Iterator[GenerationChunk], splitter: ReasoningSplitter
) -> Iterator[GenerationChunk]:
    """Pass ``stream`` through ``splitter``: each chunk's text is divided into ``text`` and
    ``reasoning``; the final stats count ``reasoning_tokens`` (tokens generated while the
    model was reasoning, its markers included) and ``reasoning_ms`` (from the first such
    token to the one that ended the reasoning, or to the end of the reply)."""
    tokens = 0
    started: float | None = None
    ended: float | None = None
    # Tokens whose text is held back (a marker may be starting) are counted once the
    # splitter knows where their text went.
    undecided = 0
    undecided_from_reasoning = False
    for chunk in stream:
        before = splitter.reasoning
        answer, thought = splitter.feed(chunk.text, chunk.token_id)
        if chunk.stats is not None:  # the last chunk: flush what was held back
            more_answer, more_thought = splitter.finish()
            answer, thought = answer + more_answer, thought + more_thought
        if chunk.token_id is not None:
            if not undecided:
                undecided_from_reasoning = before
            undecided += 1
        if undecided and not splitter.holding:
            if undecided_from_reasoning or splitter.reasoning or thought:
                tokens += undecided
                now = time.perf_counter()
                if started is None:
                    started = now
                ended = None if splitter.reasoning else now
            undecided = 0
        if chunk.stats is not None:
            chunk.stats.reasoning_tokens = tokens
            if started is not None:
                chunk.stats.reasoning_ms = ((ended or time.perf_counter()) - started) * 1000
        chunk.text, chunk.reasoning = answer, thought
        yield chunk


def split_inline_think(stream: Iterator[GenerationChunk]) -> Iterator[GenerationChunk]:
    """Take ``<think>…</think>`` out of ``text`` for a backend whose server may write it
    inline (remote engines: several servers stream the tags inside ``content``). Reasoning
    the stream carries already (``reasoning_content``) stays; answer and reasoning are never
    in one chunk. The last chunk's ``reasoning_ms`` is set when the tags were seen (from the
    first thinking text to the first answer text after it, or to the end)."""
    splitter = ReasoningSplitter(ReasoningFormat("think"))
    started: float | None = None
    ended: float | None = None
    for chunk in stream:
        answer, thought = splitter.feed(chunk.text)
        last = chunk.stats is not None or chunk.finish_reason is not None
        if last:
            more_answer, more_thought = splitter.finish()
            answer, thought = answer + more_answer, thought + more_thought
        now = time.perf_counter()
        if thought and started is None:
            started = now
        if started is not None and ended is None and answer:
            ended = now
        if last and started is not None and chunk.stats is not None:
            chunk.stats.reasoning_ms = max(chunk.stats.reasoning_ms,
                                           ((ended or now) - started) * 1000)
        thought = chunk.reasoning + thought
        if thought and answer:
            yield GenerationChunk("", reasoning=thought)
            thought = ""
        if not (answer or thought or last or chunk.tool_calls):
            continue  # all of it was a marker, or held back as a possible one
        chunk.text, chunk.reasoning = answer, thought
        yield chunk


# -- the "Think" switch -------------------------------------------------------------------

ThinkingControl = Literal["enable_thinking", "flags"]


def thinking_control(template_source: str | None) -> ThinkingControl | None:
    """How a template lets the user switch thinking, read from its source: the
    ``enable_thinking`` variable (Qwen3, SmolLM3), the ``/think`` / ``/no_think`` system
    flags, or None (the model cannot be switched)."""
    source = template_source or ""
    if "enable_thinking" in source:
        return "enable_thinking"
    if "/no_think" in source:
        return "flags"
    return None


def apply_thinking(
    mode: ThinkingMode, control: ThinkingControl | None, messages: Sequence[Message]
) -> tuple[list[Message], dict[str, bool]]:
    """The messages and template variables that ask the model for ``mode``. "default" (or
    a template without a switch) changes nothing."""
    messages = list(messages)
    if mode == "default" or control is None:
        return messages, {}
    if control == "enable_thinking":
        return messages, {"enable_thinking": mode == "on"}
    flag = "/think" if mode == "on" else "/no_think"
    if messages and messages[0].role == "system":
        first = messages[0]
        content = f"{first.content.rstrip()}\n{flag}" if first.content.strip() else flag
        messages[0] = Message("system", content)
    else:
        messages.insert(0, Message("system", flag))
    return messages, {}
