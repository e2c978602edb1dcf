"""A generation request as the turn it asks for: the one place a chat becomes a prompt's
messages (plain Python, run on the generation worker's thread, never the UI's).

``build_turn(messages, settings, system_prompt=, conversation_id=, caches=)`` gives
``app.chat.turn.TurnRequest``: the system prompt (when it is not blank), then each message
as typed parts. The history's rows
(``StoredMessage``) are the path on screen above the reply being written; a reply that
failed, or has no text and no call (an empty reply, or one stopped while it thought), is
left out, and only an
assistant's thinking is kept (each template decides what it does with it: Qwen3's drops
it). A plain ``Message`` (the tests', a script's) is typed as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.chat.parts import ChatMessage, Reasoning, ToolCall
from app.chat.turn import TurnRequest
from app.engine.types import GenerationSettings, Message
from app.storage.records import StoredMessage


def build_turn(messages: Sequence[StoredMessage | ChatMessage | Message],
               settings: GenerationSettings, *, system_prompt: str = "",
               conversation_id: str | None = None, caches: Any = None) -> TurnRequest:
    typed: list[ChatMessage] = []
    if system_prompt.strip():
        typed.append(ChatMessage.of("system", system_prompt))
    for item in messages:
        message = turn_message(item)
        if message is not None:
            typed.append(message)
    return TurnRequest(tuple(typed), settings, conversation_id=conversation_id,
                       caches=caches)


def turn_message(item: StoredMessage | ChatMessage | Message) -> ChatMessage | None:
    """One message of the prompt, or None where it is left out (see the module)."""
    if isinstance(item, ChatMessage):
        return item
    if isinstance(item, Message):
        return ChatMessage.from_message(item)
    if item.role == "assistant" and (item.status == "failed" or not (
            item.content or any(isinstance(p, ToolCall) for p in item.parts))):
        return None
    typed = item.chat_message()
    if item.role != "assistant":
        typed = ChatMessage(typed.role, tuple(p for p in typed.parts
                                               if not isinstance(p, Reasoning)))
    return typed
