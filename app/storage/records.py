"""The values the history hands out, and tolerant decoding of the rows they come from.

A row that cannot be read as written (invalid UTF-8 in a text column, JSON that does not
parse, a number stored as text, a time no calendar can show such as ``1e18`` or ``-1e15``,
a duration that is negative or infinite) must not stop the app from starting: its fields fall
back to empty values (a time to 0, the epoch) and the record is flagged ``damaged`` so the UI
can say so.

This module owns the ranges a stored value may take (``TIME_MIN`` .. ``TIME_MAX``,
``DURATION_MAX_MS``, ``TITLE_LIMIT``); the importer refuses a file outside them.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from app.chat.parts import ChatMessage, Part, Reasoning, Text, part_from_dict

#: the times the history holds: seconds since 1970-01-01 UTC, up to the year 3000 (the
#: range every platform's ``date.fromtimestamp`` can show, Windows' included)
TIME_MIN = 0.0
TIME_MAX = 32_503_680_000.0
#: the longest duration a message may record (a reasoning model's thinking): 30 days, in ms
DURATION_MAX_MS = 30 * 24 * 3600 * 1000.0
#: the longest title a chat keeps (longer ones end in "…" when stored and when read)
TITLE_LIMIT = 300


def clamp_title(title: str) -> str:
    """``title`` cut to ``TITLE_LIMIT`` characters, its last one "…" when it was cut."""
    if len(title) <= TITLE_LIMIT:
        return title
    return title[: TITLE_LIMIT - 1].rstrip() + "…"


def valid_time(value: Any) -> bool:
    """Whether ``value`` is a number the history may hold as a time (see ``TIME_MAX``)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and TIME_MIN <= value <= TIME_MAX)  # NaN fails both comparisons


def valid_duration(value: Any) -> bool:
    """Whether ``value`` is a number of milliseconds the history may hold."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and 0 <= value <= DURATION_MAX_MS)


@dataclass
class Conversation:
    """One chat. ``damaged``: some of it could not be read (see ``History.get_conversation``)."""

    id: str
    title: str
    created_at: float
    updated_at: float
    system_prompt: str = ""
    settings: dict = field(default_factory=dict)
    model_id: str | None = None
    damaged: bool = False
    pinned: bool = False  # shown at the top of the sidebar


@dataclass
class StoredMessage:
    """One message of a conversation's tree.

    ``position`` is the message's depth in the tree, which for the messages of
    ``History.active_path`` is their index on screen. ``parent_id`` is the message it follows
    (None for the first turn). Its siblings (the messages with the same parent, oldest first,
    ``variant_ids``) are its variants: it is number ``variant_index`` (0-based) of
    ``variant_count``; the UI shows ``‹ variant_index + 1 / variant_count ›`` when the count
    is above one, and ``History.switch_variant(id, i)`` shows another. ``active``: it is the
    variant its parent shows.
    """

    id: int
    conversation_id: str
    position: int
    role: str
    content: str
    status: str = "complete"
    provenance: dict = field(default_factory=dict)
    created_at: float = 0.0
    parent_id: int | None = None
    variant_index: int = 0
    variant_count: int = 1
    variant_ids: tuple[int, ...] = ()
    active: bool = True
    damaged: bool = False
    reasoning: str = ""  # a reasoning model's thinking, never part of ``content``
    reasoning_ms: float = 0.0  # how long it thought (0 = not measured)
    #: every part besides its text and thinking (``content`` / ``reasoning``), in order:
    #: attachments, images, sources, tool calls, a tool message's result
    #: (app/chat/parts.py; table ``message_parts``, migration m008)
    parts: tuple[Part, ...] = ()

    def chat_message(self) -> ChatMessage:
        """The message as typed parts: its thinking, its text, then its other parts."""
        head: list[Part] = []
        if self.reasoning:
            head.append(Reasoning(self.reasoning))
        if self.content:
            head.append(Text(self.content))
        return ChatMessage(self.role, (*head, *self.parts))  # type: ignore[arg-type]


class DamagedText(str):
    """Text read from a column that did not hold valid UTF-8 (shown with U+FFFD)."""


def decode_text(raw: bytes) -> str:
    """The connection's ``text_factory``: never raises, marks what it had to repair."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return DamagedText(raw.decode("utf-8", "replace"))


