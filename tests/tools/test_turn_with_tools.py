"""End to end: run_turn with a scripted backend that asks for a tool → McpToolbox → the real
mcp-server-time → ToolResult → the backend's next round reads the tool message. And consent:
Allow once, Always allow this tool (kept on disk), Deny (the call does not run; the model
reads the refusal)."""

from __future__ import annotations

import json

import pytest

from app.chat.events import Finished, ToolResultEvent
from app.chat.parts import ChatMessage
from app.chat.turn import DENIED, TurnRequest, run_turn
from app.engine.types import ParsedToolCall
from app.tools.consent import AlwaysAllowed, ApprovalPolicy, Decision
from app.tools.selection import ChatTools
from app.tools.toolbox import McpToolbox
from tests.chat.test_turn import GREEDY, Scripted
from tests.tools.conftest import flaky_server, time_server

ASK_TIME = ChatMessage.of("user", "What time is it in Tokyo?")


@pytest.fixture(scope="module")
def toolbox():
    box = McpToolbox([time_server(), flaky_server()])
    yield box
    box.close()


def test_a_scripted_model_calls_the_real_time_server_and_reads_its_answer(toolbox):
    backend = Scripted([("Let me check.", [ParsedToolCall("", "get_current_time",
                                                          '{"timezone": "Asia/Tokyo"}')]),
                        ("It is evening in Tokyo.", [])])
    events = list(run_turn(backend, TurnRequest((ASK_TIME,), GREEDY), toolbox=toolbox,
                           approve=lambda call: True))
    offered = {spec["function"]["name"] for spec in backend.offered[0]}
    assert {"get_current_time", "convert_time", "echo"} <= offered
    result = next(e.result for e in events if isinstance(e, ToolResultEvent))
    assert not result.is_error
    assert json.loads(result.content)["timezone"] == "Asia/Tokyo"
    tool_message = backend.seen[1][-1]  # what the model reads in its second round
    assert tool_message.role == "tool"
    assert tool_message.tool_call_id == result.call_id
    assert json.loads(tool_message.content)["timezone"] == "Asia/Tokyo"
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.rounds == 2
    assert [m.role for m in finished.turn] == ["user", "assistant", "tool", "assistant"]


def touch_call(path) -> ParsedToolCall:
    return ParsedToolCall("", "touch", json.dumps({"path": str(path)}))


def test_a_denied_call_does_not_run_and_the_model_reads_the_refusal(toolbox, tmp_path):
    target = tmp_path / "ran.txt"
    backend = Scripted([("", [touch_call(target)]), ("I was not allowed.", [])])
    asked = []
    policy = ApprovalPolicy(lambda call, tool: asked.append(tool.key) or Decision.DENY,
                            toolbox.resolve, AlwaysAllowed(tmp_path / "approvals.json"))
    events = list(run_turn(backend, TurnRequest((ASK_TIME,), GREEDY), toolbox=toolbox,
                           approve=policy))
    result = next(e.result for e in events if isinstance(e, ToolResultEvent))
    assert asked == ["flaky/touch"]
    assert (result.is_error, result.content) == (True, DENIED)
    assert not target.exists()
    assert backend.seen[1][-1].content.endswith(DENIED)  # render marks errors ("Error: …")


def test_allow_once_runs_and_asks_again_next_time(toolbox, tmp_path):
    asked = []
    policy = ApprovalPolicy(lambda call, tool: asked.append(call.id) or Decision.ALLOW_ONCE,
                            toolbox.resolve, AlwaysAllowed(tmp_path / "approvals.json"))
    for n in (1, 2):
        target = tmp_path / f"once-{n}.txt"
        backend = Scripted([("", [touch_call(target)]), ("Done.", [])])
        list(run_turn(backend, TurnRequest((ASK_TIME,), GREEDY), toolbox=toolbox,
                      approve=policy))
        assert target.exists()
    assert len(asked) == 2
    assert not (tmp_path / "approvals.json").exists()


def test_always_allow_is_kept_for_that_tool_of_that_server_only(toolbox, tmp_path):
    store = tmp_path / "approvals.json"
    asked = []

    def ask(call, tool):
        asked.append(tool.key)
        return Decision.ALWAYS if tool.name == "touch" else Decision.DENY

    policy = ApprovalPolicy(ask, toolbox.resolve, AlwaysAllowed(store))
    backend = Scripted([("", [touch_call(tmp_path / "a.txt")]), ("Done.", [])])
    list(run_turn(backend, TurnRequest((ASK_TIME,), GREEDY), toolbox=toolbox, approve=policy))
    assert asked == ["flaky/touch"]
    assert json.loads(store.read_text())["always"] == ["flaky/touch"]

    # a new policy (another chat, a restart) reads it back and does not ask for touch
    later = ApprovalPolicy(ask, toolbox.resolve, AlwaysAllowed(store))
    backend = Scripted([("", [touch_call(tmp_path / "b.txt"),
                              ParsedToolCall("", "echo", '{"text": "hi"}')]), ("Done.", [])])
    events = list(run_turn(backend, TurnRequest((ASK_TIME,), GREEDY), toolbox=toolbox,
                           approve=later))
    assert (tmp_path / "b.txt").exists()
    assert asked == ["flaky/touch", "flaky/echo"]  # echo was asked about (and denied)
    results = [e.result for e in events if isinstance(e, ToolResultEvent)]
    assert [r.is_error for r in results] == [False, True]

    AlwaysAllowed(store).forget_server("flaky")
    assert json.loads(store.read_text())["always"] == []


def test_a_chats_choice_decides_which_tools_are_offered(tmp_path):
    choice = ChatTools().with_server("time")
    with McpToolbox([time_server(), flaky_server()], allow=choice.allows) as box:
        assert {t.server for t in box.tools()} == {"time"}
        tool = box.resolve("convert_time")
        narrower = choice.with_tool(tool, on=False)
        box.allow = narrower.allows
        assert [t.exposed for t in box.tools()] == ["get_current_time"]
        assert box.resolve("echo") is None  # not offered in this chat: not callable either
