"""Sampling: each filter on tiny arrays with exact results; the fast sampler matches the
reference filter chain; seeded draws are reproducible and follow the filtered softmax."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.engine.sampling import (
    Sampler,
    apply_min_p,
    apply_presence_frequency_penalty,
    apply_repetition_penalty,
    apply_temperature,
    apply_top_k,
    apply_top_p,
    make_sampler,
    softmax,
    token_counts,
)
from app.engine.types import SamplingSettings

INF = np.inf


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def logits_of(*probs: float) -> np.ndarray:
    return np.log(np.array(probs, dtype=np.float64)).astype(np.float32)


# -- filters on four-element arrays ---------------------------------------------------------


def test_temperature():
    out = apply_temperature(f32(1, 2, -4, 0), 2.0)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, f32(0.5, 1, -2, 0))
    with pytest.raises(ValueError):
        apply_temperature(f32(1), 0.0)


def test_top_k():
    np.testing.assert_array_equal(apply_top_k(f32(1, 3, 2, 0), 2), f32(-INF, 3, 2, -INF))
    np.testing.assert_array_equal(apply_top_k(f32(1, 3, 3, 0), 1), f32(-INF, 3, 3, -INF))
    np.testing.assert_array_equal(apply_top_k(f32(1, 3, 2, 0), 0), f32(1, 3, 2, 0))
    np.testing.assert_array_equal(apply_top_k(f32(1, 3, 2, 0), 4), f32(1, 3, 2, 0))


def test_top_p_keeps_the_token_that_crosses_p():
    logits = logits_of(0.15, 0.5, 0.05, 0.3)
    kept = lambda p: np.isfinite(apply_top_p(logits, p)).tolist()  # noqa: E731
    assert kept(0.4) == [False, True, False, False]
    assert kept(0.79) == [False, True, False, True]
    assert kept(0.85) == [True, True, False, True]
    assert kept(0.999) == [True, True, True, True]
    assert kept(1.0) == [True, True, True, True]
    np.testing.assert_array_equal(apply_top_p(logits, 0.85)[[0, 1, 3]], logits[[0, 1, 3]])


def test_min_p_is_relative_to_the_best_token():
    logits = logits_of(0.15, 0.5, 0.05, 0.3)
    assert np.isfinite(apply_min_p(logits, 0.2)).tolist() == [True, True, False, True]
    assert np.isfinite(apply_min_p(logits, 0.5)).tolist() == [False, True, False, True]
    np.testing.assert_array_equal(apply_min_p(logits, 0.0), logits)


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    out = apply_repetition_penalty(f32(2, -2, 1, 0.5), [0, 1, 0], 2.0)
    np.testing.assert_array_equal(out, f32(1, -4, 1, 0.5))
    np.testing.assert_array_equal(apply_repetition_penalty(f32(2, -2), [0], 1.0), f32(2, -2))


def test_presence_and_frequency_penalties_use_counts():
    ids, counts = token_counts([2, 0, 0, 0])
    np.testing.assert_array_equal(ids, [0, 2])
    np.testing.assert_array_equal(counts, [3, 1])
    out = apply_presence_frequency_penalty(f32(1, 1, 1, 1), ids, counts, 0.5, 0.25)
    np.testing.assert_array_equal(out, f32(-0.25, 1, 0.25, 1))


def test_filters_do_not_modify_their_input():
    logits = f32(1, 3, 2, 0)
    for out in (apply_top_k(logits, 1), apply_top_p(logits, 0.5), apply_min_p(logits, 0.9),
                apply_repetition_penalty(logits, [1], 2.0)):
        assert out is not logits
    np.testing.assert_array_equal(logits, f32(1, 3, 2, 0))


# -- the sampler ----------------------------------------------------------------------------


def settings(**kw) -> SamplingSettings:
    return SamplingSettings(**{"temperature": 1.0, "seed": 0, **kw})


def test_greedy_is_argmax_after_penalties():
    logits = f32(5.0, 4.9, 1.0, -3.0)
    assert make_sampler(settings(temperature=0))(logits, [0]) == 0
    assert make_sampler(settings(temperature=0, repetition_penalty=2.0))(logits, [0]) == 1
    assert make_sampler(settings(temperature=0, presence_penalty=0.2))(logits, [0, 2]) == 1
    assert make_sampler(settings(temperature=0, frequency_penalty=0.05))(logits, [0]) == 0
    assert make_sampler(settings(temperature=0, frequency_penalty=0.05))(logits, [0, 0, 0]) == 1


def test_seeded_sampler_is_reproducible():
    rng = np.random.default_rng(1)
    rows = [rng.standard_normal(1000).astype(np.float32) for _ in range(50)]
    s = settings(temperature=0.9, top_k=40, top_p=0.95, seed=1234)
    first = [make_sampler(s)(row, []) for row in rows]
    a, b = make_sampler(s), make_sampler(s)
    assert [a(row, []) for row in rows] == [b(row, []) for row in rows]
    assert [make_sampler(s)(row, []) for row in rows] == first
    other = make_sampler(settings(temperature=0.9, top_k=40, top_p=0.95, seed=99))
    assert [other(row, []) for row in rows] != first


def reference(logits: np.ndarray, history: list[int], s: SamplingSettings) -> np.ndarray:
    """The filter chain applied one by one to the full array: probabilities per token."""
    x = apply_repetition_penalty(logits, history, s.repetition_penalty)
    ids, counts = token_counts(history) if history else (np.zeros(0, int), np.zeros(0, int))
    x = apply_presence_frequency_penalty(x, ids, counts, s.presence_penalty,
                                         s.frequency_penalty)
    x = apply_temperature(x, s.temperature)
    x = apply_top_k(x, s.top_k)
    x = apply_top_p(x, s.top_p)
    x = apply_min_p(x, s.min_p)
    return softmax(x)


CASES = [
    {},
    {"top_k": 5},
    {"top_k": 50, "temperature": 0.7},
    {"top_p": 0.9},
    {"top_p": 0.5, "temperature": 1.5},
    {"min_p": 0.05},
    {"min_p": 0.1, "temperature": 0.6},
    {"top_k": 40, "top_p": 0.8, "min_p": 0.02},
    {"top_p": 0.95, "min_p": 0.05, "temperature": 0.8},
    {"top_k": 20, "repetition_penalty": 1.3, "presence_penalty": 0.4, "frequency_penalty": 0.2},
    {"top_p": 0.9, "repetition_penalty": 0.8, "frequency_penalty": -0.5},
]


@pytest.mark.parametrize("vocab", [7, 3000, 60000])
@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_fast_path_matches_the_reference_chain(vocab, case):
    rng = np.random.default_rng(vocab)
    s = settings(**case)
    for _ in range(3):
        logits = (rng.standard_normal(vocab) * 2.5).astype(np.float32)
        history = rng.integers(0, vocab, size=min(vocab, 30)).tolist()
        expected = reference(logits, history, s)
        ids, probs = make_sampler(s).distribution(logits, history)
        assert sorted(ids.tolist()) == np.flatnonzero(expected).tolist()
        np.testing.assert_allclose(probs, expected[ids], rtol=1e-4, atol=1e-9)


def test_top_k_threshold_estimate_falls_back_when_it_misjudges():
    n, k = 200_000, 6000
    logits = np.zeros(n, dtype=np.float32)
    logits[:: n // 4096] = 100.0  # the strided sample sees only these ~4100 peaks
    logits[1:20_000:2] = 50.0
    s = settings(top_k=k)
    ids, _ = make_sampler(s).distribution(logits, [])
    assert sorted(ids.tolist()) == np.flatnonzero(np.isfinite(apply_top_k(logits, k))).tolist()


def test_sampling_frequencies_follow_the_filtered_softmax():
    logits = f32(2.0, 1.5, 1.0, 0.2, -0.5, -3.0)
    s = settings(temperature=0.8, top_k=5, top_p=0.99, seed=7, repetition_penalty=1.2)
    history = [0, 0, 4]
    expected = reference(logits, history, s)
    assert expected[5] == 0 and expected[4] > 0
    sampler = make_sampler(s)
    draws = np.array([sampler(logits, history) for _ in range(20_000)])
    freq = np.bincount(draws, minlength=6) / draws.size
    # 20k draws: the standard error is at most 0.0036; 0.015 is > 4 sigma.
    np.testing.assert_allclose(freq, expected, atol=0.015)
    assert freq[5] == 0


@pytest.mark.parametrize("vocab", [3, 256, 1000, 49152])
def test_temperature_only_draw_picks_what_the_running_sum_picks(vocab):
    """The whole-vocabulary draw (block sums) lands where the plain running sum over the
    softmax weights puts the same uniform draw (or, where the draw falls within 1e-6 of a
    boundary, the token on its other side: float32 block sums), zero-weight tokens never
    picked."""
    rng = np.random.default_rng(vocab)
    for seed in range(40):
        logits = (rng.standard_normal(vocab) * 4).astype(np.float32)
        logits[rng.integers(0, vocab, vocab // 4)] = -INF
        logits[0] = 1.0  # one finite logit at least
        s = settings(temperature=0.8, seed=seed)
        weights = np.exp((logits - logits.max()) / np.float32(0.8)).astype(np.float64)
        cdf = np.cumsum(weights)
        u = np.random.default_rng(seed).random()  # the sampler's first draw
        target, slack = u * cdf[-1], 1e-6 * cdf[-1]
        first = min(int(np.searchsorted(cdf, target - slack, side="right")), vocab - 1)
        last = min(int(np.searchsorted(cdf, target + slack, side="right")), vocab - 1)
        token = make_sampler(s)(logits, [])
        assert first <= token <= last
        assert np.isfinite(logits[token])


def test_penalty_counts_are_incremental_and_recounted_when_history_changes():
    rng = np.random.default_rng(3)
    s = settings(repetition_penalty=1.5, frequency_penalty=0.3, presence_penalty=0.1)
    sampler = make_sampler(s)
    history: list[int] = []
    for _ in range(40):
        logits = rng.standard_normal(50).astype(np.float32)
        history.append(int(rng.integers(0, 50)))
        ids, probs = sampler.distribution(logits, history)
        fresh_ids, fresh_probs = make_sampler(s).distribution(logits, history)
        np.testing.assert_array_equal(ids, fresh_ids)
        np.testing.assert_allclose(probs, fresh_probs)
    # A different, shorter history (a new reply) and a replaced one of the same length.
    for other in (history[:5], [int(t + 1) % 50 for t in history]):
        ids, probs = sampler.distribution(logits, other)
        np.testing.assert_allclose(probs, make_sampler(s).distribution(logits, other)[1])


def test_accepts_a_single_row_batch_and_rejects_bad_input():
    sampler = make_sampler(settings(temperature=0))
    assert sampler(f32(0, 3, 1).reshape(1, 1, 3), []) == 1
    with pytest.raises(ValueError):
        sampler(np.zeros((2, 3), np.float32), [])
    with pytest.raises(ValueError):
        sampler(f32(0, math.nan, 1), [])
    with pytest.raises(ValueError):
        Sampler(SamplingSettings(top_p=0.0))
    with pytest.raises(ValueError):
        Sampler(SamplingSettings(top_k=-1))


def test_history_ids_outside_the_logits_are_ignored():
    sampler = make_sampler(settings(temperature=0, repetition_penalty=3.0))
    assert sampler(f32(1.0, 0.9), [0, 7, -1]) == 1
