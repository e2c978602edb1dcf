"""The worker runs ``run_turn``: one event signal in order, a tool call put to the user, and
the request built into the turn on the worker's side."""

from __future__ import annotations

import threading
import time

import pytest

from app.chat.events import Finished, TextDelta, ToolCallEvent, ToolResultEvent
from app.chat.parts import ChatMessage, Reasoning, Source, Text, ToolCall, ToolResult
from app.chat.turn import DENIED
from app.engine.engine import Engine
from app.engine.types import (
    GenerationSettings,
    Message,
    ParsedToolCall,
    SamplingSettings,
)
from app.storage.records import StoredMessage
from app.workers.generation_worker import ApprovalRequest, GenerationRequest
from app.workers.turn_request import build_turn
from tests.bounds import AT_ONCE_S
from tests.workers.conftest import EngineThread
from tests.workers.fake_engine import FakeLoader

pytestmark = [pytest.mark.qt_log_level_fail("WARNING")]

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=8)
CALL = ParsedToolCall("call_1", "get_time", "{}")


class Clock:
    """A toolbox with one tool; records what it was asked to run (on which thread)."""

    def __init__(self) -> None:
        self.ran: list[ToolCall] = []

    def specs(self) -> list[dict]:
        return [{"type": "function", "function": {
            "name": "get_time", "description": "The time now.",
            "parameters": {"type": "object", "properties": {}}}}]

    def call(self, call: ToolCall) -> ToolResult:
        self.ran.append(call)
        return ToolResult(call.id, "09:15", name=call.name)


def _events(host: EngineThread) -> list:
    seen: list = []
    host.event.connect(lambda conv, event: seen.append(event))
    return seen


def test_a_plain_reply_on_the_real_engine_is_text_deltas_then_one_finished(
        qtbot, gqa_model_dir):
    host = EngineThread(lambda path: Engine.load(path, provider="cpu", threads=1))
    seen = _events(host)
    try:
        with qtbot.waitSignal(host.loaded, timeout=20000):
            host.load(gqa_model_dir)
        with qtbot.waitSignal(host.finished, timeout=20000):
            host.generate(GenerationRequest("c1", (Message("user", "hello there"),), GREEDY))
        engine = host.worker._engine
        direct = "".join(c.text for c in engine.chat([Message("user", "hello there")], GREEDY,
                                                     reuse=False))
    finally:
        assert host.shutdown(5000)
    kinds = [type(e).__name__ for e in seen]
    assert kinds == ["TextDelta"] * (len(kinds) - 1) + ["Finished"] and len(kinds) >= 2
    finished = seen[-1]
    assert finished.finish_reason in ("eos", "max_tokens") and finished.rounds == 1
    answer = "".join(e.text for e in seen if isinstance(e, TextDelta))
    assert answer == direct  # the turn is the engine's own greedy reply
    assert finished.turn == (ChatMessage.of("user", "hello there"),
                             ChatMessage.of("assistant", answer))


def _tool_host(qtbot) -> tuple[EngineThread, FakeLoader]:
    loader = FakeLoader(tool_calls=[CALL], script=["It", " is", " late."])
    host = EngineThread(loader)
    with qtbot.waitSignal(host.loaded, timeout=5000):
        host.load("models/tools")
    return host, loader


def test_a_denied_call_reaches_the_model_as_a_refusal(qtbot):
    host, loader = _tool_host(qtbot)
    seen = _events(host)
    asked: list[ApprovalRequest] = []

    def deny(request: ApprovalRequest) -> None:  # the UI's answer, on the UI thread
        asked.append(request)
        request.answer(False)

    host.approval_requested.connect(deny)
    toolbox = Clock()
    try:
        with qtbot.waitSignal(host.finished, timeout=5000):
            host.generate(GenerationRequest("c1", (Message("user", "time?"),),
                                            GenerationSettings(), toolbox=toolbox))
    finally:
        assert host.shutdown(5000)
    assert [r.call for r in asked] == [ToolCall("call_1", "get_time", "{}")]
    assert toolbox.ran == []  # never run
    refusal = ToolResult("call_1", DENIED, is_error=True, name="get_time")
    kinds = [type(e).__name__ for e in seen]
    assert kinds == ["ToolCallEvent", "ToolResultEvent", "TextDelta", "TextDelta",
                     "TextDelta", "Finished"]
    assert seen[1] == ToolResultEvent(refusal)
    # the second round's prompt ends with the refusal, as the model reads it
    engine = loader.last
    assert len(engine.calls) == 2 and engine.tools_offered[0] == toolbox.specs()
    assert engine.calls[1][-1] == Message("tool", f"Error: {DENIED}", tool_call_id="call_1")
    assert seen[-1].turn[-2:] == (ChatMessage("tool", (refusal,)),
                                  ChatMessage.of("assistant", "It is late."))


