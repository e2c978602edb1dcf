"""Constrained decoding on a tiny random-weight model: every reply matches its grammar, at
temperature 1, across seeds, within max_tokens; without a grammar nothing changes."""

from __future__ import annotations

import json

import jsonschema
import pytest

from app.engine.engine import Engine
from app.engine.grammar import GrammarError, GrammarMatcher
from app.engine.types import GenerationSettings, Grammar, Message
from tests.fixtures.tool_template import with_tool_template

SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["name", "age", "ok", "tags", "kind"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                         "ok": {"type": "boolean"},
                         "tags": {"type": "array", "items": {"type": "string"}},
                         "kind": {"type": "string", "enum": ["cat", "dog"]}}}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "parameters": {
            "type": "object", "additionalProperties": False, "required": ["city", "days"],
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {
        "name": "get_time", "parameters": {
            "type": "object", "additionalProperties": False, "required": ["zone"],
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}}}},
]
ASK = [Message("user", "give me json")]


@pytest.fixture(scope="module")
def engine(gqa_model_dir):
    return Engine.load(gqa_model_dir)


@pytest.fixture(scope="module")
def tool_engine(tmp_path_factory):
    """The tiny model with a 2048-token context (the tool list alone takes 436) and a
    template that offers tools."""
    from tests.fixtures.tiny_models import build_gqa_model

    model = build_gqa_model(tmp_path_factory.mktemp("tool_model"), context_length=2048)
    return Engine.load(with_tool_template(model, tmp_path_factory.mktemp("t") / "m"))


def reply(engine, settings, messages=ASK, **kwargs):
    text, calls, final = [], [], None
    for chunk in engine.chat(messages, settings, reuse=False, **kwargs):
        text.append(chunk.text)
        calls.extend(chunk.tool_calls)
        final = chunk if chunk.finish_reason else final
    return "".join(text), calls, final


def settings(**overrides):
    return GenerationSettings.from_model({}, {"temperature": 1.0, "max_new_tokens": 120,
                                              **overrides})


@pytest.mark.parametrize("seed", range(6))
def test_every_sampled_reply_validates_against_its_schema(engine, seed):
    grammar = Grammar("json_schema", json.dumps(SCHEMA))
    text, _, final = reply(engine, settings(seed=seed, grammar=grammar))
    jsonschema.validate(json.loads(text), SCHEMA)
    assert final.finish_reason == "eos"
    assert final.stats.generated_tokens <= 120
    assert final.stats.speculation_note is None  # a grammar no longer turns speculation off


def test_a_reply_that_would_run_on_is_closed_within_its_budget(engine):
    # seed 5 writes a string past 300 tokens; 80 tokens must do for every seed
    grammar = Grammar("json_schema", json.dumps(SCHEMA))
    for seed in range(6, 12):
        text, _, final = reply(engine, settings(seed=seed, grammar=grammar, max_new_tokens=80))
        jsonschema.validate(json.loads(text), SCHEMA)
        assert final.finish_reason == "eos"


@pytest.mark.parametrize("seed", range(3))
def test_json_object_regex_and_choice(engine, seed):
    text, _, _ = reply(engine, settings(seed=seed, grammar=Grammar("json_object")))
    assert isinstance(json.loads(text), dict)
    text, _, _ = reply(engine, settings(seed=seed, grammar=Grammar("regex", r"\d{3}-\d{4}")))
    assert len(text) == 8 and text[3] == "-" and (text[:3] + text[4:]).isascii()
    assert (text[:3] + text[4:]).isdigit()
    choice = Grammar("choice", json.dumps(["yes", "no", "maybe"]))
    assert reply(engine, settings(seed=seed, grammar=choice))[0] in ("yes", "no", "maybe")


def test_without_a_grammar_the_reply_is_unchanged_token_for_token(engine):
    for overrides in ({"temperature": 0}, {"temperature": 1.0, "seed": 3, "top_p": 0.9}):
        plain = GenerationSettings.from_model({}, {"max_new_tokens": 40, **overrides})
        ids = [c.token_id for c in engine.chat(ASK, plain, reuse=False)]
        # the same settings through the constrained code path's logprobs branch
        with_lp = GenerationSettings.from_model({}, {"max_new_tokens": 40, "logprobs": 2,
                                                     "speculation": "off", **overrides})
        chunks = list(engine.chat(ASK, with_lp, reuse=False))
        assert [c.token_id for c in chunks] == ids
        assert all(c.logprob is not None and len(c.top_logprobs) == 2
                   for c in chunks if c.token_id is not None)


def test_a_malformed_schema_is_a_sentence(engine):
    with pytest.raises(GrammarError, match="cannot be compiled"):
        GrammarMatcher(Grammar("json_schema", "{not json"), engine.tokenizer, [2])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("choice", ["required", "function:get_weather"])
