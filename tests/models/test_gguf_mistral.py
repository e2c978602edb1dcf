"""GGUFs that name their architecture "mistral" (some converters do, for Mistral and
Ministral models): llama's tensor layout and rotary, ``mistral.*`` metadata keys, and the
sliding window on every layer when ``mistral.attention.sliding_window`` is below the
context. Each converted file matches the numpy reference."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from gguf import GGMLQuantizationType as Q

from app.models.gguf.convert import convert_gguf
from app.models.gguf.reader import GGUFFile
from tests.models.llama_reference import RefConfig, greedy, run_steps
from tests.models.ort_runner import GrowingRunner, SharedBufferRunner, open_session
from tests.models.ort_runner import greedy as onnx_greedy
from tests.models.test_gguf_convert import PROMPT, STEPS, nbits_weights
from tests.models.tiny_gguf import HEAD_DIM, HEADS, KV_HEADS, LAYERS, rope_base, write_tiny_gguf

CFG = RefConfig(LAYERS, HEADS, KV_HEADS, HEAD_DIM, rope_base("mistral"), 1e-5, True)
WINDOW = 8
LONG_PROMPT = [int(i) for i in np.random.default_rng(5).integers(3, 288, size=20)]
LONG_STEPS = [[7], [9, 33, 44], [5], [61]]


def onnx_run(runner, prompt=PROMPT, steps=STEPS) -> list[np.ndarray]:
    return [runner.step(ids) for ids in [prompt, *steps]]


def assert_close(got, want) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


def windowed(w) -> None:
    w.add_sliding_window(WINDOW)


def test_reads_mistral_keys(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, arch="mistral", metadata=windowed)
    g = GGUFFile(src)
    assert g.get("mistral.attention.sliding_window") == WINDOW
    p = g.params
    assert (p.arch, p.rope_interleaved, p.n_layers, p.rope_base) == ("mistral", True, LAYERS, 1e4)
    assert (p.sliding_window, p.local_layers) == (WINDOW, tuple(range(LAYERS)))


@pytest.mark.parametrize(
    ("qtype", "tied", "exact_offsets"),
    [(Q.F32, True, False), (Q.F16, False, False), (Q.Q8_0, False, False),
     (Q.Q4_1, True, True), (Q.Q4_K, False, False)],
)  # fmt: skip
def test_llama_layout_matches_reference(tmp_path, qtype, tied, exact_offsets):
    """Without a window: exactly the llama path (interleaved rotary)."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, arch="mistral", qtype=qtype, tied=tied)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0,
                        exact_offsets=exact_offsets)
    got = onnx_run(GrowingRunner(open_session(dest)))
    assert_close(got, run_steps(nbits_weights(src, weights, exact_offsets), CFG, PROMPT, STEPS))


@pytest.mark.parametrize("runner", ["growing", "shared"])
def test_sliding_window_matches_reference(tmp_path, runner):
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, arch="mistral", metadata=windowed, seed=4)
    dest = convert_gguf(src, tmp_path / "model")
    graph = onnx.load(str(dest / "model.onnx"), load_external_data=False).graph
    windows = [
        a.i
        for n in graph.node
        if n.op_type == "GroupQueryAttention"
        for a in n.attribute
        if a.name == "local_window_size"
    ]
    assert windows == [WINDOW] * LAYERS
    session = open_session(dest)
    run = GrowingRunner(session) if runner == "growing" else SharedBufferRunner(session, 64)
    want = run_steps(weights, dataclasses.replace(CFG, sliding_window=WINDOW), LONG_PROMPT,
                     LONG_STEPS)  # fmt: skip
    assert_close(onnx_run(run, LONG_PROMPT, LONG_STEPS), want)
    unwindowed = run_steps(weights, CFG, LONG_PROMPT, LONG_STEPS)
    assert all(np.abs(a - b).max() > 1e-2 for a, b in zip(want, unwindowed, strict=True))


def test_window_as_long_as_the_context_is_no_window(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, arch="mistral", metadata=lambda w: w.add_sliding_window(256))
    assert GGUFFile(src).params.local_layers == ()


def test_greedy_tokens_equal_reference(tmp_path):
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, arch="mistral", qtype=Q.Q8_0, metadata=windowed, seed=6)
    dest = convert_gguf(src, tmp_path / "model")
    got = onnx_greedy(SharedBufferRunner(open_session(dest), 64), LONG_PROMPT, 12)
    assert got == greedy(weights, dataclasses.replace(CFG, sliding_window=WINDOW), LONG_PROMPT, 12)
