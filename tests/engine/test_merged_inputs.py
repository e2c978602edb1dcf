"""Inputs of Hub exports Hearth feeds with a value it knows: Optimum's merged decoders'
``use_cache_branch`` (False on the first pass, True once there is a past) and the "how many
last positions get logits" input under both its names (``num_logits_to_keep``, and
``logits_to_keep`` since transformers 4.50)."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.engine import Engine
from tests.fixtures.tiny_models import build_plain_kv_model

PROMPT = [1, 5, 9, 33, 7, 12, 40, 3]


def greedy(engine: Engine, prompt: list[int], steps: int) -> list[int]:
    decoder = engine.decoder
    cache = decoder.new_cache()
    logits = decoder.feed(cache, prompt)
    tokens = []
    for _ in range(steps):
        tokens.append(int(np.argmax(logits)))
        logits = decoder.step(cache, tokens[-1])
    return tokens


@pytest.fixture(scope="module")
def reference(plain_model_dir):
    return Engine.load(plain_model_dir, provider="cpu", threads=1, huge_pages=False)


def test_a_merged_decoder_is_fed_use_cache_branch_and_decodes_as_the_plain_graph(
        tmp_path, reference):
    folder = build_plain_kv_model(tmp_path / "merged", variant_name="decoder_model_merged",
                                  cache_branch=True)
    engine = Engine.load(folder, provider="cpu", threads=1, huge_pages=False)
    assert engine.spec.variant == "decoder_model_merged"
    assert engine.graph.use_cache_branch == "use_cache_branch"
    assert greedy(engine, PROMPT, 12) == greedy(reference, PROMPT, 12)
    # a prompt fed in two chunks takes the past branch for the second one
    cache = engine.decoder.new_cache()
    engine.decoder.feed(cache, PROMPT[:3])
    chunked = engine.decoder.feed(cache, PROMPT[3:])
    whole = reference.decoder.feed(reference.decoder.new_cache(), PROMPT)
    np.testing.assert_allclose(chunked, whole, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["logits_to_keep", "num_logits_to_keep"])
def test_both_names_of_logits_to_keep_are_fed_and_verify_returns_every_row(
        tmp_path, reference, name):
    folder = build_plain_kv_model(tmp_path / "keep", logits_to_keep=name)
    engine = Engine.load(folder, provider="cpu", threads=1, huge_pages=False)
    decoder = engine.decoder
    assert decoder.can_verify
    assert greedy(engine, PROMPT, 8) == greedy(reference, PROMPT, 8)
    cache = decoder.new_cache()
    decoder.feed(cache, PROMPT[:4])
    rows = decoder.verify(cache, PROMPT[4:])
    ref_cache = reference.decoder.new_cache()
    reference.decoder.feed(ref_cache, PROMPT[:4])
    np.testing.assert_allclose(rows, reference.decoder.verify(ref_cache, PROMPT[4:]),
                               rtol=1e-4, atol=1e-4)
