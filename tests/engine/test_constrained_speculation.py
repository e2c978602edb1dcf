"""Speculation under a grammar: drafts are cut where the grammar forbids them, verified
under the grammar's mask position by position, and the reply equals the constrained
non-speculated one token for token, greedy and seeded sampled, for a JSON Schema and for
tool calls (on a tiny int4 graph, exact mode). The workloads quote JSON the grammar forces,
so guesses land: every test proves some were accepted."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from app.engine.engine import Engine
from app.engine.grammar import GrammarMatcher
from app.engine.speculative import DraftModel
from app.engine.types import GenerationSettings, Grammar, Message
from tests.engine.test_constrained import SCHEMA, TOOLS
from tests.fixtures.tool_template import with_tool_template

EXAMPLE = json.dumps({"name": "Anna", "age": 42, "ok": True, "tags": ["tea", "hearth"],
                      "kind": "cat"}, separators=(", ", ": "))
QUOTE_JSON = [Message("user", "Copy this JSON: " + " ".join([EXAMPLE] * 3))]
CALL = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
        '</tool_call>')
QUOTE_CALL = [Message("user", "Run this call again: " + " ".join([CALL] * 3))]
#: greedy, and sampled at temperature 1 with two seeds
SAMPLINGS = [{"temperature": 0.0}, {"temperature": 1.0, "seed": 1},
             {"temperature": 1.0, "seed": 4, "top_p": 0.9}]


def _load(folder) -> Engine:
    return Engine.load(folder, provider="cpu", threads=1, huge_pages=False)  # exact mode


@pytest.fixture(scope="module")
def engine(gqa_int4_model_dir):
    return _load(gqa_int4_model_dir)


#: The rows a one-token step may run on each kind of CPU: this one's own kernels (whichever
#: the calibration picks), and both kinds made on any machine (tests/fixtures/quantized.py)
STEP_ROWS = {"this_cpu": {1, 2}, "one_row_differs": {2}, "one_row_alike": {1}}


@pytest.fixture(scope="module", params=list(STEP_ROWS))
def kernel_engine(request, gqa_int4_model_dir, gqa_int4_one_row_differs_dir):
    """(kind of CPU, an exact engine calibrated as on it)."""
    from tests.fixtures.quantized import load_with_kernels

    if request.param == "this_cpu":
        return request.param, _load(gqa_int4_model_dir)
    return request.param, load_with_kernels(gqa_int4_one_row_differs_dir, request.param)


@pytest.fixture(scope="module")
def tool_engine(tmp_path_factory):
    """The tiny int4 model with a 2048-token context and a template that offers tools."""
    from tests.fixtures.quantized import quantize_matmuls
    from tests.fixtures.tiny_models import build_gqa_model

    model = build_gqa_model(tmp_path_factory.mktemp("int4_tools"), context_length=2048)
    assert quantize_matmuls(model / "model.onnx") > 0
    return _load(with_tool_template(model, tmp_path_factory.mktemp("t") / "m"))


def _reply(engine, messages, mode, sampling, **options):
    tools = options.pop("tools", None)
    settings = GenerationSettings.from_model({}, {"max_new_tokens": 100, "speculation": mode,
                                                  **sampling, **options})
    chunks = list(engine.chat(messages, settings, reuse=False, tools=tools))
    ids = [c.token_id for c in chunks if c.token_id is not None]
    calls = [call for chunk in chunks for call in chunk.tool_calls]
    return ids, "".join(c.text for c in chunks), calls, chunks[-1].stats


def test_a_draft_is_cut_at_the_first_token_the_grammar_forbids(engine):
    tok = engine.tokenizer
    matcher = GrammarMatcher(Grammar("json_schema", json.dumps(SCHEMA)), tok, [2])
    good = tok.encode('{"name": "Anna", "age": 4')
    bad = tok.encode('{"nope')
    assert matcher.valid_prefix(good) == len(good)
    forbidden = next(i for i in range(len(bad)) if tok.decode(bad[:i + 1]) not in '{"name')
    assert matcher.valid_prefix(bad) == forbidden
    # asking moved nothing: the first token's mask is still the document's start
    logits = np.zeros(tok.vocab_size, np.float32)
    allowed = {tok.decode([int(i)]) for i in np.flatnonzero(np.isfinite(matcher.mask(logits)))}
    assert allowed and all(text.startswith("{") for text in allowed)
    for token in good:  # and the grammar takes the whole good draft afterwards
        matcher.accept(token)


def test_json_schema_replies_speculate_and_equal_plain_ones_token_for_token(kernel_engine):
    """On this CPU's kernels and on both kinds of CPU forced: exact mode runs the rows whose
    verify steps equal plain steps bit for bit, so speculation changes no token."""
    kernels, engine = kernel_engine
    grammar = Grammar("json_schema", json.dumps(SCHEMA))
    accepted = 0
    for sampling in SAMPLINGS:
        plain, text, _, stats = _reply(engine, QUOTE_JSON, "off", sampling, grammar=grammar)
        assert stats.speculation == "off" and stats.speculation_note is None
        jsonschema.validate(json.loads(text), SCHEMA)
        for mode in ("lookup", "auto"):
            ids, spec_text, _, stats = _reply(engine, QUOTE_JSON, mode, sampling,
                                              grammar=grammar)
            # exact mode: verify rows equal plain steps, on the rows this kind of CPU needs
            assert engine.decoder.verify_exact and engine.decoder.step_rows in STEP_ROWS[kernels]
            assert ids == plain, (sampling, mode)
            assert spec_text == text
            assert stats.speculation == "lookup" and stats.speculation_note is None
            assert stats.target_steps < len(ids) - 1  # accepted guesses saved steps
            accepted += stats.accepted
    assert accepted > 0


@pytest.mark.parametrize("choice", ["required", "function:get_weather", "auto"])
def test_tool_call_replies_speculate_and_equal_plain_ones_token_for_token(tool_engine,
                                                                         choice):
    specs = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    self_draft = DraftModel(_load(tool_engine.spec.root).decoder,
                            eos_ids=tool_engine.eos_token_ids)
    accepted = {"lookup": 0, "draft": 0}
    try:
        for sampling in SAMPLINGS:
            tool_engine.draft = None
            plain, text, calls, _ = _reply(tool_engine, QUOTE_CALL, "off", sampling,
                                           tools=TOOLS, tool_choice=choice)
            for call in calls:
                jsonschema.validate(json.loads(call.arguments), specs[call.name])
            if choice != "auto":
                assert calls
            for mode in ("lookup", "draft"):
                tool_engine.draft = self_draft if mode == "draft" else None
                ids, spec_text, spec_calls, stats = _reply(
                    tool_engine, QUOTE_CALL, mode, sampling, tools=TOOLS, tool_choice=choice)
                assert ids == plain, (sampling, mode)
                assert spec_text == text and spec_calls == calls
                assert stats.speculation == mode
                accepted[mode] += stats.accepted
    finally:
        tool_engine.draft = None
    # prompt lookup guesses the quoted call; the draft, the target itself, follows the
    # grammar on a fork of it, so its guesses are the target's
    assert accepted["lookup"] > 0 and accepted["draft"] > 0


def test_only_log_probabilities_keep_speculation_off_and_the_reply_says_why(engine):
    grammar = Grammar("json_schema", json.dumps(SCHEMA))
    _, _, _, stats = _reply(engine, QUOTE_JSON, "lookup", SAMPLINGS[0], grammar=grammar,
                            logprobs=2)
    assert stats.speculation == "off"
    assert stats.speculation_note == "off: log-probabilities were asked for"


def test_a_draft_the_grammar_refuses_midway_stops_short_and_the_reply_goes_on(engine):
    """A draft model drafts on a fork of the grammar; where the fork refuses a token (text
    after an auto grammar's marker that it does not take), the draft ends there instead of
    failing the reply."""
    from app.engine.grammar import GrammarError
    from app.engine.types import SamplingSettings

    class Refusing:
        """A grammar whose forks take two tokens, then refuse."""

        def __init__(self) -> None:
            self.taken = 0

        def fork(self):
            return Refusing()

        def mask(self, logits):
            return logits

        def allows(self, token):
            return True

        def valid_prefix(self, tokens):
            return len(tokens)

        def accept(self, token):
            if self.taken == 2:
                raise GrammarError("The reply could not follow its grammar: refused")
            self.taken += 1

    draft = DraftModel(_load(engine.spec.root).decoder, eos_ids=engine.eos_token_ids)
    prompt = engine.tokenizer.encode("the keeper lit the lamp")
    for sampling in (SamplingSettings(temperature=0.0), SamplingSettings(temperature=1.0,
                                                                          seed=3)):
        proposer = draft.proposer(sampling)
        free = proposer.propose(prompt, 5)
        proposal = proposer.propose(prompt, 5, constraint=Refusing())
        assert len(free.tokens) == 5 and len(proposal.tokens) == 2
        assert proposal.q is None or len(proposal.q) == 2
