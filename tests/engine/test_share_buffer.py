"""genai_config's ``search.past_present_share_buffer``: false keeps a GroupQueryAttention
graph's past and present apart (the rebind path), as onnxruntime-genai does; true (or unsaid)
shares one buffer."""

from __future__ import annotations

import json

import numpy as np

from app.engine.engine import Engine
from app.engine.kv_cache import RebindCache, SharedBufferCache
from app.engine.package import read_model_folder
from tests.fixtures.tiny_models import build_gqa_model

PROMPT = [1, 5, 9, 33, 7, 12, 40, 3]


def greedy(engine: Engine, steps: int) -> list[int]:
    cache = engine.decoder.new_cache()
    logits = engine.decoder.feed(cache, PROMPT)
    tokens = []
    for _ in range(steps):
        tokens.append(int(np.argmax(logits)))
        logits = engine.decoder.step(cache, tokens[-1])
    return tokens


def test_share_buffer_false_takes_the_rebind_path_and_decodes_the_same(tmp_path):
    shared_dir = build_gqa_model(tmp_path / "shared")
    apart_dir = build_gqa_model(tmp_path / "apart")
    config_path = apart_dir / "genai_config.json"
    config = json.loads(config_path.read_text())
    config["search"]["past_present_share_buffer"] = False
    config_path.write_text(json.dumps(config))

    assert read_model_folder(shared_dir).share_buffer is True
    assert read_model_folder(apart_dir).share_buffer is False
    shared = Engine.load(shared_dir, provider="cpu", threads=1, huge_pages=False)
    apart = Engine.load(apart_dir, provider="cpu", threads=1, huge_pages=False)
    assert shared.graph.uses_group_query_attention and apart.graph.uses_group_query_attention
    assert shared.decode_path == "shared" and isinstance(shared.new_cache(), SharedBufferCache)
    assert apart.decode_path == "rebind" and isinstance(apart.new_cache(), RebindCache)
    assert greedy(apart, 16) == greedy(shared, 16)


def test_a_replys_logits_never_depend_on_the_buffers_capacity_or_what_lies_past_the_cursor(
        tmp_path):
    """The shared buffer grows in doubling buckets: GroupQueryAttention reads only the valid
    length (the mask's sum), never the capacity, so a cache grown bucket by bucket and one
    allocated to the whole context at once, its spare positions full of NaN, give the same
    logits bit for bit at every step (bench/bench_long_context.py: no capacity lever)."""
    from tests.fixtures.quantized import quantize_matmuls

    folder = build_gqa_model(tmp_path / "int4", context_length=2048)
    assert quantize_matmuls(folder / "model.onnx") > 0  # the 4-bit path, as the starter's
    engine = Engine.load(folder, provider="cpu", threads=1, huge_pages=False)
    decoder = engine.decoder
    context = decoder.context_length
    assert context == 2048
    grown = decoder.new_cache()
    whole = decoder.new_cache()
    assert isinstance(whole, SharedBufferCache)
    whole.ensure_capacity(context)
    for value in whole.tensors:  # what no reply may ever read
        shape = value.shape()
        value.update_inplace(np.full(shape, np.nan, dtype=np.float32))
    prompt = [(7 + 13 * i) % 90 + 3 for i in range(300)]  # crosses the 256-position bucket
    want, got = decoder.feed(grown, prompt), decoder.feed(whole, prompt)
    assert grown.capacity == 512 and whole.capacity == context
    np.testing.assert_array_equal(got, want)
    for _ in range(12):
        token = int(np.argmax(want))
        want, got = decoder.step(grown, token).copy(), decoder.step(whole, token).copy()
        np.testing.assert_array_equal(got, want)
        assert np.isfinite(got).all()
