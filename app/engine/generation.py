"""The decode loop as a plain generator: no threads, no Qt.

``stream_generate`` reuses the longest valid prefix of the cache it is handed (the caller
owns caches: the engine's own, or a conversation's from ``ConversationCaches``), prefills the rest,
then loops: logits → sampler → token → streaming detokenizer → text delta. Whether a token
ends the reply (EOS ids, stop strings, the token budget, the context, the cancel flag) is
decided in one place, ``reply_gate``, which the plain loop and the speculative loop both ask
token by token. The last chunk carries the finish reason and the measured stats.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from app.engine.decoder import Decoder, PrefillStopped
from app.engine.detokenizer import StreamingDetokenizer
from app.engine.kv_cache import CacheRewindError, ImageKey, KVCache
from app.engine.sampling import Sampler, make_sampler, top_logprobs
from app.engine.speculative import (
    AdaptiveK,
    DraftModel,
    FixedK,
    Speculator,
    make_speculator,
    verify_tolerance,
)
from app.engine.tokenizer import Tokenizer
from app.engine.types import (
    FinishReason,
    GenerationChunk,
    GenerationSettings,
    GenerationStats,
    TokenLogprob,
)

if TYPE_CHECKING:
    import numpy as np


#: Why a reply did not speculate though its settings asked for it (``speculation_note``).
SPECULATION_OFF_LOGPROBS = "off: log-probabilities were asked for"


def reuse_prefix(
    cache: KVCache, prompt_ids: Sequence[int], *, reuse: bool,
    images: Sequence[ImageKey] = (),
) -> tuple[int, str | None]:
    """Rewind ``cache`` to the longest prefix it shares with ``prompt_ids`` (and ``images``,
    the images behind its placeholder tokens: never past the first one that differs).

    At least one prompt token is always left to feed (its logits start the reply). Returns
    the number of reused tokens and, when reuse was refused or cut short, why.
    """
    if not reuse:
        cache.reset()
        return 0, "reuse disabled"
    held = len(cache)
    shared = cache.shared_with_prompt(prompt_ids, images)
    common = cache.rewind_point(shared)  # a recurrent cache: its checkpoint at or before
    reason = None
    if held and shared == 0:
        reason = "the conversation differs from the first token on"
    elif common < shared:
        reason = f"rewound to the checkpoint at {common} of {shared} shared tokens"
    try:
        cache.trim_to(common)
    except CacheRewindError as exc:
        # Validated before mutating: the cache is unchanged. Start over rather than keep a
        # stale tail.
        cache.reset()
        return 0, f"rewind refused ({exc}); prefilled from scratch"
    return common, reason


#: ``on_prefill(done, total)``: prompt tokens in the cache so far, of ``total``.
PrefillProgress = Callable[[int, int], None]


def prefill(
    decoder: Decoder,
    cache: KVCache,
    prompt_ids: Sequence[int],
    reused: int,
    *,
    cancel: threading.Event | None = None,
    on_prefill: PrefillProgress | None = None,
) -> np.ndarray | None:
    """Feed ``prompt_ids[reused:]`` in chunks, checking ``cancel`` between them.

    Returns the last position's logits, or None when ``cancel`` stopped the prefill (the
    cache then covers the reused prefix plus the chunks that ran)."""
    total = len(prompt_ids)
    progress = None
    if on_prefill is not None:
        on_prefill(reused, total)

        def progress(done: int) -> None:
            on_prefill(reused + done, total)

    stop = cancel.is_set if cancel is not None else None
    cache.checkpoint()  # turn boundaries: where the previous turn ended, where this prompt does
    try:
        logits = decoder.feed(cache, prompt_ids[reused:], stop=stop, progress=progress)
    except PrefillStopped:
        return None
    cache.checkpoint()
    return logits


def stream_generate(
    decoder: Decoder,
    cache: KVCache,
    prompt_ids: Sequence[int],
    settings: GenerationSettings,
    *,
    tokenizer: Tokenizer,
    eos_ids: Sequence[int],
    cancel: threading.Event | None = None,
    reuse: bool = True,
    provider: str = "cpu",
    on_prefill: PrefillProgress | None = None,
    draft: DraftModel | None = None,
    speculation_policy: AdaptiveK | FixedK | None = None,
    quoting: bool = False,
    images: Sequence[ImageKey] = (),
) -> Iterator[GenerationChunk]:
    """Generate a reply to ``prompt_ids`` over ``cache``, yielding one chunk per token.

    ``cache`` must come from ``decoder.new_cache``; afterwards it covers the prompt and the
    reply (except the last sampled token, which was never fed). ``cancel`` is also checked
    between prefill chunks: a stopped prefill ends the reply as "cancelled" with the cache
    covering the chunks that ran. ``on_prefill(done, total)`` reports prompt tokens in the
    cache (reused ones included) before the prefill and after each chunk.
    ``settings.speculation`` decides whether the decode steps speculate (``draft``: a draft
    model to propose with; ``speculation_policy``: how K is chosen, adaptive by default); the
    tokens are the same, with a grammar too (its drafts are checked against it). A reply
    that asks for log-probabilities does not speculate (``stats.speculation_note`` says
    so). ``quoting`` (``speculative.likely_quoting``): the reply will
    probably repeat the prompt; on graphs whose one-row steps round differently from
    verify steps, its steps then run two rows so that "auto" speculates exactly (and "off"
    decides the same tokens). ``images``: the content hashes of the images behind the
    prompt's placeholder tokens (``kv_cache.ImageKey``); the cache records them, and a later
    prompt shares its KV only up to the first image that differs.
    """
    # once per decoder, and not counted in TTFT: Engine.load has done it already
    decoder.calibrate(tolerance=verify_tolerance(decoder))
    start = time.perf_counter()
    prompt_ids = list(prompt_ids)
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    context = decoder.context_length
    stats = GenerationStats(prompt_tokens=len(prompt_ids), provider=provider, context_max=context)
    decoder.choose_rows(pairs=quoting or settings.speculation in ("lookup", "draft"))
    reused, stats.reuse_refused = reuse_prefix(cache, prompt_ids, reuse=reuse, images=images)
    stats.reused_tokens = reused
    stats.prefilled_tokens = len(prompt_ids) - reused

    constraint = None
    if settings.grammar is not None:
        from app.engine.grammar import GrammarMatcher  # llguidance loads on first use

        constraint = GrammarMatcher(settings.grammar, tokenizer, eos_ids,
                                    max_tokens=settings.max_new_tokens)
    sampler = make_sampler(settings.sampling, constraint)
    want_logprobs = settings.logprobs
    detok = StreamingDetokenizer(tokenizer, stop_strings=settings.stop_strings)
    eos = frozenset(eos_ids)
    history = list(prompt_ids)
    generated: list[int] = []
    finish: FinishReason | None = None
    first_token_at = None

    logits = prefill(decoder, cache, prompt_ids, reused, cancel=cancel, on_prefill=on_prefill)
    cache.note_images(images)
    bounded = cache.bounded_by_context
    speculation = settings.speculation
    if speculation != "off" and want_logprobs is not None:
        speculation = "off"  # a verify step's rows would each need their own log-probabilities
        stats.speculation_note = SPECULATION_OFF_LOGPROBS
    spec = None if logits is None else make_speculator(  # None: a stopped prefill
        speculation, decoder, cache, sampler, draft=draft, policy=speculation_policy
    )
    gate = reply_gate(detok, eos, history, generated, settings.max_new_tokens,
                      context if bounded else None, cancel)
    if spec is not None:
        finish, first_token_at = yield from _speculative_loop(spec, logits, sampler, history, gate)
    admit, cancelled = gate.admit, gate.cancelled
    while spec is None:  # the plain decode loop (``spec`` never changes: while True)
        if cancelled():
            finish = "cancelled"
            break
        if want_logprobs is None:
            token = int(sampler(logits, history))  # the constraint's mask applied first
            chunk = GenerationChunk(text="", token_id=token)
            if constraint is not None:
                constraint.accept(token)
        else:
            masked = sampler.constrain(logits)
            token = sampler.pick(masked, history)
            chunk = GenerationChunk(text="", token_id=token)
            if want_logprobs is not None:
                chunk.logprob, best = top_logprobs(masked, token, want_logprobs)
                chunk.logprob_token = tokenizer.decode_one(token, skip_special_tokens=False)
                chunk.top_logprobs = tuple(
                    TokenLogprob(i, lp, tokenizer.decode_one(i, skip_special_tokens=False))
                    for i, lp in best)
            if constraint is not None:
                constraint.accept(token)
        if first_token_at is None:
            first_token_at = time.perf_counter()
        finish = admit(token, chunk)
        if finish is not None:
            if finish != "stop" or chunk.text:
                yield chunk
            break
        yield chunk
        if cancelled():
            finish = "cancelled"
            break
        logits = decoder.step(cache, token)

    tail = detok.finish() if finish != "stop" else ""
    end = time.perf_counter()
    stats.generated_tokens = len(generated)
    stats.total_ms = (end - start) * 1000
    stats.ttft_ms = ((first_token_at or end) - start) * 1000
    if first_token_at is not None and len(generated) > 1:
        stats.decode_tok_s = (len(generated) - 1) / max(end - first_token_at, 1e-9)
    stats.context_used = len(history)
    if spec is None:
        stats.target_steps = len(cache) - len(prompt_ids)  # one per decode step
    else:
        stats.speculation = spec.name
        stats.proposed, stats.accepted = spec.proposed, spec.accepted
        stats.target_steps = spec.target_steps
    yield GenerationChunk(text=tail, token_id=None, finish_reason=finish, stats=stats)


class ReplyGate(NamedTuple):
    """When a reply ends: the one owner of the stop / budget / context / cancel checks that
    the plain and the speculative decode loops both run, token by token.

    ``admit(token, chunk)`` records a decided token (in the reply and the history), sets
    ``chunk.text`` from the detokenizer and returns why the reply ends with it (``"eos"``,
    ``"stop"``, ``"max_tokens"``, ``"length"``) or None. The loop yields the chunk unless the
    reason is ``"stop"`` and the chunk has no text (a stop string is never shown). After the
    yield, ``cancelled()`` says whether the consumer (or another thread) stopped the reply;
    it is also asked before the first token and, in the plain loop, after every step.
    ``room()``: how many more tokens the budget and the context allow.

    Closures over the loop's state rather than a class with attributes: after
    ``session.run`` each Python operation costs ~10 µs, and a cell read is the cheapest.
    """

    admit: Callable[[int, GenerationChunk], FinishReason | None]
    cancelled: Callable[[], bool]
    room: Callable[[], int]


def _never() -> bool:
    return False


def reply_gate(
    detok: StreamingDetokenizer,
    eos: frozenset[int],
    history: list[int],
    generated: list[int],
    limit: int,
    context: int | None,
    cancel: threading.Event | None,
) -> ReplyGate:
    """The checks over one reply's state (``context``: None when the cache is not bounded by
    it, e.g. a sliding window)."""

    def admit(token: int, chunk: GenerationChunk) -> FinishReason | None:
        generated.append(token)
        history.append(token)
        if token in eos:
            return "eos"
        chunk.text = detok.add(token)
        if detok.stop_hit is not None:
            return "stop"
        if len(generated) >= limit:
            return "max_tokens"
        if context is not None and len(history) >= context:
            return "length"
        return None

    def room() -> int:
        left = limit - len(generated)
        return left if context is None else min(left, context - len(history))

    return ReplyGate(admit, cancel.is_set if cancel is not None else _never, room)


def _speculative_loop(
    spec: Speculator,
    logits,
    sampler: Sampler,
    history: list[int],
    gate: ReplyGate,
) -> Iterator[GenerationChunk]:
    """The decode loop with speculation: each target step decides one or more tokens, which
    pass ``gate`` one by one as in ``stream_generate``'s plain loop, so a run ends exactly
    where a plain run would; the cache is rewound to what a plain run leaves. Returns
    (finish reason, first token time)."""
    finish: FinishReason | None = None
    admit, cancelled = gate.admit, gate.cancelled
    if cancelled():
        return "cancelled", None
    decided = [spec.decide(logits, history)]
    first_token_at = time.perf_counter()
    while finish is None:
        for token in decided:
            chunk = GenerationChunk(text="", token_id=token)
            finish = admit(token, chunk)
            if finish is not None:
                if finish != "stop" or chunk.text:
                    yield chunk
                break
            yield chunk
            if cancelled():
                finish = "cancelled"
                break
        if finish is not None:
            break
        decided = spec.advance(history, gate.room())
    spec.settle(len(history))
    return finish, first_token_at