def test_forced_tool_calls_validate_against_the_tool_schema(tool_engine, choice, seed):
    wanted = settings(seed=seed, tool_choice=choice, max_new_tokens=150)
    _, calls, final = reply(tool_engine, wanted, [Message("user", "hi")], tools=TOOLS)
    assert calls and final.finish_reason == "eos"
    specs = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for call in calls:
        if choice.startswith("function:"):
            assert call.name == "get_weather"
        jsonschema.validate(json.loads(call.arguments), specs[call.name])


def test_auto_is_free_until_the_marker_then_constrained(tool_engine):
    from app.engine.tool_calls import tool_call_grammar

    tok = tool_engine.tokenizer
    grammar = tool_call_grammar("hermes", TOOLS, "auto", parallel=False, tokenizer=tok)
    matcher = GrammarMatcher(grammar, tok, [2])
    import numpy as np

    logits = np.zeros(tok.vocab_size, np.float32)
    for token in tok.encode("Let me look. <tool_call>"):
        assert np.isfinite(matcher.mask(logits)).all()  # free text: nothing masked
        matcher.accept(token)
    assert matcher.active
    allowed = np.flatnonzero(np.isfinite(matcher.mask(logits)))
    assert 0 < allowed.size < 10  # the call's JSON begins: a newline or "{"
    assert all(tok.decode([int(i)]) in ("\n", "{", '{"') for i in allowed)


def test_constrained_greedy_without_a_mask_picks_the_masked_argmax(engine):
    """The greedy fast path (the best token, when the grammar allows it) chooses what the
    argmax of the masked logits chooses, step by step along a reply."""
    import numpy as np

    from app.engine.sampling import Sampler
    from app.engine.types import SamplingSettings

    rng = np.random.default_rng(0)
    matcher = GrammarMatcher(Grammar("json_schema", json.dumps(SCHEMA)), engine.tokenizer,
                             [2], max_tokens=60)
    sampler = Sampler(SamplingSettings(temperature=0.0), matcher)
    fast_hits = 0
    for _ in range(60):
        logits = rng.standard_normal(engine.tokenizer.vocab_size).astype(np.float32) * 4
        expected = int(np.argmax(matcher.mask(logits)))
        fast_hits += matcher.allows(int(logits.argmax()))
        assert sampler(logits) == expected
        if expected == 2:
            break
        matcher.accept(expected)
    assert fast_hits > 0  # the path without a mask ran


def test_a_thinking_reply_gets_its_grammar_after_the_reasoning():
    from app.engine.reasoning import ReasoningFormat, grammar_after_reasoning

    think, schema = ReasoningFormat("think"), Grammar("json_object")
    qwen3 = "<|im_start|>assistant\n"  # Qwen3, thinking on: the model opens <think>
    assert grammar_after_reasoning(schema, think, qwen3, "default").trigger == "</think>"
    r1 = "<｜Assistant｜><think>\n"  # a DeepSeek-R1 distill: the prompt opened it
    assert grammar_after_reasoning(schema, think, r1, "default").trigger == "</think>"
    off = "<|im_start|>assistant\n<think>\n\n</think>\n\n"  # Qwen3, thinking off
    assert grammar_after_reasoning(schema, think, off, "off") is schema
    assert grammar_after_reasoning(schema, None, qwen3, "default") is schema
    auto = Grammar("lark", "start: x", trigger="<tool_call>")
    assert grammar_after_reasoning(auto, think, qwen3, "default") is auto


def test_after_the_thinking_a_blank_line_may_come_before_the_grammar(engine):
    """Qwen3 writes ``</think>`` and a blank line before its answer: up to two newlines
    (bounded) may come before what the grammar describes, of any kind."""
    from app.engine.reasoning import ReasoningFormat, grammar_after_reasoning

    tok = engine.tokenizer
    kinds = {"json_object": (Grammar("json_object"), '{"a": 1}'),
             "json_schema": (Grammar("json_schema", json.dumps(SCHEMA)),
                             '{"name": "x", "age": 1, "ok": true, "tags": [], "kind": "cat"}'),
             "regex": (Grammar("regex", r"\d{3}"), "123"),
             "choice": (Grammar("choice", json.dumps(["yes", "no"])), "no")}
    for kind, (grammar, body) in kinds.items():
        after = grammar_after_reasoning(grammar, ReasoningFormat("think"),
                                        "<|im_start|>assistant\n", "default")
        assert (after.trigger, after.leading_newlines) == ("</think>", 2)
        for lead, ok in (("", True), ("\n", True), ("\n\n", True), ("\n\n\n", False)):
            matcher = GrammarMatcher(after, tok, [2])
            ids = tok.encode(f"<think>\nhm\n</think>{lead}{body}")
            try:
                for token in ids:
                    matcher.accept(token)
                accepted = matcher.accepting
            except GrammarError:
                accepted = False
            assert accepted is ok, (kind, lead)
