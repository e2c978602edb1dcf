"""Speculative decoding gives exactly the target's output (greedy) or distribution (sampling),
on every decode path, and leaves the KV cache as a plain run would."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from app.engine.engine import Engine
from app.engine.generation import stream_generate
from app.engine.sampling import Sampler
from app.engine.speculative import (
    AdaptiveK,
    DraftModel,
    FixedK,
    PromptLookup,
    Proposal,
    dense,
    prior_cost,
    verify_sampled,
    verify_tolerance,
)
from app.engine.types import GenerationSettings, SamplingSettings
from tests.fixtures.quantized import KERNELS, load_with_kernels
from tests.fixtures.tiny_models import build_gqa_model, build_plain_kv_model
from tests.rounding import kv_atol

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=40)
PATHS = {
    "plain": "plain_model_dir",
    "plain_fp16": "plain_fp16_model_dir",
    "gqa": "gqa_model_dir",
    "gqa_fp16": "gqa_fp16_model_dir",
    "gqa_int4": "gqa_int4_model_dir",
    "nokv": "nokv_model_dir",
}


@pytest.fixture(scope="module")
def other_plain_dir(tmp_path_factory):
    """A second tiny model with the same tokenizer (another seed, one layer): a real draft
    that disagrees with the target now and then."""
    return build_plain_kv_model(tmp_path_factory.mktemp("draft_plain"), seed=5, num_layers=1)


@pytest.fixture(scope="module")
def small_context_dirs(tmp_path_factory):
    """Tiny models with a 64-token context, to fill it."""
    return {
        "plain": build_plain_kv_model(tmp_path_factory.mktemp("ctx_plain"), context_length=64),
        "gqa": build_gqa_model(tmp_path_factory.mktemp("ctx_gqa"), context_length=64),
    }


def _load(folder, *, exact: bool = True) -> Engine:
    return Engine.load(folder, provider="cpu", threads=1, huge_pages=False, exact=exact)


def _prompts(vocab: int, count: int, seed: int) -> list[list[int]]:
    """Seeded prompts; half repeat a stretch, so prompt lookup finds matches."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        body = [int(t) for t in rng.integers(3, vocab, size=int(rng.integers(2, 30)))]
        out.append(body * 3 if i % 2 else body)
    return out


def _verify_rows_and_steps(engine: Engine, prompt, tokens):
    """A verify step's rows for ``tokens`` after ``prompt``, and the plain steps' logits."""
    decoder = engine.decoder
    cache = engine.new_cache()
    decoder.feed(cache, prompt)
    rows = decoder.verify(cache, tokens)
    step_cache = engine.new_cache()
    decoder.feed(step_cache, prompt)
    steps = [decoder.step(step_cache, t).copy() for t in tokens]
    assert len(step_cache) == len(prompt) + len(tokens)  # the scratch rows are cut off
    return rows, steps


def _run(engine: Engine, cache, prompt, settings, *, draft=None, policy=None, eos=None,
         reuse=False, quoting=False):
    chunks = list(stream_generate(
        engine.decoder, cache, prompt, settings, tokenizer=engine.tokenizer,
        eos_ids=engine.eos_token_ids if eos is None else eos, reuse=reuse, draft=draft,
        speculation_policy=policy, quoting=quoting,
    ))
    tokens = [c.token_id for c in chunks if c.token_id is not None]
    return tokens, "".join(c.text for c in chunks), chunks[-1]


def _modes(engine: Engine, other: Engine | None):
    """(label, speculation, draft, policy) for every proposer under test."""
    self_draft = DraftModel(_load(engine.spec.root).decoder, eos_ids=engine.eos_token_ids)
    modes = [
        ("lookup", "lookup", None, FixedK(4)),
        ("lookup-adaptive", "lookup", None, None),
        ("self-draft", "draft", self_draft, FixedK(5)),
    ]
    if other is not None:
        modes.append(("other-draft", "draft",
                      DraftModel(other.decoder, eos_ids=engine.eos_token_ids), FixedK(3)))
    return modes


def _agreeing_length(engine: Engine, prompt: list[int], reference: list[int],
                     tolerance: float) -> int:
    """How many reference tokens a plain run decides by more than ``tolerance`` (logits of
    the chosen token over the runner-up): past a closer call, rounding decides."""
    cache = engine.new_cache()
    logits = engine.decoder.feed(cache, prompt)
    for i, token in enumerate(reference):
        top2 = np.sort(logits)[-2:]
        if top2[1] - top2[0] < tolerance:
            return i
        logits = engine.decoder.step(cache, token)
    return len(reference)


def _speculated_replies(name: str, request, other_plain_dir):
    """Per seeded prompt: the plain greedy reply, then each proposer's speculated one (label,
    tokens, text, final chunk); ``totals`` (label -> [proposed, accepted, target steps])
    fills as they run."""
    engine = _load(request.getfixturevalue(PATHS[name]))
    other = _load(other_plain_dir)
    off = replace(GREEDY, speculation="off")
    totals: dict[str, list[int]] = {}
    runs = []
    for prompt in _prompts(engine.graph.vocab_size, 8, seed=len(name)):
        reference = _run(engine, engine.new_cache(), prompt, off)
        assert reference[2].stats.proposed == 0
        replies = []
        for label, mode, draft, policy in _modes(engine, other):
            settings = replace(GREEDY, speculation=mode)
            tokens, text, final = _run(engine, engine.new_cache(), prompt, settings,
                                       draft=draft, policy=policy)
            assert final.stats.generated_tokens == len(tokens)
            assert final.stats.speculation == ("lookup" if mode == "lookup" else "draft")
            total = totals.setdefault(label, [0, 0, 0])
            total[0] += final.stats.proposed
            total[1] += final.stats.accepted
            total[2] += final.stats.target_steps
            replies.append((label, tokens, text, final))
        runs.append((prompt, reference, replies))
    return engine, runs, totals


