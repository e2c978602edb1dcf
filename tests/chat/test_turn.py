"""run_turn: the exact event sequence over the real engine (tiny fixture models), the real
RemoteEngine over loopback, and a scripted backend where a model must call a tool."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field

import pytest

from app.chat.events import (
    Finished,
    PrefillProgress,
    SourcesEvent,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
)
from app.chat.parts import ChatMessage, Source, Text, ToolCall, ToolResult
from app.chat.render import to_message
from app.chat.turn import DENIED, TurnRequest, run_turn
from app.engine.engine import Engine
from app.engine.types import (
    Capabilities,
    GenerationChunk,
    GenerationSettings,
    GenerationStats,
    Message,
    ParsedToolCall,
    SamplingSettings,
)
from app.remote.engine import RemoteEngine
from app.remote.sources import SourceStore
from tests.fixtures.tiny_tokenizer import CHATML_TEMPLATE

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=8)
QUESTION = ChatMessage.of("user", "What time is it?")
PASSAGES = [Source("clock.md", "## Time", "It is a quarter past nine."),
            Source("tea.md", "", "Anna poured the tea.")]
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "The time now.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}


class Shelf:
    def __init__(self, sources):
        self.sources, self.queries = sources, []

    def search(self, query):
        self.queries.append(query)
        return list(self.sources)


class Clock:
    def __init__(self, fail: bool = False):
        self.calls: list[ToolCall] = []
        self.fail = fail

    def specs(self):
        return [TIME_TOOL]

    def call(self, call):
        self.calls.append(call)
        if self.fail:
            raise RuntimeError("the clock is broken")
        return ToolResult(call.id, json.dumps({"time": "09:15"}))


def kinds(events) -> list[str]:
    return [type(e).__name__ for e in events]


def prefilled(events) -> tuple[int, list]:
    """How many prefill events open the round, checked to end with the whole prompt, and
    the events after them."""
    count = next(i for i, e in enumerate(events) if not isinstance(e, PrefillProgress))
    assert count >= 1
    last = events[count - 1]
    assert last.done == last.total == events[-1].stats[0].prompt_tokens
    return count, events[count:]


def texts(events) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


@pytest.fixture(scope="module")
def engine(gqa_model_dir):
    return Engine.load(gqa_model_dir, provider="cpu", threads=1)


# -- the real engine ------------------------------------------------------------------------


def test_a_plain_turn_is_the_engines_own_reply(engine):
    events = list(run_turn(engine, TurnRequest((QUESTION,), GREEDY)))
    direct = list(engine.chat([Message("user", "What time is it?")], GREEDY))
    _, rest = prefilled(events)
    assert kinds(rest) == ["TextDelta"] * len([c for c in direct if c.text]) + ["Finished"]
    assert texts(events) == "".join(c.text for c in direct) != ""
    done = events[-1]
    assert isinstance(done, Finished) and done.rounds == 1 and done.note is None
    assert done.finish_reason == direct[-1].finish_reason
    assert done.turn == (QUESTION, ChatMessage("assistant", (Text(texts(events)),)))


def test_retrieval_comes_before_rendering_and_its_sources_are_in_the_prompt(engine):
    shelf = Shelf(PASSAGES)
    events = list(run_turn(engine, TurnRequest((QUESTION,), GREEDY), retriever=shelf))
    assert shelf.queries == ["What time is it?"]
    assert isinstance(events[0], SourcesEvent) and events[0].sources == tuple(PASSAGES)
    _, rest = prefilled(events[1:])
    assert kinds(rest) == ["TextDelta"] * (len(rest) - 1) + ["Finished"]
    asked = QUESTION.with_parts(*PASSAGES)
    done = events[-1]
    assert done.turn[0] == asked  # stored with the turn
    rendered = [to_message(asked)]
    assert "[Source 1: clock.md, ## Time]" in rendered[0].content
    assert done.stats[0].prompt_tokens == len(engine.encode_chat(rendered))
    direct = "".join(c.text for c in engine.chat(rendered, GREEDY))
    assert texts(events) == direct


def test_nothing_found_means_no_sources_event(engine):
    events = list(run_turn(engine, TurnRequest((QUESTION,), GREEDY), retriever=Shelf([])))
    assert "SourcesEvent" not in kinds(events) and events[-1].turn[0] == QUESTION


def test_a_model_without_a_tool_format_is_not_offered_tools_and_the_turn_says_so(engine):
    clock = Clock()
    events = list(run_turn(engine, TurnRequest((QUESTION,), GREEDY), toolbox=clock,
                           approve=lambda call: True))
    assert kinds(events)[-1] == "Finished" and clock.calls == []
    assert "no tool-call format" in events[-1].note


@pytest.fixture(scope="module")
def hermes_model_dir(gqa_model_dir, tmp_path_factory):
    """The GQA model with a template that lists tools and asks for <tool_call> (Qwen's way)."""
    folder = tmp_path_factory.mktemp("hermes") / "model"
    shutil.copytree(gqa_model_dir, folder)
    (folder / "chat_template.jinja").write_text(
        "{% if tools %}<|im_start|>system\nTools:{% for t in tools %} "
        "{{ t.function.name }}{% endfor %}. Call one as <tool_call>{json}</tool_call>"
        "<|im_end|>\n{% endif %}" + CHATML_TEMPLATE, encoding="utf-8")
    return folder


def test_tools_reach_a_hermes_template_through_the_turn(hermes_model_dir):
    engine = Engine.load(hermes_model_dir, provider="cpu", threads=1)
    assert engine.capabilities().tools and engine.capabilities().tool_format == "hermes"
    events = list(run_turn(engine, TurnRequest((QUESTION,), GREEDY), toolbox=Clock(),
                           approve=lambda call: True))
    plain = [Message("user", "What time is it?")]
    with_tools = engine.encode_chat(plain, tools=[TIME_TOOL])
    assert "Tools: get_time." in engine.render(plain, tools=[TIME_TOOL])
    assert events[-1].stats[0].prompt_tokens == len(with_tools) > len(engine.encode_chat(plain))


# -- a scripted backend: the tool loop --------------------------------------------------------


@dataclass
class Scripted:
    """A backend whose replies are scripted: each round is (text, [calls])."""

    rounds: list[tuple[str, list[ParsedToolCall]]]
    tools: bool = True
    seen: list[list[Message]] = field(default_factory=list)
    offered: list[object] = field(default_factory=list)

    def capabilities(self):
        return Capabilities(tools=self.tools, tool_format="hermes" if self.tools else None)

    def chat(self, messages, settings, *, cancel=None, caches=None, conversation_id=None,
             reuse=True, on_prefill=None, tools=None, documents=None):
        self.seen.append(list(messages))
        self.offered.append(tools)
        text, calls = self.rounds[min(len(self.seen), len(self.rounds)) - 1]
        if on_prefill is not None:
            on_prefill(0, 10)
            on_prefill(10, 10)
        yield GenerationChunk(text, token_id=1)
        yield GenerationChunk("", finish_reason="eos", stats=GenerationStats(),
                              tool_calls=tuple(calls))


CALL = ParsedToolCall("", "get_time", '{"tz": "UTC"}')


def test_a_call_is_shown_approved_run_and_its_result_goes_back_to_the_model():
    backend = Scripted([("Let me look.", [CALL]), ("It is 09:15.", [])])
    clock, asked = Clock(), []
    events = list(run_turn(backend, TurnRequest((QUESTION,), GREEDY), toolbox=clock,
                           approve=lambda call: asked.append(call) or True))
    call = ToolCall("call_1_1", "get_time", '{"tz": "UTC"}')
    result = ToolResult("call_1_1", '{"time": "09:15"}', name="get_time")
    assert kinds(events) == ["PrefillProgress", "PrefillProgress", "TextDelta",
                             "ToolCallEvent", "ToolResultEvent",
                             "PrefillProgress", "PrefillProgress", "TextDelta", "Finished"]
    assert events[3] == ToolCallEvent(call) and events[4] == ToolResultEvent(result)
    assert asked == [call] and clock.calls == [call]
    assert backend.offered == [[TIME_TOOL], [TIME_TOOL]]
    assert backend.seen[1][1:] == [
        Message("assistant", "Let me look.", tool_calls=(ParsedToolCall(
            "call_1_1", "get_time", '{"tz": "UTC"}'),)),
        Message("tool", '{"time": "09:15"}', tool_call_id="call_1_1")]
    done = events[-1]
    assert (done.finish_reason, done.rounds, done.note) == ("eos", 2, None)
    assert done.turn == (QUESTION, ChatMessage("assistant", (Text("Let me look."), call)),
                         ChatMessage("tool", (result,)),
                         ChatMessage("assistant", (Text("It is 09:15."),)))


def test_a_denied_call_goes_back_to_the_model_as_an_error():
    backend = Scripted([("", [CALL]), ("I may not look.", [])])
    clock = Clock()
    events = list(run_turn(backend, TurnRequest((QUESTION,), GREEDY), toolbox=clock,
                           approve=lambda call: False))
    refused = ToolResult("call_1_1", DENIED, is_error=True, name="get_time")
    assert [e for e in events if isinstance(e, ToolResultEvent)] == [ToolResultEvent(refused)]
    assert clock.calls == []
    assert backend.seen[1][-1] == Message("tool", f"Error: {DENIED}", tool_call_id="call_1_1")
    assert texts(events) == "I may not look."


def test_a_failing_tool_is_an_error_result_and_the_chat_goes_on():
    backend = Scripted([("", [CALL]), ("The clock failed.", [])])
    events = list(run_turn(backend, TurnRequest((QUESTION,), GREEDY), toolbox=Clock(fail=True),
                           approve=lambda call: True))
    (result,) = [e.result for e in events if isinstance(e, ToolResultEvent)]
    assert result.is_error and result.content == "The tool get_time failed: the clock is broken"
    assert events[-1].finish_reason == "eos"


def test_the_loop_stops_at_its_round_limit_without_running_the_last_calls():
    backend = Scripted([("again", [CALL])])
    clock = Clock()
    events = list(run_turn(backend, TurnRequest((QUESTION,), GREEDY, max_rounds=3),
                           toolbox=clock, approve=lambda call: True))
    assert kinds(events).count("ToolCallEvent") == 3 and len(clock.calls) == 2
    done = events[-1]
    assert (done.finish_reason, done.rounds) == ("tool_calls", 3)
    assert "after 3 rounds" in done.note


def test_calls_without_a_toolbox_are_not_run():
    backend = Scripted([("", [CALL])])
    events = list(run_turn(backend, TurnRequest((QUESTION,), GREEDY)))
    assert kinds(events) == ["PrefillProgress", "PrefillProgress", "ToolCallEvent", "Finished"]
    assert backend.offered == [None] and events[-1].rounds == 1


def test_a_toolbox_needs_someone_to_ask():
    with pytest.raises(ValueError, match="approve"):
        next(run_turn(Scripted([("", [])]), TurnRequest((QUESTION,), GREEDY), toolbox=Clock()))


# -- the real remote engine over loopback ------------------------------------------------


def test_a_remote_servers_streamed_calls_run_and_the_result_round_trips(make_stub):
    stub = make_stub(tool_calls=[{"id": "call_abc", "name": "get_time",
                                  "arguments": '{"tz": "UTC"}'}])
    engine = RemoteEngine.load(SourceStore().add("Stub", stub.url, None).target("stub-model"))
    clock = Clock()
    events = list(run_turn(engine, TurnRequest((QUESTION,), GREEDY), toolbox=clock,
                           approve=lambda call: True))
    call = ToolCall("call_abc", "get_time", '{"tz": "UTC"}')
    assert kinds(events) == ["ToolCallEvent", "ToolResultEvent"] + ["TextDelta"] * 4 + [
        "Finished"]
    assert clock.calls == [call] and texts(events) == "Hello, world!"
    first, second = stub.chats
    assert first["tools"] == [TIME_TOOL]
    assert second["messages"][1:] == [
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_abc", "type": "function",
            "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'}}]},
        {"role": "tool", "content": '{"time": "09:15"}', "tool_call_id": "call_abc"}]
    engine.close()
