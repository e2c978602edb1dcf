"""The per-family tool-call parsers, fed the family's real strings in awkward splits."""

from __future__ import annotations

import json

import pytest

from app.engine.tool_calls import (
    PARSERS,
    HermesParser,
    split_tool_calls,
    tool_call_format,
)
from app.engine.types import GenerationChunk, GenerationStats, ParsedToolCall

# What Qwen2.5-7B-Instruct writes for two parallel calls (its template's own example shape).
QWEN_TWO_CALLS = (
    'Let me check both.\n<tool_call>\n{"name": "get_weather", "arguments": '
    '{"city": "Zürich", "unit": "celsius"}}\n</tool_call>\n<tool_call>\n'
    '{"name": "get_time", "arguments": {"tz": "Europe/Zurich"}}\n</tool_call>'
)
WEATHER = ParsedToolCall("", "get_weather", json.dumps({"city": "Zürich", "unit": "celsius"},
                                                       ensure_ascii=False))
TIME = ParsedToolCall("", "get_time", json.dumps({"tz": "Europe/Zurich"}))


def run(pieces: list[str]) -> tuple[str, list[ParsedToolCall]]:
    parser = HermesParser()
    text, calls = [], []
    for piece in pieces:
        t, c = parser.feed(piece)
        text.append(t)
        calls += c
    t, c = parser.finish()
    return "".join(text) + t, calls + c


def every_split(s: str) -> list[list[str]]:
    """One character at a time, and every cut into two and three pieces around the markers."""
    splits = [list(s)]
    splits += [[s[:i], s[i:]] for i in range(1, len(s))]
    marks = [i for i in range(len(s)) if s[i] in "<>{}"]
    splits += [[s[:i], s[i:j], s[j:]] for i in marks for j in marks if i < j]
    return splits


@pytest.mark.parametrize("pieces", every_split(QWEN_TWO_CALLS))
def test_two_qwen_calls_come_out_whole_however_the_stream_splits(pieces):
    assert run(pieces) == ("Let me check both.\n", [WEATHER, TIME])


def test_text_is_held_back_only_while_it_could_start_a_marker():
    parser = HermesParser()
    assert parser.feed("a <tool") == ("a ", [])  # could be <tool_call>
    assert parser.feed("s are") == ("<tools are", [])  # it was not
    assert parser.feed(" <") == (" ", [])
    assert parser.finish() == ("<", [])


@pytest.mark.parametrize("body", [
    "not json", '["a list"]', '{"arguments": {}}', '{"name": "", "arguments": {}}',
])
def test_a_call_that_is_not_the_promised_json_stays_in_the_answer(body):
    raw = f"<tool_call>{body}</tool_call>"
    assert run(["Here: ", raw[:5], raw[5:]]) == ("Here: " + raw, [])


def test_an_unclosed_call_stays_in_the_answer():
    raw = 'Sure <tool_call>{"name": "f", "argu'
    assert run([raw[:9], raw[9:]]) == (raw, [])


def test_arguments_written_as_a_string_and_parameters_are_read():
    assert run(['<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>']) == (
        "", [ParsedToolCall("", "f", '{"x": 1}')])
    assert run(['<tool_call>{"name": "f", "parameters": {"x": 1}}</tool_call>']) == (
        "", [ParsedToolCall("", "f", '{"x": 1}')])


def test_the_registry_reads_the_family_from_the_template():
    qwen = ('{%- if tools %}{{- "<tools>" }}{%- for tool in tools %}{{ tool | tojson }}'
            '{%- endfor %}{{- "</tools>\\n<tool_call>" }}{%- endif %}')
    assert tool_call_format(qwen) == "hermes" and "hermes" in PARSERS
    assert tool_call_format("{{ messages[0]['content'] }}") is None
    assert tool_call_format(None) is None


def test_split_tool_calls_moves_calls_out_of_the_chunks_and_flushes_at_the_end():
    texts = ["Ok", "<tool_", 'call>{"name": "get_time", "arguments": {"tz": "Europe/Zurich"}}',
             "</tool_call>", " <"]
    chunks = [GenerationChunk(t, token_id=i) for i, t in enumerate(texts)]
    chunks[-1].stats, chunks[-1].finish_reason = GenerationStats(), "eos"
    out = list(split_tool_calls(iter(chunks), HermesParser()))
    assert [c.text for c in out] == ["Ok", "", "", "", "<"]
    assert [c.tool_calls for c in out] == [(), (), (), (TIME,), ()]
    assert out[-1].finish_reason == "eos"
