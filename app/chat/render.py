"""Typed messages down to what a backend renders: the template's one switch on part type.

``prompt(messages, capabilities)`` gives the engine's plain ``Message`` list and the
template's ``documents`` (or None). Per part:

- ``Text`` → the message's content; ``Reasoning`` → ``Message.reasoning``;
- ``Attachment`` with text → a block before the message's text (the file put in whole);
- ``Source`` → where the backend's template reads ``documents`` (``capabilities.documents``),
  a document; otherwise a numbered block before the user's text. Sources stay on the user
  message they answered, so a follow-up turn renders them in the same place and the KV
  prefix stays warm;
- ``ToolCall`` → ``Message.tool_calls``; ``ToolResult`` → a "tool" message's content and
  ``tool_call_id`` (an error result says so);
- ``Image`` → refused with a sentence unless the backend has vision (no backend does yet:
  the image encoders are the next increment).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.chat.parts import (
    Attachment,
    ChatMessage,
    Image,
    Reasoning,
    Source,
    Text,
    ToolCall,
    ToolResult,
)
from app.engine.types import Capabilities, Message, ParsedToolCall
from app.errors import HearthError


def prompt(messages: Sequence[ChatMessage], capabilities: Capabilities,
           ) -> tuple[list[Message], list[dict] | None]:
    """The engine messages and the template's documents (None: sources went inline)."""
    native = capabilities.documents
    documents = [_document(s) for m in messages for s in m.of_kind(Source)] if native else None
    return ([to_message(m, inline_sources=not native, vision=capabilities.vision)
             for m in messages], documents or None)


def to_message(message: ChatMessage, *, inline_sources: bool = True,
               vision: bool = False) -> Message:
    """One typed message as the engine's plain-text ``Message``."""
    texts: list[str] = []
    context: list[str] = []
    reasoning: list[str] = []
    calls: list[ParsedToolCall] = []
    call_id: str | None = None
    sources = 0
    for part in message.parts:
        match part:
            case Text():
                texts.append(part.text)
            case Reasoning():
                reasoning.append(part.text)
            case Attachment():
                if part.text:
                    context.append(f"[File: {part.name}]\n{part.text}")
            case Source():
                if inline_sources:
                    sources += 1
                    context.append(_source_block(sources, part))
            case ToolCall():
                calls.append(ParsedToolCall(part.id, part.name, part.arguments))
            case ToolResult():
                texts.append(f"Error: {part.content}" if part.is_error else part.content)
                call_id = part.call_id
            case Image():
                if not vision:
                    raise HearthError(
                        f"This model cannot read images, and the message has one ({part.path}).",
                        hint="Remove the picture or choose a model that can see.")
            case _:
                raise TypeError(f"no template rendering for {type(part).__name__}")
    content = "".join(texts)
    if context:
        content = "\n\n".join([*context, content]) if content else "\n\n".join(context)
    return Message(message.role, content, "".join(reasoning), tuple(calls), call_id)


def _source_block(number: int, source: Source) -> str:
    where = f", {source.location}" if source.location else ""
    return f"[Source {number}: {source.document}{where}]\n{source.text}"


def _document(source: Source) -> dict:
    where = f" ({source.location})" if source.location else ""
    return {"title": f"{source.document}{where}", "text": source.text}
