"""The family tool-call parsers (Llama 3.x, Mistral, Phi-4-mini, Granite, gpt-oss Harmony;
SmolLM3 reads as Hermes), fed each family's real strings in awkward splits, and their call
grammars accepting those strings."""

from __future__ import annotations

import json

import pytest

from app.engine.grammar import GrammarError, GrammarMatcher
from app.engine.tool_calls import (
    PARSERS,
    SYNTAX,
    split_tool_calls,
    tool_call_format,
    tool_call_grammar,
)
from app.engine.types import GenerationChunk, GenerationStats, ParsedToolCall
from tests.engine.test_constrained import TOOLS

PARIS = ParsedToolCall("", "get_weather", json.dumps({"city": "Paris", "days": 2}))
UTC = ParsedToolCall("", "get_time", json.dumps({"zone": "UTC"}))

# (family, what the model writes, the answer left, the calls) — the formats as the models'
# own chat templates and model cards give them
REAL = [
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',
     "", [PARIS]),
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", '
     '"days": 2}}; {"name": "get_time", "parameters": {"zone": "UTC"}}', "", [PARIS, UTC]),
    ("llama3", 'It is {sunny} today.', "It is {sunny} today.", []),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", '
     '"days": 2}}, {"name": "get_time", "arguments": {"zone": "UTC"}}]', "", [PARIS, UTC]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}'
     '[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"}', "", [PARIS, UTC]),
    ("phi4", 'Checking.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", '
     '"days": 2}}]<|/tool_call|>', "Checking.", [PARIS]),
    # Phi-4-mini's other form (vLLM's phi4_mini_json parser, sglang's Phi4MiniDetector)
    ("phi4", 'functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
     '{"name": "get_time", "arguments": {"zone": "UTC"}}]', "", [PARIS, UTC]),
    ("phi4", 'Let me check. functools[{"name": "get_weather", "parameters": {"city": '
     '"Paris", "days": 2}}]', "Let me check. ", [PARIS]),
    ("phi4", 'functools[{"name": "get_time", "arguments": {"zone": "UTC"}}] Done, see [1].',
     "Done, see [1].", [UTC]),
    ("phi4", 'functools[{"name": "get_weather", "arguments": {"city": "Pa]ris [x", '
     '"days": 2}}]', "", [ParsedToolCall("", "get_weather", json.dumps(
         {"city": "Pa]ris [x", "days": 2}))]),
    ("phi4", "I used functools.partial and functools [lru_cache] here.",
     "I used functools.partial and functools [lru_cache] here.", []),
    ("granite", '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", '
     '"days": 2}}, {"name": "get_time", "arguments": {"zone": "UTC"}}]', "", [PARIS, UTC]),
    ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n'
     '</tool_call>', "", [UTC]),  # SmolLM3 writes Hermes' markup
]
HARMONY = ('<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant'
           '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
           '{"city": "Paris", "days": 2}<|call|>')


def run(family, pieces):
    parser = PARSERS[family]()
    text, calls = [], []
    for piece in pieces:
        t, c = parser.feed(piece)
        text.append(t)
        calls += c
    t, c = parser.finish()
    return "".join(text) + t, calls + c


def splits(s):
    """One character at a time, every cut in two, and cuts at every marker character."""
    out = [list(s)] + [[s[:i], s[i:]] for i in range(1, len(s))]
    marks = [i for i in range(len(s)) if s[i] in "<>[]{}|"]
    out += [[s[:i], s[i:j], s[j:]] for i in marks[::3] for j in marks[1::3] if i < j]
    return out


@pytest.mark.parametrize(("family", "raw", "answer", "calls"), REAL,
                         ids=[f"{f}-{i}" for i, (f, *_) in enumerate(REAL)])
def test_each_family_reads_its_calls_however_the_stream_splits(family, raw, answer, calls):
    for pieces in splits(raw):
        assert run(family, pieces) == (answer, calls), pieces


def test_harmony_reads_the_call_from_the_commentary_header_and_leaves_the_text():
    for pieces in splits(HARMONY):
        text, calls = run("harmony", pieces)
        assert calls == [PARIS]
        assert text == "".join(pieces)[: len(text)]  # the reasoning splitter routes it
    assert run("harmony", ['<|channel|>final<|message|>Sunny.<|return|>'])[1] == []