def _proposers_did_their_part(totals) -> None:
    # the target verifying its own guesses accepts them all, in fewer target steps
    proposed, accepted, steps = totals["self-draft"]
    assert proposed > 0 and accepted == proposed
    assert steps < 8 * GREEDY.max_new_tokens
    assert totals["lookup"][1] > 0  # the repeated prompts were looked up and accepted
    assert totals["other-draft"][0] > totals["other-draft"][1]  # a real draft gets rejected


@pytest.mark.parametrize("name", [name for name in PATHS if name != "gqa_fp16"])
def test_greedy_output_equals_plain_decoding_on_every_path(name, request, other_plain_dir):
    """float32 attention (float16 KV is stored rounded, attention computes in float32) and
    the int4 graph's exact rows: every speculated reply is the plain one, token for token."""
    _, runs, totals = _speculated_replies(name, request, other_plain_dir)
    for seed, (_, (reference, ref_text, ref_final), replies) in enumerate(runs):
        for label, tokens, text, final in replies:
            assert tokens == reference, f"{name}/{label}: prompt {seed} diverged"
            assert text == ref_text and final.finish_reason == ref_final.finish_reason
    _proposers_did_their_part(totals)


# GroupQueryAttention on float16 KV computes in float16: a K-token step rounds differently
# from K one-token steps (as a whole-prompt prefill does), so where the target's top two
# logits are within float16 rounding (~1e-2 at these magnitudes) either token is "the"
# greedy one; the outputs must agree up to the first such tie. Where the ties fall depends
# on the CPU's float16 kernels, so the assertion covers the agreed prefix of every reply.
FLOAT16_TIE = 5e-2


def test_greedy_output_on_float16_gqa_equals_plain_decoding_up_to_its_first_near_tie(
        request, other_plain_dir):
    engine, runs, totals = _speculated_replies("gqa_fp16", request, other_plain_dir)
    agreed = [0, 0]
    for seed, (prompt, (reference, _, _), replies) in enumerate(runs):
        agree = _agreeing_length(engine, prompt, reference, FLOAT16_TIE)
        agreed[0] += agree
        agreed[1] += len(reference)
        for label, tokens, _, _ in replies:
            assert tokens[:agree] == reference[:agree], f"gqa_fp16/{label}: prompt {seed}"
    assert agreed[0] >= agreed[1] // 2  # near-ties are the exception
    _proposers_did_their_part(totals)


@pytest.mark.parametrize("name", ["plain", "gqa"])
def test_stop_string_eos_and_max_tokens_inside_an_accepted_run(name, request):
    """With the target as its own draft every guess is accepted, so each limit falls inside
    a run of up to six decided tokens; the output still ends exactly where a plain run ends."""
    engine = _load(request.getfixturevalue(PATHS[name]))
    draft = DraftModel(_load(engine.spec.root).decoder, eos_ids=engine.eos_token_ids)
    spec = replace(GREEDY, speculation="draft")
    off = replace(GREEDY, speculation="off")
    for prompt in _prompts(engine.graph.vocab_size, 6, seed=21):
        reference, ref_text, _ = _run(engine, engine.new_cache(), prompt, off)
        cut = len(reference) // 2 + 1
        cases = [
            (replace(spec, max_new_tokens=cut), replace(off, max_new_tokens=cut), None),
            (spec, off, frozenset({reference[cut]})),  # an EOS id in the middle of the run
        ]
        # a stop string that starts in the middle of the reply
        text_at_cut = engine.tokenizer.decode(reference[:cut])
        stop = ref_text[len(text_at_cut) : len(text_at_cut) + 3].strip()
        if len(stop) >= 2 and stop not in text_at_cut:
            cases.append((replace(spec, stop_strings=(stop,)), replace(off, stop_strings=(stop,)),
                          None))
        for with_spec, without, eos in cases:
            plain_cache = engine.new_cache()
            expected, exp_text, exp_final = _run(engine, plain_cache, prompt, without, eos=eos)
            cache = engine.new_cache()
            tokens, text, final = _run(engine, cache, prompt, with_spec, draft=draft,
                                       policy=FixedK(6), eos=eos)
            assert (tokens, text) == (expected, exp_text)
            assert final.finish_reason == exp_final.finish_reason
            assert final.stats.accepted == final.stats.proposed > 0
            # the cache covers what a plain run leaves: prompt + reply but the last token
            assert list(cache.tokens) == list(plain_cache.tokens)


@pytest.mark.parametrize("name", ["plain", "gqa"])
def test_the_context_fills_up_inside_an_accepted_run(name, small_context_dirs):
    engine = _load(small_context_dirs[name])
    draft = DraftModel(_load(engine.spec.root).decoder, eos_ids=engine.eos_token_ids)
    settings = replace(GREEDY, max_new_tokens=200)
    for prompt in _prompts(engine.graph.vocab_size, 4, seed=3):
        expected, _, exp_final = _run(engine, engine.new_cache(), prompt,
                                      replace(settings, speculation="off"), eos=())
        assert exp_final.finish_reason == "length"
        for mode, use_draft in (("draft", draft), ("lookup", None)):
            tokens, _, final = _run(engine, engine.new_cache(), prompt,
                                    replace(settings, speculation=mode), draft=use_draft,
                                    policy=FixedK(7), eos=())
            assert tokens == expected and final.finish_reason == "length"
            assert final.stats.context_used == engine.context_length


