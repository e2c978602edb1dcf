"""A turn with retrieval and a tool call through the real window and controller: the events
land in the chat model and the history, the call is put to the user, and the next turn's
prompt (built on the worker's side) carries the stored parts."""

from __future__ import annotations

import json

import pytest

from app.chat.parts import ChatMessage, Source, Text, ToolCall, ToolResult
from app.chat.turn import DENIED
from app.engine.types import Message, ParsedToolCall
from app.storage.transfer import export_json, import_json
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

SOURCE = Source("clock.md", "## Time", "The clock is on the wall.")
CALL = ToolCall("call_1", "get_time", "{}")


class Clock:
    def specs(self) -> list[dict]:
        return [{"type": "function", "function": {"name": "get_time", "parameters": {}}}]

    def call(self, call: ToolCall) -> ToolResult:
        return ToolResult(call.id, "09:15", name=call.name)


class Shelf:
    def search(self, query: str) -> list[Source]:
        return [SOURCE]


@pytest.fixture
def tool_app(make_app, model_dir):
    app = make_app(FakeLoader(tool_calls=[ParsedToolCall("call_1", "get_time", "{}")],
                              script=["It", " is", " 09:15."]))
    app.load(model_dir)
    app.controller.toolbox = Clock()
    app.controller.retriever = Shelf()
    return app


def test_an_allowed_tool_turn_is_stored_as_its_parts_and_round_trips(tool_app):
    app = tool_app
    asked: list = []
    app.controller.approval_requested.connect(
        lambda request: (asked.append(request.call), app.controller.answer_approval(True)))
    app.send("What time is it?")
    assert asked == [CALL]
    conv = app.controller.current_id
    stored = app.history.active_path(conv)
    result = ToolResult("call_1", "09:15", name="get_time")
    expected = [
        ChatMessage("user", (Text("What time is it?"), SOURCE)),
        ChatMessage("assistant", (CALL,)),
        ChatMessage("tool", (result,)),
        ChatMessage("assistant", (Text("It is 09:15."),)),
    ]
    assert [m.chat_message() for m in stored] == expected
    assert [m.status for m in stored] == ["complete"] * 4
    # the chat on screen is what was stored
    shown = app.controller.chat_model.messages()
    assert [m.chat_message() for m in shown] == expected
    assert stored[3].provenance["finish_reason"] == "eos"
    # export and import keep every part
    other = import_json(app.history, export_json(app.history, conv))
    assert [m.chat_message() for m in app.history.active_path(other.id)] == expected
    assert json.loads(export_json(app.history, conv))["parts_version"] == 1
    # the next turn's prompt carries the stored turn, as the template reads it
    app.send("Thanks")
    prompt = app.loader.last.calls[-1]
    assert prompt[:4] == [
        Message("user", "[Source 1: clock.md, ## Time]\nThe clock is on the wall.\n\n"
                        "What time is it?"),
        Message("assistant", "", tool_calls=(ParsedToolCall("call_1", "get_time", "{}"),)),
        Message("tool", "09:15", tool_call_id="call_1"),
        Message("assistant", "It is 09:15."),
    ]


def test_without_anyone_to_ask_a_call_is_refused(tool_app):
    app = tool_app  # nothing is connected to approval_requested (the window's bar is not)
    app.controller.approval_requested.disconnect(app.window.tools.on_approval_requested)
    app.send("What time is it?")
    stored = app.history.active_path(app.controller.current_id)
    assert stored[2].parts == (ToolResult("call_1", DENIED, is_error=True, name="get_time"),)
    assert app.loader.last.calls[1][-1] == Message("tool", f"Error: {DENIED}",
                                                   tool_call_id="call_1")