def install_text_factory(conn: sqlite3.Connection) -> None:
    conn.text_factory = decode_text


class _Reader:
    """Reads one row's fields, remembering whether any needed repair."""

    def __init__(self, row: sqlite3.Row) -> None:
        self.row = row
        self.damaged = False

    def text(self, key: str, default: str = "") -> str:
        value = self._get(key)
        if isinstance(value, DamagedText):
            self.damaged = True
            return str(value)
        if isinstance(value, str):
            return value
        if isinstance(value, bytes):
            self.damaged = True
            return value.decode("utf-8", "replace")
        if value is not None:
            self.damaged = True
        return default

    def optional_text(self, key: str) -> str | None:
        return None if self._get(key) is None else self.text(key)

    def number(self, key: str) -> float:
        value = self._get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
        self.damaged = True
        return 0.0

    def time(self, key: str) -> float:
        """A time in seconds; one outside ``TIME_MIN`` .. ``TIME_MAX`` reads as 0, damaged."""
        value = self.number(key)
        if valid_time(value):
            return value
        self.damaged = True
        return 0.0

    def duration(self, key: str) -> float:
        """Milliseconds; a negative or over-long duration reads as 0 (not measured), damaged."""
        value = self.number(key)
        if valid_duration(value):
            return value
        self.damaged = True
        return 0.0

    def json_object(self, key: str) -> dict:
        raw = self.text(key, "{}")
        try:
            value = json.loads(raw or "{}")
        except (ValueError, RecursionError):
            self.damaged = True
            return {}
        if not isinstance(value, dict):
            self.damaged = True
            return {}
        return value

    def _get(self, key: str) -> Any:
        try:
            return self.row[key]
        except (IndexError, KeyError):
            self.damaged = True
            return None


def conversation_from_row(row: sqlite3.Row) -> Conversation:
    r = _Reader(row)
    conv = Conversation(
        id=r.text("id"),
        title=clamp_title(r.text("title")),
        created_at=r.time("created_at"),
        updated_at=r.time("updated_at"),
        system_prompt=r.text("system_prompt"),
        settings=r.json_object("settings"),
        model_id=r.optional_text("model_id"),
        pinned=bool(r.number("pinned")),
    )
    conv.damaged = r.damaged
    return conv


def message_from_row(row: sqlite3.Row, parts: list[sqlite3.Row] | None = None,
                     **tree_fields: Any) -> StoredMessage:
    """A message from its row and its ``message_parts`` rows (in order); ``tree_fields``
    (position, parent_id, variants) from the tree. A part that does not read as a part
    (its JSON broken, an unknown type: a newer Hearth's) is left out and the message is
    flagged damaged."""
    r = _Reader(row)
    msg = StoredMessage(
        id=int(row["id"]),
        conversation_id=r.text("conversation_id"),
        position=tree_fields.pop("position", 0),
        role=r.text("role", "user"),
        content=r.text("content"),
        status=r.text("status", "complete"),
        provenance=r.json_object("provenance"),
        created_at=r.time("created_at"),
        reasoning=r.text("reasoning"),
        reasoning_ms=r.duration("reasoning_ms"),
        parts=tuple(_parts(r, parts or [])),
        **tree_fields,
    )
    msg.damaged = r.damaged
    return msg


def _parts(reader: _Reader, rows: list[sqlite3.Row]) -> list[Part]:
    found: list[Part] = []
    for row in rows:
        part_reader = _Reader(row)
        data = part_reader.json_object("data")
        try:
            part = part_from_dict(data)
        except ValueError:
            reader.damaged = True
            continue
        if part_reader.damaged or isinstance(part, (Text, Reasoning)):
            reader.damaged = True
            if isinstance(part, (Text, Reasoning)):
                continue
        found.append(part)
    return found