def test_sliding_window_speculates_only_where_no_eviction_happens(plain_model_dir):
    """A verify step must not evict (a rejection would leave fewer positions than a plain
    run keeps), so the window speculates until it is full and decodes plainly after; the
    tokens equal plain decoding over the same window throughout."""
    engine = _load(plain_model_dir)
    draft = DraftModel(_load(plain_model_dir).decoder, eos_ids=engine.eos_token_ids)
    settings = replace(GREEDY, max_new_tokens=60)
    for prompt in _prompts(engine.graph.vocab_size, 4, seed=8):
        window = engine.decoder.new_cache(sliding_window=48, sink=4)
        expected, _, _ = _run(engine, window, prompt, replace(settings, speculation="off"),
                              eos=())
        for mode, use_draft in (("draft", draft), ("lookup", None)):
            window = engine.decoder.new_cache(sliding_window=48, sink=4)
            tokens, _, final = _run(engine, window, prompt, replace(settings, speculation=mode),
                                    draft=use_draft, policy=FixedK(4), eos=())
            assert tokens == expected
            assert window.evicted_end > 0  # the window did slide
        assert final.stats.proposed > 0 or mode == "lookup"


@pytest.mark.parametrize("name", ["plain", "plain_fp16", "gqa", "gqa_fp16", "nokv"])
def test_kv_after_rejections_equals_a_fresh_run(name, request, other_plain_dir):
    engine = _load(request.getfixturevalue(PATHS[name]))
    draft = DraftModel(_load(other_plain_dir).decoder, eos_ids=engine.eos_token_ids)
    (kv_dtype,) = {layer.dtype for layer in engine.graph.kv_layers} or {"float32"}  # nokv
    rejected = 0
    for prompt in _prompts(engine.graph.vocab_size, 4, seed=13):
        cache = engine.new_cache()
        tokens, _, final = _run(engine, cache, prompt, replace(GREEDY, speculation="draft"),
                                draft=draft, policy=FixedK(4), eos=())
        rejected += final.stats.proposed - final.stats.accepted
        sequence = [*prompt, *tokens]
        assert list(cache.tokens) == sequence[:-1]
        after = engine.decoder.feed(cache, [sequence[-1]]).copy()
        fresh = engine.decoder.feed(engine.new_cache(), sequence)
        # within the KV format's rounding (tests/rounding.py): the steps and the fresh run
        # round the same float32 values into half-precision KV from sums in another order
        np.testing.assert_allclose(after, fresh, atol=kv_atol(kv_dtype), rtol=0)
    assert rejected > 0


@pytest.mark.parametrize("name", ["plain", "gqa", "nokv"])
def test_verify_rows_match_one_token_steps(name, request):
    engine = _load(request.getfixturevalue(PATHS[name]))
    decoder = engine.decoder
    prompt = _prompts(engine.graph.vocab_size, 2, seed=2)[1]
    cache = engine.new_cache()
    decoder.feed(cache, prompt)
    tokens = [5, 9, 17, 4, 33]
    rows = decoder.verify(cache, tokens)
    assert rows.shape == (len(tokens), engine.graph.vocab_size)
    assert len(cache) == len(prompt) + len(tokens)
    step_cache = engine.new_cache()
    decoder.feed(step_cache, prompt)
    for i, token in enumerate(tokens):
        np.testing.assert_allclose(rows[i], decoder.step(step_cache, token), atol=1e-4, rtol=0)


