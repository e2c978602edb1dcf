"""Typed parts: the JSON form, the engine's plain message and the template rendering."""

from __future__ import annotations

import json

import pytest

from app.chat.parts import (
    PART_TYPES,
    Attachment,
    ChatMessage,
    Image,
    Reasoning,
    Source,
    Text,
    ToolCall,
    ToolResult,
    part_from_dict,
)
from app.chat.render import prompt, to_message
from app.engine.types import Capabilities, Message, ParsedToolCall
from app.errors import HearthError

#: one of each part type: a new type must be added here (the next test checks)
EXAMPLES = [
    Text("Hello, wörld"),
    Reasoning("Let me think."),
    Image("ab" * 32, "/pics/cat.png", "image/png"),
    Attachment("notes.md", "/docs/notes.md", "cd" * 32, "text/markdown", "# Notes\nhi"),
    Source("manual.pdf", "page 3", "Press the red button.", "/docs/manual.pdf", 0.5),
    ToolCall("call_1", "get_time", '{"tz": "UTC"}'),
    ToolResult("call_1", "12:00", is_error=False, name="get_time"),
]


def test_every_part_type_has_an_example():
    assert sorted(p.kind for p in EXAMPLES) == sorted(PART_TYPES)


@pytest.mark.parametrize("part", EXAMPLES, ids=lambda p: p.kind)
def test_each_part_survives_its_json_form(part):
    message = ChatMessage("user", (part,))
    data = json.loads(json.dumps(message.to_dict()))
    assert data["parts"][0]["type"] == part.kind
    assert ChatMessage.from_dict(data) == message


def test_the_json_form_is_stable():
    assert ChatMessage("assistant", (Text("Hi"), ToolCall("c", "f", "{}"))).to_dict() == {
        "role": "assistant",
        "parts": [{"type": "text", "text": "Hi"},
                  {"type": "tool_call", "id": "c", "name": "f", "arguments": "{}"}]}


@pytest.mark.parametrize("data, says", [
    ({"type": "audio", "path": "x.wav"}, "Unknown message part type 'audio'"),
    ({"type": "text"}, "A text part lacks a field"),
    (["text"], "must be a JSON object"),
])
def test_bad_parts_get_a_sentence(data, says):
    with pytest.raises(ValueError, match=says):
        part_from_dict(data)


def test_unknown_roles_are_refused():
    with pytest.raises(ValueError, match="Unknown message role 'robot'"):
        ChatMessage("robot", ())  # type: ignore[arg-type]


@pytest.mark.parametrize("message", [
    Message("user", "hi"),
    Message("assistant", "Sure.", reasoning="They greeted me."),
    Message("assistant", "", tool_calls=(ParsedToolCall("c1", "f", '{"a": 1}'),)),
    Message("tool", '{"ok": true}', tool_call_id="c1"),
    Message("system", "Be brief."),
])
def test_an_engine_message_comes_back_the_same_through_its_typed_form(message):
    assert to_message(ChatMessage.from_message(message)) == message


def test_sources_and_attachments_are_written_before_the_question():
    message = ChatMessage.of("user", "How do I stop it?",
                             Attachment("notes.md", "/n.md", text="# Notes"),
                             Source("manual.pdf", "page 3", "Press the red button."),
                             Source("faq.md", "", "Unplug it."))
    assert to_message(message) == Message("user", (
        "[File: notes.md]\n# Notes\n\n[Source 1: manual.pdf, page 3]\nPress the red button."
        "\n\n[Source 2: faq.md]\nUnplug it.\n\nHow do I stop it?"))


def test_a_template_that_reads_documents_gets_them_instead():
    question = ChatMessage.of("user", "How?", Source("manual.pdf", "page 3", "Press it."))
    messages, documents = prompt([question], Capabilities(documents=True))
    assert messages == [Message("user", "How?")]
    assert documents == [{"title": "manual.pdf (page 3)", "text": "Press it."}]
    assert prompt([question], Capabilities())[1] is None


def test_an_error_result_says_so_to_the_model():
    result = ChatMessage("tool", (ToolResult("c1", "no such city", is_error=True),))
    assert to_message(result) == Message("tool", "Error: no such city", tool_call_id="c1")


def test_a_model_without_vision_refuses_an_image_with_a_sentence():
    message = ChatMessage.of("user", "What is this?", Image("ab" * 32, "/pics/cat.png"))
    with pytest.raises(HearthError, match=r"cannot read images.*/pics/cat.png"):
        prompt([message], Capabilities())


def test_tool_call_arguments_parse_or_say_why_not():
    assert ToolCall("c", "f", '{"a": 1}').parsed_arguments() == {"a": 1}
    with pytest.raises(ValueError, match="call to f are not JSON"):
        ToolCall("c", "f", "{nope").parsed_arguments()
    with pytest.raises(ValueError, match="not a JSON object"):
        ToolCall("c", "f", "[1]").parsed_arguments()


def test_the_template_reads_calls_as_transformers_writes_them():
    call = ParsedToolCall("c1", "f", '{"a": 1}')
    assert Message("assistant", "", tool_calls=(call,)).as_dict() == {
        "role": "assistant", "content": "",
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "f", "arguments": {"a": 1}}}]}
    broken = ParsedToolCall("c2", "f", "{nope")
    assert broken.template_dict()["function"]["arguments"] == "{nope"
