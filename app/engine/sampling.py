"""Pick the next token from logits: pure numpy, seeded, fast on 150k-token vocabularies.

The filters are small pure functions over a 1-D float32 logits array; a removed token gets
``-inf``. They define the semantics and are what the tests pin down on tiny arrays. The order
follows Hugging Face ``generate``: repetition penalty, presence/frequency penalties, then
temperature, top-k, top-p, min-p.

:class:`Sampler` applies the same chain without touching the whole vocabulary more than a
few times per token: top-k finds its candidates from a strided sample's threshold (falling
back to a full partition when the sample misjudges), top-p without top-k only sorts the
tokens above a probability threshold wide enough to hold the nucleus, and everything after
works on the candidates alone. Temperature alone (every token a candidate) draws from
running sums over blocks of the vocabulary, not over every entry (``_draw_from_vocab``).

Penalty bookkeeping is incremental: the sampler keeps token counts for the ``history`` it is
given and, when the next call's history is the previous one plus new tokens (the normal
decode loop appending to one list), counts only the new tokens. Any other history (a new
reply, a rewind) is recounted from scratch. Call :meth:`Sampler.reset` to drop the counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from app.engine.types import SamplingSettings


class Constraint(Protocol):
    """A per-step logits mask (app/engine/grammar.py's ``GrammarMatcher``)."""

    def mask(self, logits: np.ndarray) -> np.ndarray: ...

    def allows(self, token: int) -> bool: ...

    def accept(self, token: int) -> None: ...

    def valid_prefix(self, tokens: Sequence[int]) -> int: ...

    def fork(self) -> Constraint: ...

NEG_INF = np.float32(-np.inf)


# -- filters -----------------------------------------------------------------------------


def apply_temperature(logits: np.ndarray, temperature: float) -> np.ndarray:
    """``logits / temperature`` (temperature > 0; 0 means greedy and is handled by the caller)."""
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (0 means greedy)")
    return (logits / np.float32(temperature)).astype(np.float32, copy=False)


def apply_top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the ``k`` largest logits (ties with the k-th are kept too); 0 = off."""
    out = np.array(logits, dtype=np.float32)
    if k <= 0 or k >= out.size:
        return out
    kth = np.partition(out, out.size - k)[out.size - k]
    out[out < kth] = NEG_INF
    return out


def apply_top_p(logits: np.ndarray, p: float) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose probability sum reaches ``p``
    (the token that crosses ``p`` is kept); ``p >= 1`` = off."""
    out = np.array(logits, dtype=np.float32)
    if p >= 1.0:
        return out
    order = np.argsort(-out, kind="stable")
    probs = _softmax64(out[order])
    before = np.cumsum(probs) - probs  # probability mass of the tokens ranked above
    out[order[before >= p]] = NEG_INF
    out[order[0]] = logits[order[0]]  # always keep the best token
    return out


def apply_min_p(logits: np.ndarray, min_p: float) -> np.ndarray:
    """Keep tokens whose probability is at least ``min_p`` times the top probability
    (``logit >= max + log(min_p)``); 0 = off."""
    out = np.array(logits, dtype=np.float32)
    if min_p <= 0.0:
        return out
    out[out < out.max() + np.float32(math.log(min_p))] = NEG_INF
    return out


def apply_repetition_penalty(logits: np.ndarray, token_ids: Sequence[int] | np.ndarray,
                             penalty: float) -> np.ndarray:
    """CTRL-style: divide positive logits and multiply negative logits of every token seen
    (once per token, however often it was seen); 1.0 = off."""
    out = np.array(logits, dtype=np.float32)
    if penalty == 1.0 or len(token_ids) == 0:
        return out
    ids = np.unique(np.asarray(token_ids, dtype=np.int64))
    values = out[ids]
    out[ids] = np.where(values > 0, values / np.float32(penalty), values * np.float32(penalty))
    return out


def apply_presence_frequency_penalty(logits: np.ndarray, token_ids: np.ndarray,
                                     counts: np.ndarray, presence: float,
                                     frequency: float) -> np.ndarray:
    """OpenAI-style: ``logit -= presence + frequency * count`` for each seen token.

    ``token_ids`` are distinct ids, ``counts`` how often each was seen (see
    :func:`token_counts`).
    """
    out = np.array(logits, dtype=np.float32)
    if (presence == 0.0 and frequency == 0.0) or len(token_ids) == 0:
        return out
    ids = np.asarray(token_ids, dtype=np.int64)
    out[ids] -= np.float32(presence) + np.float32(frequency) * np.asarray(counts, np.float32)
    return out


def token_counts(history: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct token ids of ``history`` and how often each occurs."""
    ids, counts = np.unique(np.asarray(history, dtype=np.int64), return_counts=True)
    return ids, counts


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities (float64) of a logits array; ``-inf`` entries get 0."""
    return _softmax64(np.asarray(logits, dtype=np.float32))


def _softmax64(values: np.ndarray) -> np.ndarray:
    shifted = values.astype(np.float64) - float(values.max())
    exp = np.exp(shifted)
    return exp / exp.sum()


# -- the sampler --------------------------------------------------------------------------


class Sampler:
    """Settings + seeded generator + penalty counts. ``sampler(logits, history) -> token``.

    ``history`` is what the penalties look at (the engine passes prompt + reply so far).
    ``distribution(logits, history)`` returns the candidate ids and their probabilities;
    ``__call__`` draws from it (greedy: the argmax after penalties).
    """

    def __init__(self, settings: SamplingSettings, constraint: Constraint | None = None) -> None:
        if settings.top_k < 0 or not 0.0 < settings.top_p <= 1.0:
            raise ValueError("top_k must be >= 0 and top_p in (0, 1]")
        if settings.min_p < 0.0 or settings.min_p > 1.0 or settings.repetition_penalty <= 0:
            raise ValueError("min_p must be in [0, 1] and repetition_penalty > 0")
        self.settings = settings
        self.rng = np.random.default_rng(settings.seed)
        self._penalized = (
            settings.repetition_penalty != 1.0
            or settings.presence_penalty != 0.0
            or settings.frequency_penalty != 0.0
        )
        self.constraint = constraint
        """Constrained decoding (app/engine/grammar.py): its mask is applied to the logits
        before everything else; the decode loop advances it with each accepted token."""
        self._plain_greedy = settings.greedy and not self._penalized and constraint is None
        self._checked_greedy = (settings.greedy and not self._penalized
                                and constraint is not None)
        self.reset()

    def reset(self) -> None:
        """Forget the counted history (the next call recounts)."""
        self._counts = np.zeros(0, dtype=np.int32)
        self._seen: list[int] = []  # distinct ids in first-seen order
        self._seen_array = np.zeros(0, dtype=np.int64)
        self._synced = 0  # how many history tokens are counted
        self._last = -1  # history[_synced - 1], to notice a replaced history
        self._checked: np.ndarray | None = None  # the array _argmax belongs to
        self._argmax = -1

    # -- public -------------------------------------------------------------------------

    def __call__(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        """The next token (the constraint's mask applied first)."""
        if self._plain_greedy and type(logits) is np.ndarray and logits.ndim == 1:
            # The decode loop's common case, kept to a few operations: right after a step the
            # interpreter runs with caches the model's weights just flushed.
            best = int(logits.argmax())
            if not math.isfinite(logits[best]):
                raise ValueError("the logits contain NaN or are all -inf/+inf")
            return best
        if self._checked_greedy and type(logits) is np.ndarray and logits.ndim == 1:
            # constrained greedy: the best token, when the grammar allows it, is the best
            # allowed one (argmax takes the first of equals either way); no mask is built
            best = int(logits.argmax())
            if math.isfinite(logits[best]) and self.constraint.allows(best):
                return best
        return self.pick(self.constrain(logits), history)

    def pick(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        """The next token from logits the constraint has already masked."""
        x = self._prepare(logits, history)
        if self.settings.greedy:
            return self._argmax if x is self._checked else int(np.argmax(x))
        ids, weights = self._filtered(x)
        if ids is None:  # temperature alone (the app's default): every token is a candidate
            return _draw_from_vocab(weights, self.rng.random())
        if ids.size == 1:
            return int(ids[0])
        cdf = np.cumsum(weights.astype(np.float64))
        at = int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"))
        return int(ids[min(at, ids.size - 1)])

    def constrain(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` with what the constraint forbids at ``-inf`` (unchanged without one)."""
        return logits if self.constraint is None else self.constraint.mask(logits)

    def greedy_with_margin(self, logits: np.ndarray,
                           history: Sequence[int] = ()) -> tuple[int, float]:
        """The greedy choice after the penalties and how far its logit leads the runner-up
        (a verify step's logits differ from a one-token step's by rounding, so a choice
        closer than that is left to a one-token step)."""
        x = self._prepare(self.constrain(logits), history)
        best = self._argmax if x is self._checked else int(np.argmax(x))
        top = x[best]
        x[best] = NEG_INF
        second = x.max()
        x[best] = top
        return best, float(top - second) if x.size > 1 else math.inf

    def distribution(self, logits: np.ndarray,
                     history: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        """Candidate token ids and their probabilities (summing to 1) after all filters."""
        x = self._prepare(self.constrain(logits), history)
        if self.settings.greedy:
            return np.array([int(np.argmax(x))]), np.ones(1)
        ids, weights = self._candidates(x)
        return ids, weights / weights.sum()

    # -- steps --------------------------------------------------------------------------

    def _prepare(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        x = np.asarray(logits, dtype=np.float32)
        if x.ndim != 1:
            if x.size != x.shape[-1]:
                raise ValueError(f"expected one row of logits, got shape {x.shape}")
            x = x.reshape(-1)
        # argmax finds NaN too (it wins), so one pass both checks and serves greedy decoding.
        self._argmax = int(np.argmax(x))
        if not np.isfinite(x[self._argmax]):
            raise ValueError("the logits contain NaN or are all -inf/+inf")
        self._checked = x
        if not self._penalized:
            return x
        self._sync(history, x.size)
        if not self._seen:
            return x
        s = self.settings
        ids = self._seen_array
        values = x[ids]
        if s.repetition_penalty != 1.0:
            rp = np.float32(s.repetition_penalty)
            values = np.where(values > 0, values / rp, values * rp)
        if s.presence_penalty != 0.0 or s.frequency_penalty != 0.0:
            counts = self._counts[ids].astype(np.float32)
            values = values - (np.float32(s.presence_penalty)
                               + np.float32(s.frequency_penalty) * counts)
        x = x.copy()
        x[ids] = values
        return x

    def _sync(self, history: Sequence[int], vocab: int) -> None:
        """Count the tokens of ``history`` not counted yet (all of them if it was replaced)."""
        n = len(history)
        if n < self._synced or (self._synced and history[self._synced - 1] != self._last):
            self.reset()
        if self._counts.size < vocab:
            self._counts = np.concatenate(
                [self._counts, np.zeros(vocab - self._counts.size, np.int32)])
        grew = False
        for token in history[self._synced :]:
            token = int(token)
            if not 0 <= token < vocab:
                continue  # an id the logits do not cover cannot be penalized
            if self._counts[token] == 0:
                self._seen.append(token)
                grew = True
            self._counts[token] += 1
        if grew:
            self._seen_array = np.fromiter(self._seen, dtype=np.int64, count=len(self._seen))
        if n:
            self._synced, self._last = n, int(history[n - 1])

    def _candidates(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ids that survive temperature, top-k, top-p and min-p (in that order), with weights
        proportional to their probabilities (the best token weighs 1), as float64."""
        ids, weights = self._filtered(x)
        if ids is None:
            ids = np.arange(x.size)
        return ids, weights.astype(np.float64)

    def _filtered(self, x: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """``_candidates`` as float32 weights, with None for the ids when every token of the
        vocabulary survives (temperature alone): no id array is made for it."""
        s = self.settings
        t = np.float32(s.temperature)
        # the best logit: ``_prepare`` found it (a pass over the vocabulary saved)
        top = x[self._argmax] if x is self._checked else np.float32(x.max())
        ids: np.ndarray | None = None  # None = the whole vocabulary
        values = x
        if 0 < s.top_k < x.size:
            ids = _top_k_ids(x, s.top_k)
            values = x[ids]
        elif s.top_p >= 1.0 and s.min_p > 0.0:
            # min-p alone: a threshold on the logits, no need to exponentiate the vocabulary.
            ids = np.flatnonzero(x >= top + t * np.float32(math.log(s.min_p)))
            values = x[ids]
        weights = values - top  # a new array: x itself is the caller's
        weights /= t
        np.exp(weights, out=weights)
        if s.top_p < 1.0:
            if ids is None:
                ids, weights = _nucleus_of_vocab(weights, s.top_p)
            else:
                ids, weights = _nucleus(ids, weights, s.top_p)
        if s.min_p > 0.0:
            # Relative to the best token, so renormalising after top-p does not change it.
            keep = weights >= np.float32(s.min_p)
            ids = np.flatnonzero(keep) if ids is None else ids[keep]
            weights = weights[keep]
        return ids, weights


def make_sampler(settings: SamplingSettings, constraint: Constraint | None = None) -> Sampler:
    """A sampler for one reply (seeded by ``settings.seed``; None = fresh randomness)."""
    return Sampler(settings, constraint)


def top_logprobs(logits: np.ndarray, token: int,
                 n: int) -> tuple[float, tuple[tuple[int, float], ...]]:
    """The log-probability of ``token`` under ``logits`` and the ``n`` most likely tokens'
    (id, log-probability), best first."""
    x = np.asarray(logits, dtype=np.float64).reshape(-1)
    top = float(x.max())
    log_z = top + math.log(float(np.exp(x - top).sum()))
    best: tuple[tuple[int, float], ...] = ()
    if n > 0:
        ids = np.argpartition(-x, min(n, x.size) - 1)[:n]
        ids = ids[np.argsort(-x[ids], kind="stable")]
        best = tuple((int(i), float(x[i] - log_z)) for i in ids)
    return float(x[token] - log_z), best


# -- fast selection helpers ---------------------------------------------------------------

_SAMPLE_SIZE = 4096
#: ``_draw_from_vocab``'s block: the weights' running sum is taken over block sums, then
#: within the one block the draw lands in.
_DRAW_BLOCK = 256
_BLOCK_ONES = np.ones(_DRAW_BLOCK, dtype=np.float32)


def _draw_from_vocab(weights: np.ndarray, u: float) -> int:
    """The index a draw ``u`` in [0, 1) picks from unnormalised ``weights`` over the whole
    vocabulary: the first whose running sum exceeds ``u`` times the total, as
    ``searchsorted(cumsum(weights), u * total, "right")`` finds it, without the running sum
    of every entry (a float64 ``cumsum`` of a 49k vocabulary took ~170 µs, most of a
    temperature-only draw, whose step is ~15 ms on the starter). A block's sum is a float32
    sum (the weights are float32, rounded as finely), the running sums over blocks and
    within the one block float64, so the draw can differ from one over the plain running
    sum only where ``u`` falls within ~1e-7 of a block's boundary."""
    n = weights.size
    full = n // _DRAW_BLOCK
    # the block sums by BLAS straight from the float32 weights (no float64 copy of the
    # vocabulary: right after a step every pass over it runs on cold caches)
    sums = weights[: full * _DRAW_BLOCK].reshape(full, _DRAW_BLOCK) @ _BLOCK_ONES
    if full * _DRAW_BLOCK < n:
        sums = np.append(sums, weights[full * _DRAW_BLOCK :].sum())
    running = np.cumsum(sums, dtype=np.float64)
    target = u * running[-1]
    block = min(int(np.searchsorted(running, target, side="right")), running.size - 1)
    start = block * _DRAW_BLOCK
    before = running[block - 1] if block else 0.0
    inner = np.cumsum(weights[start : start + _DRAW_BLOCK], dtype=np.float64)
    at = int(np.searchsorted(inner, target - before, side="right"))
    return start + min(at, inner.size - 1)


def _top_k_ids(x: np.ndarray, k: int) -> np.ndarray:
    """Ids of the ``k`` largest entries, ties with the k-th included (as :func:`apply_top_k`).

    A strided sample estimates a threshold a few times looser than the k-th value; only the
    entries above it are partitioned. If the estimate lets through fewer than k, partition all.
    """
    n = x.size
    stride = max(1, n // _SAMPLE_SIZE)
    if stride > 1:
        sample = x[::stride]
        rank = min(sample.size, -(-2 * k // stride) + 8)
        guess = np.partition(sample, sample.size - rank)[sample.size - rank]
        ids = np.flatnonzero(x >= guess)
        if ids.size >= k:
            values = x[ids]
            kth = np.partition(values, values.size - k)[values.size - k]
            return ids[values >= kth]
    kth = np.partition(x, n - k)[n - k]
    return np.flatnonzero(x >= kth)


def _nucleus(ids: np.ndarray, weights: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    """The top-p subset of a candidate set (weights need not be normalised)."""
    order = np.argsort(-weights, kind="stable")
    w = weights[order].astype(np.float64)
    before = np.cumsum(w) - w
    keep = before < p * w.sum()
    keep[0] = True
    return ids[order[keep]], weights[order[keep]]


def _nucleus_of_vocab(weights: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    """Top-p over a whole vocabulary without sorting it: sort only the tokens above a weight
    threshold whose mass already reaches ``p``; widen the threshold until it does."""
    total = float(weights.sum(dtype=np.float64))
    for floor in (1e-4, 1e-8, 1e-16, 0.0):
        ids = np.flatnonzero(weights >= floor) if floor else np.arange(weights.size)
        w = weights[ids]
        if float(w.sum(dtype=np.float64)) >= p * total or not floor:
            order = np.argsort(-w, kind="stable")
            sorted_w = w[order].astype(np.float64)
            before = np.cumsum(sorted_w) - sorted_w
            keep = before < p * total
            keep[0] = True
            return ids[order[keep]], w[order[keep]]
    raise AssertionError("unreachable")