def test_a_quantized_graph_steps_in_pairs_so_verify_steps_match_bit_for_bit(
        gqa_int4_one_row_differs_dir):
    """Where MatMulNBits rounds a one-row step differently from a several-row one (AVX2: the
    starter's verify steps differed by ~1 logit; the fixture makes every CPU do so: the
    one-row difference asserted below is its own, not this CPU's),
    ``calibrate`` notices and runs one-token steps as two rows: then a verify step's rows
    equal the steps' logits exactly, so speculation cannot change a token, and the reply is
    the same with speculation on and off. The per-reply policy below is the inexact mode's
    (an exact decoder, the default, runs every reply's steps as two rows: checked at the
    end)."""
    engine = _load(gqa_int4_one_row_differs_dir, exact=False)
    decoder = engine.decoder
    prompt = _prompts(engine.graph.vocab_size, 2, seed=2)[1]
    tokens = [5, 9, 17, 4, 33]

    def rows_and_steps():
        return _verify_rows_and_steps(engine, prompt, tokens)

    rows, steps = rows_and_steps()  # one-row steps: the fixture's delta on every CPU
    assert decoder.step_rows == 1
    assert not any(np.array_equal(r, s) for r, s in zip(rows, steps, strict=True))
    assert decoder.graph.quantized_matmuls and verify_tolerance(decoder) == 0.0
    decoder.calibrate(tolerance=verify_tolerance(decoder))
    assert (decoder.one_row_agrees, decoder.pairs_agree) == (False, True)
    assert (decoder.step_rows, decoder.verify_agrees) == (1, False)
    decoder.choose_rows(pairs=True)
    assert (decoder.step_rows, decoder.verify_agrees, decoder.verify_exact) == (2, True, True)
    rows, steps = rows_and_steps()
    for i, step in enumerate(steps):
        assert np.array_equal(rows[i], step), f"row {i}"
    # A two-token verify (one guess in the pair's second row) runs on the steps' binding,
    # never the general path; its rows and the steps after it (the guess rejected) equal
    # plain steps' logits
    cache = engine.new_cache()
    decoder.feed(cache, prompt)
    mixed = [decoder.step(cache, tokens[0]).copy()]
    general = decoder._run
    decoder._run = lambda *args, **kwargs: pytest.fail("a two-token verify rebound")
    pair = decoder.verify(cache, tokens[1:3])
    assert len(cache) == len(prompt) + 3
    cache.trim_to(len(cache) - 1)  # the guess rejected
    mixed += [pair[0], *(decoder.step(cache, t).copy() for t in tokens[2:])]
    decoder._run = general
    for i, step in enumerate(steps):
        assert np.array_equal(mixed[i], step), f"step {i} around a two-token verify"
    assert np.array_equal(pair[1], steps[2])
    # past the KV buffer's first size (256 positions: it grows and is bound again)
    long_prompt = (prompt * 12)[:250]
    cache = engine.new_cache()
    decoder.feed(cache, long_prompt)
    steps = [decoder.step(cache, t).copy() for t in tokens * 2]
    assert cache.capacity > 256 and len(cache) == 260
    fresh = engine.new_cache()
    # the prompt as the cache above read it (one long chunk, on whichever session this
    # CPU's kernel choice gives it), then the six tokens the steps decoded as a short chunk
    # (the decode session)
    decoder.feed(fresh, long_prompt)
    decoder.feed(fresh, (tokens * 2)[:6])
    rows = decoder.verify(fresh, (tokens * 2)[6:])
    for i in range(4):
        assert np.array_equal(rows[i], steps[6 + i]), f"row {i} after growing"
    # A reply likely to quote its prompt runs two rows: "auto" speculates on this graph and
    # decides the tokens speculation off decides. Any other reply runs one row: "auto"
    # does not speculate there (verify steps would round otherwise), the tokens still agree.
    off_settings = replace(GREEDY, speculation="off")
    proposed = accepted = 0
    for prompt in _prompts(engine.graph.vocab_size, 4, seed=0):
        for quoting in (True, False):
            auto, _, auto_final = _run(engine, engine.new_cache(), prompt, GREEDY,
                                       quoting=quoting)
            off, _, _ = _run(engine, engine.new_cache(), prompt, off_settings, quoting=quoting)
            assert auto == off
            if quoting:
                assert auto_final.stats.speculation == "lookup"
                proposed += auto_final.stats.proposed
                accepted += auto_final.stats.accepted
            else:
                assert auto_final.stats.speculation == "off" and decoder.step_rows == 1
    assert proposed > accepted > 0
    # the second row rides along with a guess even where no n-gram repeats: what followed
    # the last token before (a prompt of distinct tokens: most tokens have occurred)
    unrepeated = list(range(3, min(engine.graph.vocab_size, 303)))
    auto, _, final = _run(engine, engine.new_cache(), unrepeated, GREEDY, quoting=True)
    off, _, _ = _run(engine, engine.new_cache(), unrepeated, off_settings, quoting=True)
    assert auto == off and final.stats.proposed >= final.stats.target_steps // 2
    # exact (the default): any reply runs two rows, so "auto" may speculate on every reply
    exact = _load(gqa_int4_one_row_differs_dir)
    for prompt in _prompts(exact.graph.vocab_size, 2, seed=0):
        auto, _, auto_final = _run(exact, exact.new_cache(), prompt, GREEDY)
        assert exact.decoder.step_rows == 2 and auto_final.stats.speculation == "lookup"
        off, _, _ = _run(exact, exact.new_cache(), prompt, off_settings)
        assert auto == off


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "inexact"])
def test_on_this_cpus_own_int4_kernels_calibration_tells_the_truth_and_speculation_is_exact(
        gqa_int4_model_dir, exact):
    """The same int4 graph on the kernels this CPU really has (each CPU kind rounds in its own
    way): ``calibrate`` never claims one-row steps agree bit for bit where a verify step's rows
    differ from them, a reply likely to quote runs the rows the calibration chose (one row
    where one-row steps agree: no two-row cost), its verify rows then equal its steps bit for
    bit, and speculated replies equal plain ones token for token, whatever it chose."""
    engine = _load(gqa_int4_model_dir, exact=exact)
    decoder = engine.decoder
    prompt = _prompts(engine.graph.vocab_size, 2, seed=2)[1]
    tokens = [5, 9, 17, 4, 33]

    def rows_equal_steps() -> bool:
        rows, steps = _verify_rows_and_steps(engine, prompt, tokens)
        return all(np.array_equal(r, s) for r, s in zip(rows, steps, strict=True))

    one_row_equal = rows_equal_steps()
    assert verify_tolerance(decoder) == 0.0
    decoder.calibrate(tolerance=0.0)
    assert decoder.one_row_agrees is not None
    assert one_row_equal or not decoder.one_row_exact
    decoder.choose_rows(pairs=True)
    pairs_chosen = not decoder.one_row_agrees and decoder.pairs_agree
    assert decoder.step_rows == (2 if pairs_chosen else 1)
    # whichever it chose, exactness is what every CPU gets (the forced kinds of CPU:
    # test_verify_rows_equal_plain_steps_bit_for_bit_whichever_rows_calibration_picks)
    assert decoder.verify_exact and rows_equal_steps()
    off_settings = replace(GREEDY, speculation="off")
    speculated = {True: set(), False: set()}
    for prompt in _prompts(engine.graph.vocab_size, 3, seed=4):
        for quoting in (True, False):
            auto, _, final = _run(engine, engine.new_cache(), prompt, GREEDY, quoting=quoting)
            off, _, _ = _run(engine, engine.new_cache(), prompt, off_settings, quoting=quoting)
            assert auto == off, (quoting, final.stats.speculation)
            speculated[quoting].add(final.stats.speculation)
    # "auto" speculates on a quoting reply wherever one-row or two-row steps agree with verify
    # steps; on any other reply too when exact (every reply runs the rows that agree), else
    # only where one-row steps do
    agree_quoting = decoder.one_row_agrees or decoder.pairs_agree
    agree_plain = agree_quoting if exact else decoder.one_row_agrees
    assert speculated == {True: {"lookup" if agree_quoting else "off"},
                          False: {"lookup" if agree_plain else "off"}}


