"""Speculative decoding: propose a few tokens cheaply, verify them with one target step.

A *proposer* guesses the tokens that follow the text so far; the target model then runs the
pending token plus the K guesses in one step (``Decoder.verify``), which gives its own
distribution after each of them. Verification keeps the longest run the target agrees with
and adds the target's own next token, so every step yields at least one token and the output
is exactly what the target alone would produce:

- greedy: a guess is accepted while it equals the target's choice (after every logits
  processor of ``sampling.Sampler``), then the target's choice is taken;
- seeded sampling (``SamplingSettings.seed`` set): each guessed position is decided by the
  very draw a plain step would make there (``verify_by_draws``: the same logits processing,
  one draw of the seeded generator per position, as the plain loop takes), and a guess is
  accepted iff that draw equals it; the first draw that differs is the step's token. The
  generator then stands where a plain run's would, so a seeded reply with speculation is the
  same reply as without, token for token, by construction — wherever the verify rows equal
  a plain step's logits bit for bit, which is why "auto" speculates a seeded reply only on
  such rows (``Decoder.verify_exact``; exact mode's two-row steps make quantized graphs so);
- unseeded sampling: standard speculative sampling (Leviathan et al. / Chen et al.): guess
  ``x`` drawn from the proposer's ``q`` is accepted with probability ``min(1, p(x) / q(x))``;
  at the first rejection the token is drawn from ``normalise(max(0, p - q))``; when all are
  accepted a bonus token comes from ``p``. Prompt lookup proposes without a distribution:
  ``q`` is a point mass (accept with probability ``p(x)``, resample from ``p`` without
  ``x``). ``p`` and ``q`` both come from ``Sampler.distribution`` (penalties, temperature,
  top-k / top-p / min-p), so the output follows the target's filtered distribution, the same
  distribution as plain sampling, not the same draws. It is kept where no reply has to be
  reproduced because it accepts more: a draft's guess with probability ``sum(min(p, q))``
  against ``sum(p * q)`` for a plain draw that must land on it (a point-mass guess: ``p(x)``
  either way).

Proposers (one small interface, ``propose(history, k) -> Proposal``):

- ``PromptLookup``: the longest n-gram at the end of the text that occurred before (in the
  prompt or the reply so far) proposes what followed its latest occurrence. No model.
- ``DraftModel`` / ``DraftProposer``: a small model with the same tokenizer, with its own
  ``Decoder`` and KV cache, synced to the target's text by the same prefix / rewind rules as a
  chat turn (longest common prefix, ``trim_to``, feed the rest).

``AdaptiveK`` picks K per step from the running acceptance rate and the verify-step cost it
measures on this machine (a K-token step costs more than one token on a CPU; FACTS.md), and
returns 0 — a plain ``Decoder.step`` — when speculation does not pay.

Under a grammar (constrained decoding, app/engine/grammar.py) a draft is cut at the first
token the grammar forbids before it is verified, and ``verify_by_draws`` decides each
position as a plain step would, under that position's mask; the grammar advances by the
decided tokens only. Greedy and seeded sampled replies then equal plain ones token for token.

``Speculator.advance`` runs one target step over the cache it is handed and returns the tokens
it decided; rejected tokens are dropped from the cache with its own ``trim_to``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np

from app.engine.decoder import Decoder
from app.engine.grammar import GrammarError
from app.engine.kv_cache import CacheRewindError, KVCache
from app.engine.sampling import Constraint, Sampler
from app.engine.types import SamplingSettings
from app.errors import ContextOverflowError

#: Relative cost of a verify step of n positions on a 2-core CPU (FACTS.md: SmolLM2 int4,
#: K = 1 / 2 / 4 / 8 cost 1.0 / 1.35 / 2.1 / 3.3 x one token). The prior until measured.
PRIOR_COST = ((1, 1.0), (2, 1.35), (4, 2.1), (8, 3.3))
MAX_K = 16


@dataclass(frozen=True)
class Proposal:
    """Proposed tokens; ``q`` holds the proposer's distribution for each (dense float64
    vectors over the vocabulary), or is None for a point mass (prompt lookup, greedy)."""

    tokens: tuple[int, ...] = ()
    q: tuple[np.ndarray, ...] | None = None


NO_PROPOSAL = Proposal()


# -- proposers -------------------------------------------------------------------------------


class PromptLookup:
    """Prompt-lookup decoding: n-gram matches over the text so far, longest match first.

    One per reply: the text only grows (it is indexed incrementally); a shorter text than
    last time starts the index over."""

    name = "lookup"

    def __init__(self, *, max_ngram: int = 4, min_ngram: int = 2) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self._latest: dict[tuple[int, ...], int] = {}  # n-gram -> index of its last token
        self._indexed = 0  # n-grams ending before this index are in ``_latest``

    def propose(self, history: Sequence[int], k: int, *, shortest: int | None = None) -> Proposal:
        """Up to ``k`` tokens after the latest earlier occurrence of the longest n-gram that
        ends the text (``shortest``: the shortest n-gram that counts, ``min_ngram`` unless
        given; 1 asks for what followed the last token's previous occurrence)."""
        n = len(history)
        if n < self._indexed:
            self._latest.clear()
            self._indexed = 0
        latest, hi = self._latest, self.max_ngram
        lo = self.min_ngram if shortest is None else max(1, shortest)
        # Index every n-gram that ends before the last token (the suffix's own occurrence is
        # not a match), later occurrences overwriting earlier ones; single tokens too.
        for end in range(self._indexed, n - 1):
            for size in range(1, min(hi, end + 1) + 1):
                latest[tuple(history[end + 1 - size : end + 1])] = end
        self._indexed = max(self._indexed, n - 1)
        if k <= 0:
            return NO_PROPOSAL
        for size in range(min(hi, n), lo - 1, -1):
            end = latest.get(tuple(history[n - size :]))
            if end is not None:
                return Proposal(tuple(int(t) for t in history[end + 1 : end + 1 + k]))
        return NO_PROPOSAL


class DraftModel:
    """A small model with the target's tokenizer that proposes tokens, with its own decoder
    and one KV cache (kept for the model's life and resynced to each text by prefix)."""

    name = "draft"

    def __init__(self, decoder: Decoder, *, eos_ids: Sequence[int] = ()) -> None:
        self.decoder = decoder
        self.cache = decoder.new_cache()
        self.eos_ids = frozenset(eos_ids)

    @property
    def vocab_size(self) -> int | None:
        return self.decoder.graph.vocab_size

    def proposer(self, settings: SamplingSettings) -> DraftProposer:
        """The proposer for one reply (its sampler applies the reply's processors)."""
        return DraftProposer(self, settings)


class DraftProposer:
    """Proposes with a draft model: greedy guesses for greedy replies, samples with their
    distributions ``q`` otherwise. ``seconds_per_token`` is the draft's measured cost."""

    name = "draft"

    def __init__(self, model: DraftModel, settings: SamplingSettings) -> None:
        self.model = model
        seed = None if settings.seed is None else settings.seed + 7919
        self.sampler = Sampler(replace(settings, seed=seed))
        self.greedy = settings.greedy
        self.seconds_per_token: float | None = None
        self._settings = replace(settings, seed=seed)
        self._constrained: Sampler | None = None  # the sampler under a grammar's fork

    def sync(self, history: Sequence[int]) -> np.ndarray | None:
        """Rewind the draft's cache to its longest prefix with ``history`` and feed the rest;
        the logits after ``history``, or None when the draft cannot hold it."""
        decoder, cache = self.model.decoder, self.model.cache
        if len(history) >= decoder.context_length:
            return None
        common = cache.rewind_point(cache.shared_with_prompt(history))
        try:
            cache.trim_to(common)
        except CacheRewindError:
            cache.reset()
            common = 0
        return decoder.feed(cache, list(history[common:]))

    def _sampler(self, constraint: Constraint | None) -> tuple[Sampler, Constraint | None]:
        """The sampler to draft with: under a fork of the reply's grammar when it has one (an
        unconstrained draft rarely writes what the grammar allows)."""
        if constraint is None:
            return self.sampler, None
        fork = constraint.fork()
        if self._constrained is None:
            self._constrained = Sampler(self._settings, fork)
        self._constrained.constraint = fork
        return self._constrained, fork

    def propose(self, history: Sequence[int], k: int, *,
                constraint: Constraint | None = None) -> Proposal:
        """Up to ``k`` tokens the draft writes after ``history`` (``constraint``: the reply's
        grammar in its present state, which the draft follows on a fork of it)."""
        decoder, cache = self.model.decoder, self.model.cache
        k = min(k, decoder.context_length - len(history))
        if k <= 0:
            return NO_PROPOSAL
        start = time.perf_counter()
        try:
            logits = self.sync(history)
            if logits is None:
                return NO_PROPOSAL
            trial = list(history)
            tokens: list[int] = []
            qs: list[np.ndarray] = []
            sampler, fork = self._sampler(constraint)
            for i in range(k):
                if self.greedy:
                    token = sampler(logits, trial)
                else:
                    q = dense(*sampler.distribution(logits, trial), logits.size)
                    token = int(sampler.rng.choice(q.size, p=q))
                    qs.append(q)
                if fork is not None:
                    try:
                        fork.accept(token)
                    except GrammarError:  # e.g. text after an auto grammar's marker that
                        break  # it refuses: the draft stops short, the reply goes on
                tokens.append(token)
                trial.append(token)
                if token in self.model.eos_ids or i == k - 1:
                    break
                logits = decoder.step(cache, token)
        except ContextOverflowError:
            return NO_PROPOSAL
        if len(qs) > len(tokens):
            del qs[len(tokens):]
        spent = (time.perf_counter() - start) / max(1, len(tokens))
        self.seconds_per_token = (spent if self.seconds_per_token is None
                                  else 0.8 * self.seconds_per_token + 0.2 * spent)
        return Proposal(tuple(tokens), tuple(qs) if qs else None)


# -- verification ----------------------------------------------------------------------------


def dense(ids: np.ndarray, probs: np.ndarray, vocab: int) -> np.ndarray:
    """A candidate set (ids, probabilities) as a float64 vector over the vocabulary."""
    out = np.zeros(vocab, dtype=np.float64)
    out[np.asarray(ids, dtype=np.int64)] = probs
    return out


def verify_greedy(
    rows: np.ndarray,
    proposed: Sequence[int],
    sampler: Sampler,
    history: list[int],
    *,
    tie_margin: float = 0.0,
) -> tuple[int, int | None]:
    """Greedy verification. ``rows[i]``: the target's logits after ``history`` plus
    ``proposed[:i]`` (``len(proposed) + 1`` rows). Returns how many proposals were accepted
    and the target's own token after them; None instead of the token when that row's best
    logit leads by less than ``tie_margin`` (rounding in a K-token step could flip it: the
    caller decides that position with a one-token step). ``history`` is extended and
    restored."""
    base = len(history)
    try:
        for i in range(len(proposed) + 1):
            token, margin = sampler.greedy_with_margin(rows[i], history)
            if margin < tie_margin:
                return i, None
            if i == len(proposed) or token != proposed[i]:
                return i, token
            history.append(token)
        raise AssertionError("unreachable")
    finally:
        del history[base:]


def verify_sampled(
    rows: np.ndarray,
    proposal: Proposal,
    sampler: Sampler,
    history: list[int],
) -> tuple[int, int]:
    """Speculative sampling over ``rows`` (as in ``verify_greedy``): accept guess ``x`` with
    probability ``min(1, p(x)/q(x))``, else draw from ``normalise(max(0, p - q))``; a point
    mass ``q`` (``proposal.q is None``) accepts with probability ``p(x)``. Returns the accepted
    count and the next token, drawn with ``sampler.rng``."""
    base = len(history)
    rng = sampler.rng
    vocab = rows.shape[-1]
    try:
        for i, guess in enumerate(proposal.tokens):
            p = dense(*sampler.distribution(rows[i], history), vocab)
            if proposal.q is None:
                q_x, residual = 1.0, p.copy()
                residual[guess] = 0.0
            else:
                q = proposal.q[i]
                q_x, residual = float(q[guess]), np.maximum(p - q, 0.0)
            if q_x > 0.0 and rng.random() * q_x < p[guess]:
                history.append(guess)
                continue
            total = residual.sum()
            if total <= 0.0:  # p == q up to rounding: any draw from p is exact
                residual, total = p, p.sum()
            return i, int(rng.choice(vocab, p=residual / total))
        return len(proposal.tokens), sampler(rows[len(proposal.tokens)], history)
    finally:
        del history[base:]


def verify_by_draws(
    rows: np.ndarray,
    proposed: Sequence[int],
    sampler: Sampler,
    history: list[int],
    *,
    tie_margin: float = 0.0,
) -> tuple[int, int | None]:
    """Verification by the plain run's own decisions, greedy or sampled, under a grammar
    (``sampler.constraint``) or not: each row decides its token as a plain step would (the
    grammar's mask at that position, then the sampler, with the one draw of ``sampler.rng`` a
    plain step takes there), and a guess is accepted iff it equals that token; the first token
    that differs is returned. Row by row the generator is drawn as a plain run draws it, so a
    seeded sampled reply equals the non-speculated one token for token (on rows that equal
    plain steps bit for bit), as a greedy one does; a point-mass guess is kept with
    probability ``p(x)``, as in ``verify_sampled``. Accepted guesses are accepted by the
    constraint here, the returned token is not (the caller does it once it is final).
    Returns the accepted count and the next token; None instead of the token as in
    ``verify_greedy`` (greedy with ``tie_margin``). ``history`` is extended and restored."""
    constraint = sampler.constraint
    greedy = sampler.settings.greedy and tie_margin > 0.0
    base = len(history)
    try:
        for i in range(len(proposed) + 1):
            if greedy:
                token, margin = sampler.greedy_with_margin(rows[i], history)
                if margin < tie_margin:
                    return i, None
            else:
                token = int(sampler(rows[i], history))
            if i == len(proposed) or token != proposed[i]:
                return i, token
            if constraint is not None:
                constraint.accept(token)
            history.append(token)
        raise AssertionError("unreachable")
    finally:
        del history[base:]


# -- choosing K -------------------------------------------------------------------------------


def prior_cost(positions: int) -> float:
    """The prior relative cost of a step of ``positions`` tokens (piecewise linear)."""
    points = PRIOR_COST
    for (n0, c0), (n1, c1) in pairwise(points):
        if positions <= n1:
            return c0 + (c1 - c0) * (max(positions, n0) - n0) / (n1 - n0)
    (n0, c0), (n1, c1) = points[-2], points[-1]
    return c1 + (c1 - c0) / (n1 - n0) * (positions - n1)


class AdaptiveK:
    """Chooses how many tokens to propose from the running acceptance rate and the measured
    cost of verify steps.

    The per-token acceptance rate ``a`` is estimated from decayed counts of accepted tokens
    and rejections (a geometric model: a run of K proposals yields ``(1 - a^(K+1)) / (1 - a)``
    tokens). The cost of a step of n positions relative to one token starts from
    ``PRIOR_COST`` and follows this machine's timings as they come (``record_time``); a draft
    model's cost per proposed token is added (``draft_ratio``). K maximises tokens per unit of
    cost; when no K beats a plain step by ``margin`` it returns 0 (speculation off), probing
    with one proposal every ``probe_every`` plain steps so it notices when guesses start to
    land. ``allow_off=False`` (a forced proposer) never goes below one."""

    def __init__(
        self,
        *,
        max_k: int = 8,
        prior_acceptance: float = 0.6,
        prior_weight: float = 2.0,
        decay: float = 0.9,
        margin: float = 0.05,
        probe_every: int = 32,
        allow_off: bool = True,
        plain_rows: int = 1,
        timed: bool = True,
    ) -> None:
        self.max_k = max_k
        #: rows a plain step runs (``Decoder.step_rows``): until measured, a verify step of
        #: that many positions costs what a plain step costs (one guess rides along free)
        self.plain_rows = plain_rows
        #: whether measured step times steer K; a seeded sampled reply keeps the prior
        #: costs, so that its steps too (``target_steps``, not only its tokens, which
        #: ``verify_by_draws`` makes K-independent) are the same on any machine
        self.timed = timed
        self._accepted = prior_acceptance * prior_weight
        self._rejected = (1 - prior_acceptance) * prior_weight
        self.decay = decay
        self.margin = margin
        self.probe_every = probe_every
        self.allow_off = allow_off
        self._seconds: dict[int, float] = {}  # verify positions -> EMA of a step's seconds
        self._plain_seconds: float | None = None  # EMA of a plain step's seconds
        self.draft_seconds: float | None = None  # per proposed token, when a draft proposes
        self._plain_since = 0

    @property
    def acceptance(self) -> float:
        return self._accepted / max(self._accepted + self._rejected, 1e-9)

    def cost(self, positions: int) -> float:
        """Cost of a step of ``positions`` tokens relative to a plain step (measured where
        known)."""
        plain = self._plain_seconds
        seen = self._seconds.get(positions)
        if plain and seen:
            return seen / plain
        if positions <= self.plain_rows:
            return 1.0
        return prior_cost(positions) / prior_cost(self.plain_rows)

    def draft_ratio(self) -> float:
        one = self._plain_seconds
        if self.draft_seconds is None or not one:
            return 0.0
        return self.draft_seconds / one

    def choose(self, available: int) -> int:
        """K for the next step, at most ``available`` (0: take a plain step)."""
        limit = min(self.max_k, available)
        if limit <= 0:
            return 0
        a = min(self.acceptance, 0.999)
        draft = self.draft_ratio()
        best_k, best_gain = 0, 1.0 + self.margin
        for k in range(1, limit + 1):
            cost = self.cost(k + 1) + k * draft
            gain = (1 - a ** (k + 1)) / (1 - a) / cost
            if gain > best_gain or (cost <= 1.0 and best_k == 0):  # free: as a plain step
                best_k, best_gain = k, gain
        if best_k == 0:
            if not self.allow_off:
                return 1
            self._plain_since += 1
            if self._plain_since >= self.probe_every:
                self._plain_since = 0
                return 1
        return best_k

    def record(self, proposed: int, accepted: int) -> None:
        """A verify step's outcome: ``accepted`` of ``proposed`` guesses were kept."""
        self._accepted = self._accepted * self.decay + accepted
        self._rejected = self._rejected * self.decay + (1 if accepted < proposed else 0)

    def record_time(self, positions: int, seconds: float) -> None:
        """A verify step of ``positions`` tokens took ``seconds``."""
        if self.timed:
            self._seconds[positions] = _moving_average(self._seconds.get(positions), seconds)

    def record_plain(self, seconds: float) -> None:
        """A plain step (``plain_rows`` rows, no guess) took ``seconds``."""
        if self.timed:
            self._plain_seconds = _moving_average(self._plain_seconds, seconds)


def _moving_average(old: float | None, new: float) -> float:
    """The step-time estimate: an exponential moving average (new steps weigh a fifth)."""
    return new if old is None else 0.8 * old + 0.2 * new


class FixedK:
    """Always K proposals (tests and benchmarks that pin K)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.draft_seconds: float | None = None

    def choose(self, available: int) -> int:
        return max(0, min(self.k, available))

    def record(self, proposed: int, accepted: int) -> None:
        pass

    def record_time(self, positions: int, seconds: float) -> None:
        pass

    def record_plain(self, seconds: float) -> None:
        pass


# -- one reply's speculation ----------------------------------------------------------------


class Speculator:
    """Runs the target's decode steps of one reply with speculation.

    ``advance(history, room)``: ``history[-1]`` is the pending token (emitted, not yet fed);
    the cache covers ``history[:-1]``. One target step runs the pending token plus K proposals
    and returns the decided tokens (accepted proposals, then the target's own next token), at
    most ``room``; the cache then covers ``history[:-1]``, the pending token and the accepted
    proposals. Counters: ``proposed``, ``accepted``, ``target_steps``."""

    def __init__(
        self,
        decoder: Decoder,
        cache: KVCache,
        proposer: PromptLookup | DraftProposer,
        sampler: Sampler,
        policy: AdaptiveK | FixedK,
        *,
        tie_margin: float = 0.0,
    ) -> None:
        self.decoder, self.cache = decoder, cache
        self.tie_margin = tie_margin
        self.proposer, self.sampler, self.policy = proposer, sampler, policy
        self.name = proposer.name
        self.proposed = self.accepted = self.target_steps = 0
        self._greedy = sampler.settings.greedy
        self._constraint = sampler.constraint
        #: decide each verify row by a plain step's own draw (``verify_by_draws``): under a
        #: grammar, and for a seeded sampled reply, which must equal its plain run
        self._by_draws = sampler.constraint is not None or (
            not self._greedy and sampler.settings.seed is not None)

    def decide(self, logits: np.ndarray, history: list[int]) -> int:
        """The next token from one position's logits (the grammar, if any, advances)."""
        token = int(self.sampler(logits, history))
        if self._constraint is not None:
            self._constraint.accept(token)
        return token

    def _room(self, history_len: int) -> int:
        """How many proposals the next step may carry without a step past what the cache can
        take in one go: the context, the window (a verify step must not evict: what a
        rejection drops would otherwise have pushed out positions a plain run keeps)."""
        cache = self.cache
        room = self.decoder.context_length - history_len
        max_step = cache.max_step
        if max_step is not None:
            room = min(room, max_step - 1)
        if cache.window is not None:
            room = min(room, cache.capacity - cache.kv_length - 1)
        return room

    def advance(self, history: list[int], room: int) -> list[int]:
        """One target step; returns 1..K+1 new tokens (at most ``room``, at least one)."""
        k = self.policy.choose(min(room - 1, self._room(len(history))))
        if k <= 0:
            proposal = NO_PROPOSAL
        elif self._constraint is not None and isinstance(self.proposer, DraftProposer):
            proposal = self.proposer.propose(history, k, constraint=self._constraint)
        else:
            proposal = self.proposer.propose(history, k)
        free_ride = False
        if not proposal.tokens and k > 0 and self.decoder.step_rows > 1 and isinstance(
                self.proposer, PromptLookup):
            # the plain step runs a second row anyway: guess what followed this token last
            proposal = self.proposer.propose(history, self.decoder.step_rows - 1, shortest=1)
            free_ride = bool(proposal.tokens)
        guesses = proposal.tokens[:k]
        constraint = self._constraint
        if constraint is not None and guesses:  # what the grammar forbids is never accepted
            guesses = guesses[:constraint.valid_prefix(guesses)]
        if isinstance(self.proposer, DraftProposer):
            self.policy.draft_seconds = self.proposer.seconds_per_token
        pending = history[-1]
        start = time.perf_counter()
        if not guesses:
            logits = self.decoder.step(self.cache, pending)
            self.policy.record_plain(time.perf_counter() - start)
            self.target_steps += 1
            return [self.decide(logits, history)]
        fed = len(self.cache)
        rows = self.decoder.verify(self.cache, [pending, *guesses])
        self.policy.record_time(len(guesses) + 1, time.perf_counter() - start)
        self.target_steps += 1
        if self._by_draws or self._greedy:
            verify = verify_by_draws if self._by_draws else verify_greedy
            accepted, token = verify(rows, guesses, self.sampler, history,
                                     tie_margin=self.tie_margin)
            if token is None:  # too close to call from a K-token step: take a plain one
                self.cache.trim_to(fed + accepted)
                logits = self.decoder.step(self.cache, guesses[accepted - 1] if accepted
                                           else pending)
                self.target_steps += 1
                token = self.sampler(logits, [*history, *guesses[:accepted]])
            if constraint is not None:
                constraint.accept(token)
        else:
            proposal = Proposal(guesses, None if proposal.q is None else proposal.q[:k])
            accepted, token = verify_sampled(rows, proposal, self.sampler, history)
        self.proposed += len(guesses)
        self.accepted += accepted
        if not free_ride:  # a free guess says nothing about the n-gram guesses' odds
            self.policy.record(len(guesses), accepted)
        self.cache.trim_to(fed + 1 + accepted)  # drop the rejected guesses' KV
        return [*guesses[:accepted], token]

    def settle(self, history_len: int) -> None:
        """After the reply: the cache covers at most ``history[:-1]`` (as after a plain run:
        tokens decided past a stop, EOS or the token budget are dropped)."""
        if len(self.cache) > history_len - 1:
            self.cache.trim_to(history_len - 1)


def make_proposer(
    mode: str,
    settings: SamplingSettings,
    *,
    draft: DraftModel | None,
) -> PromptLookup | DraftProposer | None:
    """The proposer a speculation mode asks for ("auto": the draft model when one is
    attached, else prompt lookup; "draft" without a draft model: prompt lookup)."""
    if mode == "off":
        return None
    if mode in ("draft", "auto") and draft is not None:
        return draft.proposer(settings)
    return PromptLookup()


def make_speculator(
    mode: str,
    decoder: Decoder,
    cache: KVCache,
    sampler: Sampler,
    *,
    draft: DraftModel | None = None,
    policy: AdaptiveK | FixedK | None = None,
) -> Speculator | None:
    """A ``Speculator`` for one reply, or None when speculation is off or impossible (a
    graph that returns only the last position's logits cannot verify, a cache that cannot be
    cut back at any length cannot drop rejected guesses)."""
    if mode == "off" or not decoder.can_verify or not cache.rewinds_anywhere:
        return None  # rejected guesses must be cut off again (a recurrent state cannot be)
    if mode == "auto" and not decoder.verify_agrees:
        return None  # this graph's verify steps round differently: "auto" stays exact
    sampling = sampler.settings
    if mode == "auto" and not sampling.greedy and sampling.seed is not None and (
            not decoder.verify_exact):
        # a seeded reply must be the seed's plain one: a draw on rows a rounding apart
        # from a plain step's (float graphs, ~1e-6) could land on another token
        return None
    if draft is not None and draft.vocab_size != decoder.graph.vocab_size:
        draft = None  # a different tokenizer cannot propose for this model
    if draft is not None and not draft.cache.rewinds_anywhere:
        draft = None  # a recurrent draft would prefill from scratch after every rejection
    proposer = make_proposer(mode, sampler.settings, draft=draft)
    if proposer is None:
        return None
    if policy is None:
        policy = AdaptiveK(allow_off=mode == "auto",
                           max_k=MAX_K if proposer.name == "lookup" else 8,
                           plain_rows=decoder.step_rows,
                           timed=sampling.greedy or sampling.seed is None)
    margin = 0.0 if decoder.verify_exact else tie_margin(decoder)
    return Speculator(decoder, cache, proposer, sampler, policy,
                      tie_margin=margin)


def tie_margin(decoder: Decoder) -> float:
    """How close two logits may be before a K-token step's rounding could order them
    differently from a one-token step's: float16 / bfloat16 KV (computed in half precision
    by GroupQueryAttention) round far more than float32."""
    halves = any(layer.dtype != "float32" for layer in decoder.graph.kv_layers)
    return 1e-2 if halves or decoder.graph.logits_dtype != "float32" else 1e-3


def verify_tolerance(decoder: Decoder) -> float:
    """How far a verify step's logits may be from one-token steps' for greedy speculation to
    stay exact: half the tie margin (a closer call is re-decided by a plain step), but zero
    on quantized matmuls, whose int8 activations turn a rounding difference at one position
    into a different one at the next: at the probe it may be tiny, on the starter elsewhere
    it reached 1 logit."""
    return 0.0 if decoder.graph.quantized_matmuls else tie_margin(decoder) / 2


#: A last user message at least this long (pasted text, code) makes a reply that quotes it
#: likely: the replies prompt lookup speeds up (bench/bench_speculative.py's quoting set).
QUOTING_MIN_TOKENS = 64
#: A prompt whose own tokens prompt lookup would have guessed this often (over its last
#: ``REPEAT_WINDOW`` tokens) makes a reply that repeats it likely: a chat whose replies echo
#: earlier ones. Measured on the starter (bench_speculative's workloads): one-question chats
#: 0.02–0.03, the 8-turn chat from its second turn 0.38–0.70, where forced lookup took 1.9–3.6
#: tokens per step; pasted texts 0.41–0.43.
REPEAT_MIN_RATE = 0.25
REPEAT_WINDOW = 1024
REPEAT_MIN_TOKENS = 128


def likely_quoting(prompt_ids: Sequence[int], message_tokens: int) -> bool:
    """Whether the reply to ``prompt_ids``, whose last user message has ``message_tokens``
    tokens, will probably repeat stretches of the prompt: a long last message (pasted text,
    code), or a conversation that keeps repeating itself (:func:`repetition_rate`). Decides
    a reply's step rows (``Decoder.choose_rows``), and so depends on the prompt alone:
    "auto" and "off" run the same rows and decide the same tokens."""
    if message_tokens >= QUOTING_MIN_TOKENS:
        return True
    return (len(prompt_ids) >= REPEAT_MIN_TOKENS
            and repetition_rate(prompt_ids) >= REPEAT_MIN_RATE)


def repetition_rate(ids: Sequence[int], *, window: int = REPEAT_WINDOW) -> float:
    """The share of the last ``window`` tokens that ``PromptLookup`` would have guessed
    right from the tokens before them within the window."""
    ids = [int(t) for t in ids[-window:]]
    lookup, seen, hits = PromptLookup(), ids[:1], 0
    for token in ids[1:]:  # ``seen`` grows in place: the lookup indexes only what is new
        hits += lookup.propose(seen, 1).tokens == (token,)
        seen.append(token)
    return hits / max(1, len(ids) - 1)
