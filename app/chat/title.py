"""A chat's title, written by the loaded model from the chat's first exchange.

``generate_title(backend, question, answer, cancel=)`` asks the backend for a few words
(greedy, at most ``TITLE_MAX_TOKENS`` tokens, thinking off, on the backend's own cache so
no conversation's cache is touched) and returns them cleaned by ``clean_title``: one line,
no quotes, no Markdown, no "Title:" label, no end punctuation, at most ``TITLE_MAX_CHARS``
characters; "" when the model gave nothing usable or ``cancel`` was set. It runs on the
thread that owns the backend (the generation worker's, between replies); whoever stores
the title decides whether it may replace the one the chat has (app/ui/controller.py: never
one the user wrote) and clamps it to the storage's limit (app/storage/records.py).
"""

from __future__ import annotations

import re
import threading

from app.chat.backend import Backend
from app.engine.types import GenerationSettings, Message, SamplingSettings

#: the most tokens a title may take (a handful of words)
TITLE_MAX_TOKENS = 12
#: the longest title kept (longer ones are cut at a word and end in "…")
TITLE_MAX_CHARS = 60
#: how much of the question and of the answer the model reads (the start says enough)
EXCERPT_CHARS = 600

INSTRUCTION = (
    "You give chats short titles. Reply with a title of two to six words for the "
    "conversation the user shows you, in its language. Only the title: no quotes, no "
    "punctuation at the end, no explanation."
)

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_LABEL = re.compile(r"^(chat\s+)?title\s*[:：\-–—]\s*", re.IGNORECASE)
_MARKUP = re.compile(r"[*_`~#>|\[\]]+|<[^>]{0,40}>")
_QUOTES = "\"'“”„‟‘’‚‛«»‹›「」『』"
_END = ".,;:!?。、…-–— "


def title_messages(question: str, answer: str) -> list[Message]:
    """The prompt: the instruction, then the start of the first question and answer."""
    shown = (f"Question: {_excerpt(question)}\n\nAnswer: {_excerpt(answer)}\n\n"
             "Title of this conversation:")
    return [Message("system", INSTRUCTION), Message("user", shown)]


def title_settings() -> GenerationSettings:
    """Greedy, short, no thinking, no speculation: a title costs a handful of steps."""
    return GenerationSettings(sampling=SamplingSettings(temperature=0.0),
                              max_new_tokens=TITLE_MAX_TOKENS, thinking="off",
                              speculation="off")


def generate_title(backend: Backend, question: str, answer: str, *,
                   cancel: threading.Event | None = None) -> str:
    """The model's title for the exchange (see the module), or ""."""
    cancel = cancel or threading.Event()
    if cancel.is_set():
        return ""
    pieces: list[str] = []
    for chunk in backend.chat(title_messages(question, answer), title_settings(),
                              cancel=cancel, reuse=False):
        pieces.append(chunk.text)
    if cancel.is_set():
        return ""
    return clean_title("".join(pieces))


def clean_title(raw: str) -> str:
    """``raw`` as a title: its first line with words, without thinking, Markdown, quotes, a
    "Title:" label or end punctuation, whitespace collapsed, at most TITLE_MAX_CHARS
    characters (cut at a word, ending in "…"). "" when nothing is left."""
    text = _THINK.sub("", raw)
    line = ""
    for candidate in text.splitlines():
        candidate = _MARKUP.sub("", candidate)
        candidate = _LABEL.sub("", candidate.strip())
        if any(ch.isalnum() for ch in candidate):
            line = candidate
            break
    line = " ".join(line.split())
    previous = None
    while line != previous:  # quotes inside labels inside quotes …
        previous = line
        line = _LABEL.sub("", line.strip().strip(_QUOTES).rstrip(_END).strip())
    if not any(ch.isalnum() for ch in line):
        return ""
    if len(line) > TITLE_MAX_CHARS:
        cut = line[: TITLE_MAX_CHARS - 1]
        if " " in cut:
            cut = cut[: cut.rindex(" ")]
        line = cut.rstrip(_END) + "…"
    return line


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


__all__ = ["TITLE_MAX_CHARS", "TITLE_MAX_TOKENS", "clean_title", "generate_title",
           "title_messages", "title_settings"]