#: What ``calibrate`` finds on each kind of CPU (tests/fixtures/quantized.py ``KERNELS``):
#: (one_row_agrees, pairs_agree), and the rows a one-token step then runs where exactness
#: is asked for (a quoting reply, or any reply of an exact decoder)
CALIBRATED = {"one_row_differs": ((False, True), 2), "one_row_alike": ((True, False), 1)}


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "inexact"])
@pytest.mark.parametrize("kernels", KERNELS)
def test_verify_rows_equal_plain_steps_bit_for_bit_whichever_rows_calibration_picks(
        gqa_int4_one_row_differs_dir, kernels, exact):
    """Both kinds of CPU on every machine: where one-row steps round like several-row runs
    (AVX-512 VNNI) calibration keeps one row; where they do not (AVX2, AMX) it picks two.
    Either way a verify step's rows then equal plain steps' logits bit for bit, "auto"
    speculates on the replies whose steps run those rows, and every speculated reply equals
    the plain one token for token."""
    engine = load_with_kernels(gqa_int4_one_row_differs_dir, kernels, exact=exact)
    decoder = engine.decoder
    prompt = _prompts(engine.graph.vocab_size, 2, seed=2)[1]
    tokens = [5, 9, 17, 4, 33]

    def rows_and_steps():
        rows, steps = _verify_rows_and_steps(engine, prompt, tokens)
        return [np.array_equal(r, s) for r, s in zip(rows, steps, strict=True)]

    (agree, rows) = CALIBRATED[kernels]
    assert decoder.step_rows == 1  # before any reply: one-row steps, as the CPU rounds them
    assert all(rows_and_steps()) is (kernels == "one_row_alike")
    assert (decoder.one_row_agrees, decoder.pairs_agree) == agree
    decoder.choose_rows(pairs=True)
    assert (decoder.step_rows, decoder.verify_agrees, decoder.verify_exact) == (rows, True, True)
    assert all(rows_and_steps())
    off_settings = replace(GREEDY, speculation="off")
    speculated = {True: set(), False: set()}
    step_rows = {True: set(), False: set()}
    for prompt in _prompts(engine.graph.vocab_size, 3, seed=4):
        for quoting in (True, False):
            auto, _, final = _run(engine, engine.new_cache(), prompt, GREEDY, quoting=quoting)
            step_rows[quoting].add(decoder.step_rows)
            off, _, _ = _run(engine, engine.new_cache(), prompt, off_settings, quoting=quoting)
            assert auto == off, (quoting, final.stats.speculation)
            speculated[quoting].add(final.stats.speculation)
    # a reply that is not quoting runs one row in the inexact mode: "auto" speculates there
    # only where one-row steps agree
    plain_exact = exact or kernels == "one_row_alike"
    assert speculated == {True: {"lookup"}, False: {"lookup" if plain_exact else "off"}}
    assert step_rows == {True: {rows}, False: {rows if exact else 1}}


def test_a_long_user_message_makes_a_quoting_reply_with_two_row_steps(
        gqa_int4_one_row_differs_dir):
    """The chat decides from the last user message alone (pasted text, code): the rows a
    reply runs must not depend on the speculation setting, so "auto" equals "off"."""
    from app.engine.speculative import QUOTING_MIN_TOKENS
    from app.engine.types import Message

    engine = _load(gqa_int4_one_row_differs_dir, exact=False)
    pasted = "the keeper lit the lamp and logged the ships " * 12
    assert len(engine.tokenizer.encode(pasted)) >= QUOTING_MIN_TOKENS
    short = "hello there"
    for text, rows in ((pasted, 2), (short, 1)):
        replies = []
        for mode in ("auto", "off"):
            messages = [Message("user", f"Rewrite this: {text}" if text == pasted else text)]
            # no reuse: in the inexact mode a cached prompt's tail may read otherwise
            chunks = list(engine.chat(messages, replace(GREEDY, speculation=mode),
                                      reuse=False))
            assert engine.decoder.step_rows == rows, (text[:10], mode)
            replies.append([c.token_id for c in chunks if c.token_id is not None])
        assert replies[0] == replies[1]


def test_a_chat_that_repeats_itself_makes_a_quoting_reply_too(gqa_int4_one_row_differs_dir):
    """Short messages, but a conversation whose turns echo each other (a small model
    repeating its replies): the prompt's own repetition decides two-row steps, so "auto" may
    speculate, and it still decides what "off" decides."""
    from app.engine.speculative import QUOTING_MIN_TOKENS, repetition_rate
    from app.engine.types import Message

    engine = _load(gqa_int4_one_row_differs_dir, exact=False)
    echo = "the keeper lit the lamp and logged the ships at dawn"
    assert len(engine.tokenizer.encode(echo)) < QUOTING_MIN_TOKENS
    history = []
    for turn in range(6):
        history += [Message("user", f"and then {turn}?"), Message("assistant", echo)]
    history.append(Message("user", "and then?"))
    ids = engine.encode_chat(history)
    assert repetition_rate(ids) > 0.5
    replies = []
    for mode in ("auto", "off"):
        chunks = list(engine.chat(history, replace(GREEDY, speculation=mode), reuse=False))
        assert engine.decoder.step_rows == 2, mode
        replies.append([c.token_id for c in chunks if c.token_id is not None])
    assert replies[0] == replies[1]
    fresh = [Message("user", "and then?")]  # the same last message alone: one row
    list(engine.chat(fresh, GREEDY))
    assert engine.decoder.step_rows == 1


def test_repetition_rate_is_what_prompt_lookup_would_have_guessed():
    from app.engine.speculative import (
        REPEAT_MIN_TOKENS,
        likely_quoting,
        repetition_rate,
    )

    assert repetition_rate([]) == 0.0 and repetition_rate([7]) == 0.0
    distinct = list(range(3, 503))
    assert repetition_rate(distinct) == 0.0
    looped = list(range(3, 53)) * 4  # the first lap cannot be guessed, the next three can
    assert repetition_rate(looped) == pytest.approx(148 / 199)
    # only the window counts: the same loop after a long distinct stretch
    assert repetition_rate(distinct * 3 + looped, window=len(looped)) == repetition_rate(looped)
    assert likely_quoting(distinct, 64) and not likely_quoting(distinct, 63)
    assert likely_quoting(looped, 5)
    assert not likely_quoting(looped[:REPEAT_MIN_TOKENS - 1], 5)  # too short to tell