@pytest.mark.parametrize("family", ["mistral", "phi4", "granite", "llama3"])
def test_a_body_that_is_not_a_call_stays_in_the_answer(family):
    opens = {"mistral": "[TOOL_CALLS]", "phi4": "<|tool_call|>", "granite": "<|tool_call|>",
             "llama3": "<|python_tag|>"}
    raw = "Here " + opens[family] + 'brave_search.call(query="x")'
    if family == "phi4":
        raw += "<|/tool_call|>"
    assert run(family, [raw[:7], raw[7:]]) == (raw, [])


@pytest.mark.parametrize("raw", ['Here functools[1, 2] is a list.',
                                 'Here functools[{"name": "get_time", "arguments": {',
                                 'functools[{"nom": "get_time"}]'])
def test_a_phi4_functools_list_that_is_not_calls_or_never_closes_stays_in_the_answer(raw):
    for pieces in splits(raw):
        assert run("phi4", pieces) == (raw, []), pieces


def test_the_registry_reads_each_family_from_its_template():
    assert tool_call_format("{% if tools %}<|python_tag|>{% endif %}") == "llama3"
    assert tool_call_format("{% if tools %}[AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]") \
        == "mistral"
    assert tool_call_format("{{ message['tools'] }}<|tool|>{{ tools }}<|/tool|>") == "phi4"
    assert tool_call_format("<|start_of_role|>available_tools<|end_of_role|>{{ tools }}"
                            "<|tool_call|>") == "granite"
    assert tool_call_format("{% if tools %}namespace functions {% endif %}<|channel|>"
                            "{{ ' to=' + 'functions.' + tool_call.name }}") \
        == "harmony"
    assert tool_call_format("{% if tools %}<tool_call>{% endif %}") == "hermes"


def test_special_token_markers_are_put_back_from_the_token_ids():
    """[TOOL_CALLS] is a control token: decoding leaves it out, its id brings it back."""
    texts = ["", '[{"name": "get_time", ', '"arguments": {"zone": "UTC"}}]']
    chunks = [GenerationChunk(t, token_id=i) for i, t in enumerate(texts)]
    chunks[-1].stats, chunks[-1].finish_reason = GenerationStats(), "eos"
    out = list(split_tool_calls(iter(chunks), PARSERS["mistral"](), {0: "[TOOL_CALLS]"}))
    assert [c.tool_calls for c in out] == [(), (), (UTC,)]
    assert "".join(c.text for c in out) == ""


@pytest.fixture(scope="module")
def tokenizer(gqa_model_dir):
    from app.engine.engine import Engine

    return Engine.load(gqa_model_dir).tokenizer


def accepts(grammar, tokenizer, text):
    matcher = GrammarMatcher(grammar, tokenizer, [])
    try:
        for token in tokenizer.encode(text):
            matcher.accept(token)
    except GrammarError:  # a byte the grammar forbids
        return False
    return matcher.accepting


@pytest.mark.parametrize(("family", "raw"), [
    ("llama3", '<|python_tag|>{"name": "get_time", "parameters": {"zone": "UTC"}}'),
    ("mistral", '[TOOL_CALLS][{"name": "get_time", "arguments": {"zone": "UTC"}}]'),
    ("phi4", '<|tool_call|>[{"name": "get_time", "arguments": {"zone": "UTC"}}]'
     '<|/tool_call|>'),
    ("granite", '<|tool_call|>[{"name": "get_time", "arguments": {"zone": "UTC"}}]'),
    ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'),
    ("harmony", '<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>'
     '{"zone": "UTC"}'),
])
def test_each_family_grammar_accepts_its_real_call(family, raw, tokenizer):
    assert family in SYNTAX or family == "harmony"
    required = tool_call_grammar(family, TOOLS, "required", parallel=True,
                                 tokenizer=tokenizer)
    assert accepts(required, tokenizer, raw)
    assert not accepts(required, tokenizer, raw.replace("UTC", "PST"))
    named = tool_call_grammar(family, TOOLS, "function:get_weather", parallel=False,
                              tokenizer=tokenizer)
    assert not accepts(named, tokenizer, raw)
    assert run(family, [raw])[1] == [UTC]
