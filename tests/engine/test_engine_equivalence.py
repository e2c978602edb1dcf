"""The KV decode paths must produce exactly what full recomputation produces.

The reference runs the same graph with an empty past and the whole sequence every step (plain
``session.run``, no IOBinding, no cache), so it shares nothing with the engine's decode paths.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from app.engine.engine import Engine
from app.engine.types import GenerationSettings, SamplingSettings
from tests.fixtures.ort_bf16 import ortvalue_to_numpy

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=24)

MODEL_FIXTURES = {
    "plain": ("plain_model_dir", "rebind"),
    "plain_root": ("plain_model_root_dir", "rebind"),
    "plain_fp16": ("plain_fp16_model_dir", "rebind"),
    "plain_bf16": ("plain_bf16_model_dir", "rebind"),
    "gqa": ("gqa_model_dir", "shared"),
    "gqa_fp16": ("gqa_fp16_model_dir", "shared"),
    "nokv": ("nokv_model_dir", "none"),
}


class FullRecompute:
    """Greedy decoding by re-running the whole sequence with an empty past every step."""

    def __init__(self, model_path, graph):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(model_path), options, providers=["CPUExecutionProvider"]
        )
        self.graph = graph
        self.inputs = {i.name: i for i in self.session.get_inputs()}

    def logits(self, ids: list[int]) -> np.ndarray:
        feeds: dict[str, object] = {self.graph.input_ids: np.asarray([ids], dtype=np.int64)}
        if self.graph.attention_mask:
            feeds[self.graph.attention_mask] = np.ones((1, len(ids)), dtype=np.int64)
        if self.graph.position_ids:
            feeds[self.graph.position_ids] = np.arange(len(ids), dtype=np.int64)[None]
        for layer in self.graph.kv_layers:
            shape = (1, layer.kv_heads, 0, layer.head_dim)
            for name in (layer.past_key, layer.past_value):
                if layer.dtype == "bfloat16":
                    feeds[name] = ort.OrtValue.ortvalue_from_shape_and_type(list(shape), 16)
                else:
                    feeds[name] = np.zeros(shape, dtype=layer.dtype)
        out = self.session.run([self.graph.logits], feeds)[0]
        if not isinstance(out, np.ndarray):
            out = ortvalue_to_numpy(out)
        return np.asarray(out[0, -1], dtype=np.float32)

    def greedy(self, prompt: list[int], steps: int, eos: set[int]):
        ids = list(prompt)
        tokens = []
        last = None
        for _ in range(steps):
            last = self.logits(ids)
            token = int(np.argmax(last))
            tokens.append(token)
            if token in eos:
                break
            ids.append(token)
        return tokens, last


def _prompts(vocab: int, count: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    lengths = [1, 3, 17, 40, 130][:count]
    return [list(rng.integers(3, vocab, size=n)) for n in lengths]


@pytest.mark.parametrize("name", list(MODEL_FIXTURES))
def test_greedy_tokens_match_full_recompute(name, request):
    fixture, path = MODEL_FIXTURES[name]
    engine = Engine.load(request.getfixturevalue(fixture), provider="cpu", threads=1)
    assert engine.decode_path == path
    reference = FullRecompute(engine.spec.model_path, engine.graph)
    vocab = engine.graph.vocab_size
    for prompt in _prompts(vocab, 5):
        chunks = list(engine.generate(prompt, GREEDY, reuse=False))
        tokens = [c.token_id for c in chunks if c.token_id is not None]
        final = chunks[-1]
        expected, _ = reference.greedy(prompt, GREEDY.max_new_tokens, set(engine.eos_token_ids))
        assert tokens == expected, f"{name}: prompt of {len(prompt)} tokens diverged"
        assert final.stats.generated_tokens == len(tokens)
        assert final.finish_reason in ("eos", "max_tokens")


@pytest.mark.parametrize("name", ["plain", "gqa", "nokv", "plain_fp16"])
def test_last_step_logits_match_full_recompute(name, request):
    fixture, _ = MODEL_FIXTURES[name]
    engine = Engine.load(request.getfixturevalue(fixture), provider="cpu", threads=1)
    reference = FullRecompute(engine.spec.model_path, engine.graph)
    prompt = _prompts(engine.graph.vocab_size, 4, seed=3)[-1]
    decoder = engine.decoder
    cache = engine.new_cache()
    # Feed the prompt, then 10 single tokens: every step's logits must equal the reference.
    logits = decoder.feed(cache, prompt)
    ids = list(prompt)
    for step in range(10):
        np.testing.assert_allclose(
            logits, reference.logits(ids), atol=1e-4, rtol=0, err_msg=f"{name} step {step}"
        )
        token = int(np.argmax(logits))
        ids.append(token)
        logits = decoder.feed(cache, [token])


def test_chunked_prefill_matches_single_pass(plain_model_dir):
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    prompt = _prompts(engine.graph.vocab_size, 5, seed=7)[-1]  # 130 tokens
    cache = engine.new_cache()
    whole = engine.decoder.feed(cache, prompt).copy()
    cache.reset()
    engine.decoder.prefill_chunk = 16  # 9 chunks
    chunked = engine.decoder.feed(cache, prompt)
    np.testing.assert_allclose(chunked, whole, atol=1e-4, rtol=0)
    assert len(cache) == len(prompt)


def test_shared_buffer_grows_in_buckets_not_to_the_context(gqa_model_dir):
    engine = Engine.load(gqa_model_dir, provider="cpu", threads=1)
    cache = engine.new_cache()
    engine.decoder.feed(cache, list(range(3, 20)))
    assert 0 < cache.capacity < engine.context_length
    first = cache.capacity
    reference = FullRecompute(engine.spec.model_path, engine.graph)
    ids = list(range(3, 20)) + [5] * (first + 10 - 17)
    logits = engine.decoder.feed(cache, ids[17:])  # crosses the first bucket: the buffer grows
    assert cache.capacity > first
    np.testing.assert_allclose(logits, reference.logits(ids), atol=1e-4, rtol=0)




def test_one_token_steps_match_full_recompute_across_growth_rewind_and_swaps(gqa_model_dir):
    """``Decoder.step`` skips binding while the shared buffer stays put; it must notice every
    change that makes the bound state stale: buffer growth, a rewind, another chat's cache
    swapped in, and arrays imported from a snapshot."""
    engine = Engine.load(gqa_model_dir, provider="cpu", threads=1)
    decoder = engine.decoder
    reference = FullRecompute(engine.spec.model_path, engine.graph)

    def decode(cache, ids: list[int], steps: int) -> list[int]:
        """Run what the cache lacks of ``ids`` (one token: through ``step``), then take
        ``steps`` greedy tokens, all but the last fed through ``step``; every logits vector
        is checked against full recomputation. Returns ``ids`` plus the new tokens."""
        ids = list(ids)
        missing = ids[len(cache) :]
        logits = (decoder.step(cache, missing[0]) if len(missing) == 1
                  else decoder.feed(cache, missing))
        for step in range(steps):
            np.testing.assert_allclose(logits, reference.logits(ids), atol=1e-4, rtol=0,
                                       err_msg=f"after {len(ids)} tokens")
            ids.append(int(np.argmax(logits)))
            if step < steps - 1:
                logits = decoder.step(cache, ids[-1])
        return ids

    first = engine.new_cache()
    ids = decode(first, (_prompts(engine.graph.vocab_size, 5, seed=11)[-1] * 2)[:230], 4)
    capacity = first.capacity
    assert capacity < 260
    first.trim_to(219)  # rewind ...
    ids = decode(first, ids[:220], 40)  # ... and step across the bucket's end: it grows mid-decode
    assert first.capacity > capacity

    other = decoder.new_cache()  # another conversation, then straight back to a step
    other_ids = decode(other, [7, 8, 9, 10], 3)
    ids = decode(first, ids, 3)

    # The steady cache takes the other conversation's arrays (as a snapshot restore does).
    first.import_arrays(other.tokens, other.export_arrays())
    decode(first, other_ids, 3)