def test_float_gqa_graphs_step_in_pairs_where_pairs_are_bit_for_bit(gqa_model_dir,
                                                                      plain_model_dir):
    """A float GroupQueryAttention graph's one-row steps are within rounding (~1e-7) of its
    several-row runs, its two-row steps equal them bit for bit: exact mode runs them (every
    position's logits then come from the same kernels, however it was reached), the inexact
    mode where a reply asks for pairs. A graph whose pairs do not fix it keeps one row."""
    for exact in (True, False):
        decoder = _load(gqa_model_dir, exact=exact).decoder
        decoder.calibrate(tolerance=verify_tolerance(decoder))
        assert (decoder.one_row_agrees, decoder.one_row_exact) == (True, False)
        assert decoder.pairs_agree
        decoder.choose_rows(pairs=False)
        assert decoder.step_rows == (2 if exact else 1)
        assert decoder.verify_exact == exact
        decoder.choose_rows(pairs=True)  # a quoting reply: two rows, verify bit for bit
        assert decoder.step_rows == 2 and decoder.verify_exact
    plain = _load(plain_model_dir).decoder  # its steps rebind: no scratch row to cut off
    plain.choose_rows(pairs=True)
    assert plain.step_rows == 1 and plain.verify_agrees and not plain.verify_exact


# -- sampling: the distribution is the target's ----------------------------------------------


def _tv(counts: dict, exact: dict) -> float:
    total = sum(counts.values())
    keys = set(counts) | set(exact)
    return 0.5 * sum(abs(counts.get(k, 0) / total - exact.get(k, 0.0)) for k in keys)


@pytest.mark.parametrize("q_kind", ["point", "draft"])
def test_speculative_sampling_draws_from_the_target_distribution(q_kind):
    """On a 6-token vocabulary with top-k and a repetition penalty, the first decided token
    and the pair of the first two follow the target's filtered distribution: total variation
    distance below 0.04 over 8,000 seeded draws (the sampling error is ~0.01)."""
    vocab = 6
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((3, vocab)).astype(np.float32) * 1.5
    settings = SamplingSettings(temperature=0.9, top_k=5, repetition_penalty=1.3, seed=1)
    history = [0, 3]
    exact = Sampler(settings)
    p0 = dense(*exact.distribution(rows[0], history), vocab)
    draft_q = [dense(*Sampler(replace(settings, temperature=1.6)).distribution(r, history),
                     vocab) for r in rows[1:]]
    guesses = (2, 4)
    sampler = Sampler(settings)
    firsts: dict[int, int] = {}
    pairs: dict[tuple[int, int], int] = {}
    draws = 8_000
    draw_rng = np.random.default_rng(7)
    for _ in range(draws):
        if q_kind == "point":
            proposal = Proposal(guesses)
        else:
            g0, g1 = (int(draw_rng.choice(vocab, p=q)) for q in draft_q)
            proposal = Proposal((g0, g1), (draft_q[0], draft_q[1]))
        accepted, token = verify_sampled(rows, proposal, sampler, list(history))
        decided = [*proposal.tokens[:accepted], token]
        firsts[decided[0]] = firsts.get(decided[0], 0) + 1
        if accepted >= 1:  # the second token came from row 1 given the first guess
            key = (decided[0], decided[1])
            pairs[key] = pairs.get(key, 0) + 1
    assert _tv(firsts, {i: float(p) for i, p in enumerate(p0)}) < 0.04
    # given the first token equals the guess row 1 applies: its conditional is p1
    first = proposal.tokens[0] if q_kind == "point" else None
    for (a, _b), _count in list(pairs.items()):
        if first is None:
            first = a
        break
    conditional = {b: c for (a, b), c in pairs.items() if a == first}
    p1 = dense(*Sampler(settings).distribution(rows[1], [*history, first]), vocab)
    assert sum(conditional.values()) > 400
    assert _tv(conditional, {i: float(p) for i, p in enumerate(p1)}) < 0.07


def test_sampled_replies_follow_the_target_distribution(plain_model_dir, other_plain_dir):
    """End to end on a tiny model (top-k 4 makes the vocabulary tiny): the first two sampled
    tokens with a draft model proposing follow the target's exact joint distribution."""
    engine = _load(plain_model_dir)
    draft = DraftModel(_load(other_plain_dir).decoder, eos_ids=())
    sampling = SamplingSettings(temperature=1.0, top_k=4, seed=None)
    prompt = [5, 40, 77, 12]
    decoder = engine.decoder
    exact_sampler = Sampler(sampling)
    cache = engine.new_cache()
    p0_ids, p0 = exact_sampler.distribution(decoder.feed(cache, prompt), prompt)
    exact: dict[tuple[int, int], float] = {}
    for a, pa in zip(p0_ids, p0, strict=True):
        c = engine.new_cache()
        decoder.feed(c, prompt)
        ids, probs = exact_sampler.distribution(decoder.step(c, int(a)), [*prompt, int(a)])
        for b, pb in zip(ids, probs, strict=True):
            exact[(int(a), int(b))] = float(pa * pb)
    counts: dict[tuple[int, int], int] = {}
    draws = 1000
    for seed in range(draws):
        settings = GenerationSettings(sampling=replace(sampling, seed=seed), max_new_tokens=3,
                                      speculation="draft")
        tokens, _, final = _run(engine, engine.new_cache(), prompt, settings, draft=draft,
                                policy=FixedK(2), eos=())
        assert final.stats.proposed >= 1  # the second token came from a verify step
        key = tuple(tokens[:2])
        counts[key] = counts.get(key, 0) + 1
    # 16 outcomes, 1000 draws: the expected TV of an exact sampler is ~0.05
    assert _tv(counts, exact) < 0.1


