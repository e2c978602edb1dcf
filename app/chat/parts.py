"""A chat message as typed parts, and its stable JSON form.

A ``ChatMessage`` has a role ("system", "user", "assistant" or "tool") and ``parts``:

- ``Text``: what the user typed or the model answered;
- ``Reasoning``: an assistant's thinking, kept apart from its answer;
- ``Image``: a picture, by the sha256 of its bytes (what a KV cache key must cover) and the
  file that holds them;
- ``Attachment``: a file the user attached (name, path, content hash; ``text`` where its
  text goes into the prompt whole);
- ``Source``: a passage a retriever found (document, location such as "page 3", the quoted
  text), attached to the user message it answers;
- ``ToolCall``: a call the model made (id, tool name, its JSON arguments as written);
- ``ToolResult``: what a tool answered (the call's id, content, whether it is an error, how
  long it ran).

Each concern switches on the part type in one place: the JSON form here (``PART_TYPES``,
``part_to_dict`` / ``part_from_dict``), the template in app/chat/render.py, storage in its
migration, the view in its part widget. A part is a frozen dataclass of plain scalars, so
its JSON form is its fields plus ``type``.
"""

from __future__ import annotations

import json
import math
import typing
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Literal

from app.engine.types import Message

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
#: the JSON form's version: storage and export write it, readers check it
PARTS_VERSION = 1


@dataclass(frozen=True)
class Text:
    kind: ClassVar[str] = "text"
    text: str


@dataclass(frozen=True)
class Reasoning:
    kind: ClassVar[str] = "reasoning"
    text: str


@dataclass(frozen=True)
class Image:
    kind: ClassVar[str] = "image"
    sha256: str  # of the file's bytes: two pictures behind the same placeholder differ here
    path: str
    mime: str = ""


@dataclass(frozen=True)
class Attachment:
    kind: ClassVar[str] = "attachment"
    name: str  # as the user sees it on the chip
    path: str
    sha256: str = ""
    mime: str = ""
    text: str = ""  # the file's text when it goes into the prompt whole; "" when retrieved from


@dataclass(frozen=True)
class Source:
    kind: ClassVar[str] = "source"
    document: str  # the file's name (or title)
    location: str  # "page 3", "## Install", "lines 10-24"; "" when the whole file
    text: str  # the quoted passage
    path: str = ""
    score: float | None = None


@dataclass(frozen=True)
class ToolCall:
    kind: ClassVar[str] = "tool_call"
    id: str
    name: str
    arguments: str  # JSON text as the model wrote it

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as an object; ValueError with a sentence when they are not one."""
        try:
            value = json.loads(self.arguments)
        except ValueError as exc:
            raise ValueError(f"The arguments of the call to {self.name} are not JSON "
                             f"({exc}).") from exc
        if not isinstance(value, dict):
            raise ValueError(f"The arguments of the call to {self.name} are not a JSON "
                             "object.")
        return value


@dataclass(frozen=True)
class ToolResult:
    kind: ClassVar[str] = "tool_result"
    call_id: str
    content: str
    is_error: bool = False
    name: str = ""  # the tool's name (templates such as Llama 3's show it)
    #: how long the call ran (ms; None: not run or not measured); not part of its identity
    duration_ms: float | None = field(default=None, compare=False)


Part = Text | Reasoning | Image | Attachment | Source | ToolCall | ToolResult
#: the JSON ``type`` of each part → its class: the one switch of the JSON form
PART_TYPES: dict[str, type] = {
    cls.kind: cls for cls in (Text, Reasoning, Image, Attachment, Source, ToolCall, ToolResult)
}


def part_to_dict(part: Part) -> dict[str, Any]:
    return {"type": part.kind, **asdict(part)}


def part_from_dict(data: Any) -> Part:
    """A part from its JSON form; ValueError with a sentence for anything else (an unknown
    type, a missing field, a field of the wrong JSON type such as a number for text)."""
    if not isinstance(data, dict):
        raise ValueError(f"A message part must be a JSON object, not {type(data).__name__}.")
    kind = data.get("type")
    cls = PART_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        known = ", ".join(sorted(PART_TYPES))
        raise ValueError(f"Unknown message part type {kind!r} (known: {known}).")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in data:
            value = data[f.name]
            if not _fits(hints[f.name], value):
                raise ValueError(f"The {cls.kind} part's {f.name!r} must be "
                                 f"{_WANTED.get(hints[f.name], 'a number or null')}.")
            values[f.name] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise ValueError(f"A {cls.kind} part lacks a field: {exc}.") from exc


_WANTED = {str: "text", bool: "true or false"}


def _fits(hint: Any, value: Any) -> bool:
    """Whether a JSON value fits a part field's type (parts hold only these scalars)."""
    if hint is str:
        return isinstance(value, str)
    if hint is bool:
        return isinstance(value, bool)
    # float | None: a finite number or null
    return value is None or (not isinstance(value, bool) and isinstance(value, (int, float))
                             and math.isfinite(value))


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    parts: tuple[Part, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Unknown message role {self.role!r}.")

    @classmethod
    def of(cls, role: Role, text: str = "", *more: Part) -> ChatMessage:
        """A message from text (left out when empty) and further parts."""
        parts: tuple[Part, ...] = (Text(text),) if text else ()
        return cls(role, parts + more)

    @property
    def text(self) -> str:
        """Its ``Text`` parts, joined."""
        return "".join(p.text for p in self.parts if isinstance(p, Text))

    def of_kind(self, cls: type) -> list[Any]:
        return [p for p in self.parts if isinstance(p, cls)]

    def with_parts(self, *more: Part) -> ChatMessage:
        return ChatMessage(self.role, self.parts + more)

    # -- the JSON form ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "parts": [part_to_dict(p) for p in self.parts]}

    @classmethod
    def from_dict(cls, data: Any) -> ChatMessage:
        if not isinstance(data, dict) or not isinstance(data.get("parts"), list):
            raise ValueError("A message must be a JSON object with a role and a list of parts.")
        return cls(data.get("role"), tuple(part_from_dict(p) for p in data["parts"]))

    # -- the engine's plain-text message -------------------------------------------------

    @classmethod
    def from_message(cls, message: Message) -> ChatMessage:
        """The typed form of an engine ``Message`` (a stored plain-text turn)."""
        parts: list[Part] = []
        if message.reasoning:
            parts.append(Reasoning(message.reasoning))
        if message.role == "tool":
            parts.append(ToolResult(message.tool_call_id or "", message.content))
        elif message.content:
            parts.append(Text(message.content))
        parts.extend(ToolCall(c.id, c.name, c.arguments) for c in message.tool_calls)
        return cls(message.role, tuple(parts))  # type: ignore[arg-type]
