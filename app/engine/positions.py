"""Where a graph's position ids start: 0, or 1 for graphs that count from one.

Most exports take ``attention_mask`` and count positions from 0. Gemma 3's onnx-community
exports take no ``attention_mask`` and build their causal mask from ``position_ids`` (their
model card feeds ``arange(1, n + 1)``; transformers.js counts from 1 for gemma3 / paligemma):
fed from 0, the first token sees nothing and every later one misses itself. The model's name
says nothing reliable, so the graph decides: the position ids are right when a two-token
chunk gives the last token the logits that two one-token steps give it (fed whole, a wrong
causal mask shows the first token the second, or nothing; fed one at a time no future key
exists). Rotary positions are relative, so for a graph that masks by the KV length the two
offsets read the same and 0 is kept.

Only graphs without ``attention_mask`` are probed (with one, the mask comes from it). The
probe costs two one-token steps and one two-token chunk per offset, once per load.
"""

from __future__ import annotations

import numpy as np

from app.engine.decoder import Decoder

#: The probe's tokens (kept below the vocabulary size).
PROBE_TOKENS = (17, 48)
#: How much closer than 0 the offset 1 must come to count (rounding never differs 8-fold
#: from a wrong mask), and how large a difference must be, relative to the logits' spread,
#: to be a wrong mask rather than rounding.
MARGIN = 8.0
STRUCTURAL = 1e-3


def needs_probe(decoder: Decoder) -> bool:
    """Whether the graph may build its causal mask from ``position_ids``."""
    graph = decoder.graph
    return (graph.position_ids is not None and graph.attention_mask is None
            and graph.decode_path != "none" and decoder.context_length >= 4)


def probe_position_offset(decoder: Decoder) -> int:
    """The first position id the graph wants (0 or 1), measured on scratch caches; the
    decoder's offset is left as it was."""
    if not needs_probe(decoder):
        return 0
    before = decoder.position_offset
    vocab = decoder.graph.vocab_size or 64
    first, second = (t % vocab for t in PROBE_TOKENS)
    differences: dict[int, float] = {}
    spread = 0.0
    try:
        for offset in (0, 1):
            decoder.set_position_offset(offset)
            whole = np.array(decoder.feed(decoder.new_cache(), [first, second]))
            cache = decoder.new_cache()
            decoder.feed(cache, [first])
            stepped = np.array(decoder.feed(cache, [second]))
            difference = float(np.abs(whole - stepped).max())
            differences[offset] = difference if np.isfinite(difference) else float("inf")
            if offset == 1 and np.isfinite(whole).all():
                spread = float(whole.max() - whole.min())
    finally:
        decoder.set_position_offset(before)
    wrong_at_zero = differences[0] > STRUCTURAL * max(spread, 1.0)
    return 1 if wrong_at_zero and differences[1] * MARGIN < differences[0] else 0