#: seeded samplings: low and high temperature, top-k / top-p, a repetition penalty
SEEDED_SAMPLINGS = [
    SamplingSettings(temperature=0.4, seed=1),
    SamplingSettings(temperature=1.0, top_k=40, top_p=0.95, seed=1234),
    SamplingSettings(temperature=0.7, min_p=0.05, repetition_penalty=1.2, seed=9),
]


@pytest.mark.parametrize("kernels", ["this_cpu", "one_row_differs", "one_row_alike", "float"])
def test_a_seeded_sampled_reply_with_speculation_is_the_plain_one_token_for_token(
        kernels, request, other_plain_dir):
    """Every verified position is decided by the draw the plain run makes there, so a seeded
    reply speculated by prompt lookup, "auto", the target as its own draft and another
    model's draft is the seed's reply without speculation, token for token, with guesses
    accepted and rejected (standard speculative sampling gives the same distribution, not
    the same draws). On an exact int4 engine, on this CPU's kernels and on both kinds made,
    and on a float GroupQueryAttention graph (whose exact mode steps in pairs)."""
    if kernels in ("this_cpu", "float"):
        folder = "gqa_int4_model_dir" if kernels == "this_cpu" else "gqa_model_dir"
        engine = _load(request.getfixturevalue(folder))
    else:
        engine = load_with_kernels(request.getfixturevalue("gqa_int4_one_row_differs_dir"),
                                   kernels)
    modes = [("auto", "auto", None, None), *_modes(engine, _load(other_plain_dir))]
    proposed = accepted = 0
    for sampling in SEEDED_SAMPLINGS:
        for prompt in _prompts(engine.graph.vocab_size, 4, seed=17):
            settings = replace(GREEDY, sampling=sampling, max_new_tokens=24)
            plain, _, final = _run(engine, engine.new_cache(), prompt,
                                   replace(settings, speculation="off"))
            assert final.stats.proposed == 0
            for label, mode, draft, policy in modes:
                tokens, _, final = _run(engine, engine.new_cache(), prompt,
                                        replace(settings, speculation=mode), draft=draft,
                                        policy=policy)
                assert engine.decoder.verify_exact
                assert tokens == plain, (sampling, label, prompt)
                proposed += final.stats.proposed
                accepted += final.stats.accepted
    assert 0 < accepted < proposed  # guesses landed, and others were rejected


def test_auto_does_not_speculate_a_seeded_reply_on_rows_a_rounding_apart(plain_model_dir):
    """A float graph whose verify rows are within ~1e-6 of its one-row steps, not bit for bit
    (two-row steps cannot run on its rebind path): a draw on them could land on another
    token, so "auto" leaves a seeded sampled reply to plain steps (a greedy one keeps
    speculating: the tie margin covers it)."""
    engine = _load(plain_model_dir)
    assert engine.decoder.verify_agrees and not engine.decoder.verify_exact
    prompt = _prompts(engine.graph.vocab_size, 2, seed=4)[1]
    seeded = replace(GREEDY, sampling=SamplingSettings(temperature=0.9, seed=7),
                     speculation="auto")
    _, _, final = _run(engine, engine.new_cache(), prompt, seeded)
    assert final.stats.speculation == "off" and final.stats.proposed == 0
    _, _, final = _run(engine, engine.new_cache(), prompt, replace(GREEDY, speculation="auto"))
    assert final.stats.speculation == "lookup" and final.stats.proposed > 0


# -- the proposers and the K policy -----------------------------------------------------------


def test_prompt_lookup_prefers_the_longest_and_latest_match():
    lookup = PromptLookup(max_ngram=3, min_ngram=1)
    history = [1, 2, 3, 9, 9, 2, 3, 7, 8, 5, 2, 3]
    # "2 3" occurred twice before; the 3-gram "5 2 3" never did: the latest "2 3" wins
    assert lookup.propose(history, 3).tokens == (7, 8, 5)
    history += [7]
    # now "2 3 7" (3-gram) matches its earlier occurrence
    assert lookup.propose(history, 2).tokens == (8, 5)
    assert PromptLookup().propose([4, 5, 6], 4).tokens == ()  # no repeat, no guess
    assert PromptLookup(min_ngram=1).propose([4, 4], 2).tokens == (4,)  # never its own suffix
    # a single token counts only when asked: what followed its last occurrence
    plain = PromptLookup()
    assert plain.propose([4, 5, 6, 4], 2).tokens == ()
    assert plain.propose([4, 5, 6, 4], 2, shortest=1).tokens == (5, 6)


def test_adaptive_k_widens_shrinks_and_turns_off():
    policy = AdaptiveK(max_k=8, probe_every=4)
    for _ in range(30):
        policy.record(8, 8)
    assert policy.choose(16) == 8
    assert policy.choose(3) == 3  # never more than there is room for
    for _ in range(60):
        policy.record(2, 0)
    assert policy.acceptance < 0.1
    assert [policy.choose(16) for _ in range(4)] == [0, 0, 0, 1]  # off, with a probe
    assert AdaptiveK(allow_off=False, prior_acceptance=0.01).choose(8) == 1


def test_adaptive_k_follows_the_measured_verify_cost():
    cheap, dear = AdaptiveK(), AdaptiveK()
    for policy in (cheap, dear):
        for _ in range(10):
            policy.record(4, 3)  # acceptance about 0.75
            policy.record_plain(0.010)
    for k in range(2, 10):
        cheap.record_time(k, 0.010 * (1 + 0.02 * k))  # verify steps almost free (a GPU)
        dear.record_time(k, 0.010 * k)  # verify steps cost as much as k plain steps
    assert cheap.cost(5) < prior_cost(5) < dear.cost(5)
    assert cheap.choose(16) > 4
    assert dear.choose(16) == 0