def test_an_allowed_call_runs_on_the_worker_thread_and_its_result_goes_back(qtbot):
    host, loader = _tool_host(qtbot)
    seen = _events(host)
    host.approval_requested.connect(lambda request: request.answer(True))
    ran_on: list[int] = []
    toolbox = Clock()
    original = toolbox.call
    toolbox.call = lambda call: (ran_on.append(threading.get_ident()), original(call))[1]
    try:
        with qtbot.waitSignal(host.finished, timeout=5000):
            host.generate(GenerationRequest("c1", (Message("user", "time?"),),
                                            GenerationSettings(), toolbox=toolbox))
    finally:
        assert host.shutdown(5000)
    assert ran_on and ran_on[0] in loader.last.threads and ran_on[0] != threading.get_ident()
    assert ToolResultEvent(ToolResult("call_1", "09:15", name="get_time")) in seen
    assert loader.last.calls[1][-1] == Message("tool", "09:15", tool_call_id="call_1")


def test_stop_while_a_call_waits_for_approval_ends_the_turn_at_once(qtbot):
    host, loader = _tool_host(qtbot)
    seen = _events(host)
    asked: list[ApprovalRequest] = []
    host.approval_requested.connect(asked.append)  # nobody answers
    try:
        host.generate(GenerationRequest("c1", (Message("user", "time?"),),
                                        GenerationSettings(), toolbox=Clock()))
        qtbot.waitUntil(lambda: bool(asked), timeout=5000)
        with qtbot.waitSignal(host.finished, timeout=5000):
            stopped = time.perf_counter()
            host.stop()
        assert time.perf_counter() - stopped < AT_ONCE_S
    finally:
        assert host.shutdown(5000)
    assert asked[0].answered
    assert isinstance(seen[0], ToolCallEvent)
    assert isinstance(seen[-1], Finished) and seen[-1].finish_reason == "cancelled"
    assert len(loader.last.calls) == 1  # the model was not asked again


def _stored(mid: int, role: str, content: str = "", **fields) -> StoredMessage:
    return StoredMessage(id=mid, conversation_id="c", position=mid, role=role,
                         content=content, **fields)


def test_the_turn_is_built_from_the_stored_path_on_the_worker_side():
    source = Source("a.md", "", "A passage.")
    call = ToolCall("c1", "get_time", "{}")
    result = ToolResult("c1", "09:15", name="get_time")
    path = (
        _stored(1, "user", "Q", reasoning="never sent", parts=(source,)),
        _stored(2, "assistant", "", status="failed"),  # left out
        _stored(3, "assistant", "", reasoning="stopped while thinking"),  # left out
        _stored(4, "assistant", "", reasoning="look it up", parts=(call,)),
        _stored(5, "tool", parts=(result,)),
        _stored(6, "assistant", "It is 09:15.", status="stopped"),
    )
    turn = build_turn(path, GREEDY, system_prompt="Be brief.", conversation_id="c",
                      caches="the caches")
    assert turn.messages == (
        ChatMessage.of("system", "Be brief."),
        ChatMessage("user", (Text("Q"), source)),
        ChatMessage("assistant", (Reasoning("look it up"), call)),
        ChatMessage("tool", (result,)),
        ChatMessage.of("assistant", "It is 09:15."),
    )
    assert (turn.conversation_id, turn.caches, turn.settings) == ("c", "the caches", GREEDY)
    blank = build_turn(path[:1], GREEDY, system_prompt="  ")
    assert blank.messages[0].role == "user"
