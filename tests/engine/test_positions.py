"""Graphs that count positions from 1 and build their causal mask from ``position_ids``
(Gemma 3's onnx-community exports: no ``attention_mask``): the graph, not the model's name,
decides, and Hearth's logits equal a reference fed the way the model card feeds it."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from app.engine.engine import Engine
from app.engine.positions import probe_position_offset
from tests.fixtures.tiny_models import build_plain_kv_model

PROMPT = [1, 5, 9, 33, 7, 12, 40, 3]
STEPS = 12


@pytest.fixture(scope="module")
def positions_dir(tmp_path_factory):
    return build_plain_kv_model(tmp_path_factory.mktemp("position_mask"), mask_from_positions=True)


def reference_greedy(model_path, prompt: list[int], steps: int) -> tuple[np.ndarray, list[int]]:
    """The model card's loop: ``position_ids = arange(1, n + 1)``, no attention_mask, then
    ``position_ids[:, -1:] + 1`` per step; returns the prompt's last logits and the greedy
    tokens."""
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    pasts = [i for i in session.get_inputs() if i.name.startswith("past_key_values.")]
    feeds = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in pasts}
    ids = np.asarray([prompt], np.int64)
    positions = np.arange(1, len(prompt) + 1, dtype=np.int64)[None, :]
    names = [o.name for o in session.get_outputs()]
    first_logits, tokens = None, []
    for _ in range(steps):
        out = session.run(None, {"input_ids": ids, "position_ids": positions, **feeds})
        logits = out[0][0, -1]
        if first_logits is None:
            first_logits = logits.copy()
        token = int(np.argmax(logits))
        tokens.append(token)
        feeds = {name.replace("present", "past_key_values"): value
                 for name, value in zip(names[1:], out[1:], strict=True)}
        ids = np.asarray([[token]], np.int64)
        positions = positions[:, -1:] + 1
    return first_logits, tokens


def hearth_greedy(engine: Engine, prompt: list[int], steps: int) -> tuple[np.ndarray, list[int]]:
    decoder = engine.decoder
    cache = decoder.new_cache()
    logits = decoder.feed(cache, prompt).copy()
    first, tokens = logits, []
    for _ in range(steps):
        token = int(np.argmax(logits))
        tokens.append(token)
        logits = decoder.step(cache, token)
    return first, tokens


def test_a_graph_that_masks_by_position_ids_is_fed_from_one_and_matches_the_reference(
        positions_dir):
    engine = Engine.load(positions_dir, provider="cpu", threads=1, huge_pages=False)
    assert engine.graph.attention_mask is None and engine.graph.position_ids == "position_ids"
    assert "gemma" not in (engine.spec.root / "config.json").read_text()  # not by name
    assert engine.decoder.position_offset == 1
    ref_logits, ref_tokens = reference_greedy(engine.spec.model_path, PROMPT, STEPS)
    logits, tokens = hearth_greedy(engine, PROMPT, STEPS)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert tokens == ref_tokens


def test_fed_from_zero_the_same_graph_gives_other_logits(positions_dir):
    """What the probe guards against: 0-based positions hide each token from itself."""
    engine = Engine.load(positions_dir, provider="cpu", threads=1, huge_pages=False)
    engine.decoder.set_position_offset(0)
    ref_logits, _ = reference_greedy(engine.spec.model_path, PROMPT, 1)
    logits, _ = hearth_greedy(engine, PROMPT, 1)
    assert np.abs(logits - ref_logits).max() > 1e-2


def test_graphs_with_an_attention_mask_keep_zero_based_positions(plain_model_dir):
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1, huge_pages=False)
    assert engine.decoder.position_offset == 0
    assert probe_position_offset(engine.decoder) == 0


def test_a_graph_without_attention_mask_chats(positions_dir):
    """No attention_mask: the rebind path never needed the steady step's mask binding, so a
    reply runs as with one."""
    from app.engine.types import GenerationSettings, Message, SamplingSettings

    engine = Engine.load(positions_dir, provider="cpu", threads=1, huge_pages=False)
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=8)
    chunks = list(engine.chat([Message("user", "Hello there")], settings))
    assert chunks[-1].stats.generated_tokens >= 1
    assert engine.decode_path == "rebind"