def test_a_guess_rides_free_in_a_two_row_step():
    """With two-row plain steps a one-guess verify step costs nothing extra: it is taken
    even at an acceptance rate too low for a one-row decoder to speculate."""
    one_row, two_rows = AdaptiveK(prior_acceptance=0.03), AdaptiveK(prior_acceptance=0.03,
                                                                     plain_rows=2)
    assert one_row.choose(8) == 0
    assert two_rows.choose(8) == 1
    assert two_rows.cost(2) == 1.0 and two_rows.cost(3) > 1.0
    # ... until measured otherwise: where a verify step's own overhead (a tiny model) makes
    # it dearer than the plain two-row step, the guess is no longer free
    for _ in range(5):
        two_rows.record_plain(0.001)
        two_rows.record_time(2, 0.0014)
    assert two_rows.cost(2) == pytest.approx(1.4)
    assert two_rows.choose(8) == 0


def test_a_seeded_sampled_reply_does_not_depend_on_step_times(plain_model_dir, monkeypatch):
    """A seeded sampled reply keeps the prior costs, so the same seed gives the same reply in
    the same steps however fast the machine was (its draft proposes: "auto" leaves a seeded
    reply on this float graph to plain steps)."""
    untimed = AdaptiveK(timed=False)
    before = [untimed.choose(8), untimed.cost(5)]
    untimed.record_plain(0.001)
    untimed.record_time(5, 1.0)  # verify steps look ruinously slow: a timed policy would stop
    assert [untimed.choose(8), untimed.cost(5)] == before

    engine = _load(plain_model_dir)
    draft = DraftModel(_load(plain_model_dir).decoder)  # the target itself: guesses land
    prompt = _prompts(engine.graph.vocab_size, 2, seed=4)[1]
    seeded = replace(GREEDY, sampling=SamplingSettings(temperature=0.9, seed=7),
                     speculation="draft")
    greedy = replace(GREEDY, speculation="auto")

    def reply(settings):
        draft.cache.reset()
        tokens, _, last = _run(engine, engine.new_cache(), prompt, settings, draft=draft)
        return tokens, last.stats

    fast = {"seeded": reply(seeded), "greedy": reply(greedy)}
    init = AdaptiveK.__init__

    def on_a_slow_machine(self, **options):  # verify steps measured at 1000x a plain step
        init(self, **options)
        self.record_plain(0.001)
        for positions in range(2, 10):
            self.record_time(positions, 1.0)

    monkeypatch.setattr(AdaptiveK, "__init__", on_a_slow_machine)
    slow = {"seeded": reply(seeded), "greedy": reply(greedy)}
    assert fast["seeded"][1].proposed > 0
    assert slow["seeded"][0] == fast["seeded"][0]  # the same seed, the same reply
    assert slow["seeded"][1].target_steps == fast["seeded"][1].target_steps
    # the timings do reach a greedy reply's policy: it stops guessing, with the same tokens
    assert fast["greedy"][1].proposed > slow["greedy"][1].proposed
    assert slow["greedy"][0] == fast["greedy"][0]


def test_prior_cost_matches_the_measured_points():
    assert [prior_cost(n) for n in (1, 2, 4, 8)] == [1.0, 1.35, 2.1, 3.3]
    assert prior_cost(3) == pytest.approx(1.725)
    assert prior_cost(16) == pytest.approx(5.7)


def test_auto_is_the_default_and_reports_what_ran(plain_model_dir):
    engine = _load(plain_model_dir)
    prompt = _prompts(engine.graph.vocab_size, 2, seed=4)[1]
    chunks = list(engine.generate(prompt, GREEDY, reuse=False))
    assert GREEDY.speculation == "auto"
    assert chunks[-1].stats.speculation == "lookup"
    off = list(engine.generate(prompt, replace(GREEDY, speculation="off"), reuse=False))
    assert off[-1].stats.speculation == "off"
    assert off[-1].stats.target_steps == off[-1].stats.generated_tokens - 1
    assert [c.token_id for c in chunks] == [c.token_id for c in off]
    engine.draft = DraftModel(_load(plain_model_dir).decoder)
    drafted = list(engine.generate(prompt, GREEDY, reuse=False))
    assert drafted[-1].stats.speculation == "draft"
    assert [c.token_id for c in drafted] == [c.token_id for c in off]


def test_speculation_setting_from_overrides():
    assert GenerationSettings.from_model({}, {"speculation": "lookup"}).speculation == "lookup"
    with pytest.raises(ValueError, match="speculation"):
        GenerationSettings.from_model({}, {"speculation": "sometimes"})


def test_auto_measures_whether_verify_steps_round_like_one_token_steps(plain_model_dir):
    """Some kernels (quantized matmuls) round a several-row step differently; "auto" checks
    once per decoder and stays off where verify logits differ from one-token steps."""
    engine = _load(plain_model_dir)
    prompt = _prompts(engine.graph.vocab_size, 2, seed=4)[1]
    assert engine.decoder.one_row_agrees is not None  # measured while loading
    first = list(engine.generate(prompt, GREEDY, reuse=False))
    assert engine.decoder.verify_agrees is True  # the fixture's graph: exact
    assert first[-1].stats.proposed > 0
    engine.decoder.one_row_agrees = False  # as measured on the starter's quantized graph
    plain = list(engine.generate(prompt, GREEDY, reuse=False))
    assert plain[-1].stats.speculation == "off"
    forced = list(engine.generate(prompt, replace(GREEDY, speculation="lookup"), reuse=False))
    assert forced[-1].stats.speculation == "lookup" and forced[-1].stats.proposed > 0
    assert [c.token_id for c in plain] == [c.token_id for c in first]
