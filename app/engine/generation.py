"""The decode loop as a plain generator: no threads, no Qt.

``stream_generate`` reuses the longest valid prefix of the cache it is handed (the caller
owns caches: the engine's own, or a conversation's from ``ConversationCaches``), prefills the rest,
then loops: logits → sampler → token → streaming detokenizer → text delta, checking the cancel
flag, EOS ids, stop strings, the token budget and the context on every step. The last chunk
carries the finish reason and the measured stats.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from app.engine.decoder import Decoder, PrefillStopped
from app.engine.detokenizer import StreamingDetokenizer
from app.engine.kv_cache import CacheRewindError, KVCache
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


def reuse_prefix(
    cache: KVCache, prompt_ids: Sequence[int], *, reuse: bool
) -> tuple[int, str | None]:
    """Rewind ``cache`` to the longest prefix it shares with ``prompt_ids``.

    At least one prompt token is always left to feed (its logits start the reply). Returns
    the number of reused tokens and, when reuse was refused or cut short, why.
    """
    if not reuse:
        cache.reset()
        return 0, "reuse disabled"
    held = len(cache)
    shared = cache.shared_with_prompt(prompt_ids)
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
) -> Iterator[GenerationChunk]:
    """Generate a reply to ``prompt_ids`` over ``cache``, yielding one chunk per token.

    ``cache`` must come from ``decoder.new_cache``; afterwards it covers the prompt and the
    reply (except the last sampled token, which was never fed). ``cancel`` is also checked
    between prefill chunks: a stopped prefill ends the reply as "cancelled" with the cache
    covering the chunks that ran. ``on_prefill(done, total)`` reports prompt tokens in the
    cache (reused ones included) before the prefill and after each chunk.
    ``settings.speculation`` decides whether the decode steps speculate (``draft``: a draft
    model to propose with; ``speculation_policy``: how K is chosen, adaptive by default); the
    tokens are the same. ``quoting`` (``speculative.likely_quoting``): the reply will
    probably repeat the prompt; on graphs whose one-row steps round differently from
    verify steps, its steps then run two rows so that "auto" speculates exactly (and "off"
    decides the same tokens).
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
    reused, stats.reuse_refused = reuse_prefix(cache, prompt_ids, reuse=reuse)
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
    bounded = cache.bounded_by_context
    speculation = settings.speculation
    if speculation != "off" and (constraint is not None or want_logprobs is not None):
        speculation = "off"
        stats.speculation_note = ("off: the reply is constrained by a grammar"
                                  if constraint is not None else
                                  "off: log-probabilities were asked for")
    spec = None if logits is None else make_speculator(  # None: a stopped prefill
        speculation, decoder, cache, sampler, draft=draft, policy=speculation_policy
    )
    if spec is not None:
        finish, first_token_at = yield from _speculative_loop(
            spec, logits, sampler, detok, eos, history, generated, settings, cancel,
            context if bounded else None,
        )
    while spec is None:  # the plain decode loop (``spec`` never changes: while True)
        if cancel is not None and cancel.is_set():
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
        generated.append(token)
        history.append(token)
        if token in eos:
            yield chunk
            finish = "eos"
            break
        chunk.text = detok.add(token)
        if detok.stop_hit is not None:
            if chunk.text:
                yield chunk
            finish = "stop"
            break
        yield chunk
        if len(generated) >= settings.max_new_tokens:
            finish = "max_tokens"
            break
        if bounded and len(history) >= context:
            finish = "length"
            break
        if cancel is not None and cancel.is_set():
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


def _speculative_loop(
    spec: Speculator,
    logits,
    sampler: Sampler,
    detok: StreamingDetokenizer,
    eos: frozenset[int],
    history: list[int],
    generated: list[int],
    settings: GenerationSettings,
    cancel: threading.Event | None,
    context: int | None,
) -> Iterator[GenerationChunk]:
    """The decode loop with speculation: each target step decides one or more tokens, which
    pass the same checks one by one as in ``stream_generate``'s loop (EOS, stop strings, the
    token budget, the context, cancel), so a run ends exactly where a plain run would; the
    cache is rewound to what a plain run leaves. Returns (finish reason, first token time)."""
    finish: FinishReason | None = None
    first_token_at = None
    limit = settings.max_new_tokens
    if cancel is not None and cancel.is_set():
        return "cancelled", None
    decided = [int(sampler(logits, history))]
    first_token_at = time.perf_counter()
    while finish is None:
        for token in decided:
            generated.append(token)
            history.append(token)
            if token in eos:
                yield GenerationChunk(text="", token_id=token)
                finish = "eos"
                break
            text = detok.add(token)
            if detok.stop_hit is not None:
                if text:
                    yield GenerationChunk(text=text, token_id=token)
                finish = "stop"
                break
            yield GenerationChunk(text=text, token_id=token)
            if len(generated) >= limit:
                finish = "max_tokens"
                break
            if context is not None and len(history) >= context:
                finish = "length"
                break
            if cancel is not None and cancel.is_set():
                finish = "cancelled"
                break
        if finish is not None:
            break
        room = limit - len(generated)
        if context is not None:
            room = min(room, context - len(history))
        decided = spec.advance(history, room)
    spec.settle(len(history))
    return finish, first_token_at
