"""Phi-3 GGUFs (``general.architecture = "phi3"``): fused ``attn_qkv`` and ``ffn_up`` (gate
rows first), LongRoPE with short factors up to ``rope.scaling.original_context_length``
tokens and long ones past it (switched inside the graph on the sequence length), the
attention factor on cos/sin, partial rotary (Phi-4-mini) and a sliding window. Each
converted file matches the numpy reference in every regime."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import onnx
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

from app.models.gguf.convert import convert_gguf
from app.models.gguf.reader import GGUFFile
from tests.models.llama_reference import RefConfig, greedy, run_steps
from tests.models.ort_runner import GrowingRunner, SharedBufferRunner, open_session
from tests.models.ort_runner import greedy as onnx_greedy
from tests.models.test_gguf_convert import PROMPT, STEPS, nbits_weights
from tests.models.tiny_gguf import HEAD_DIM, HEADS, KV_HEADS, LAYERS, rope_base, write_tiny_gguf

CONTEXT, ORIGINAL = 256, 64  # the tiny model's context; LongRoPE's original context
ATTN_FACTOR = math.sqrt(1 + math.log(CONTEXT / ORIGINAL) / math.log(ORIGINAL))  # as converted
CFG = RefConfig(LAYERS, HEADS, KV_HEADS, HEAD_DIM, rope_base("phi3"), 1e-5, False)
LONG_PROMPT = [int(i) for i in np.random.default_rng(7).integers(3, 288, size=40)]
CROSSING = [int(i) for i in np.random.default_rng(8).integers(3, 288, size=30)]
# short regime: the 40-token prompt and one cached token (41 ≤ 64); then a chunk that takes
# the sequence to 71 > 64 and single cached tokens in the long regime
LONG_STEPS = [[7], CROSSING, [9], [33], [120]]
SHORT_STEPS = 2  # how many of the results (prompt included) are in the short regime


def factors(half: int = HEAD_DIM // 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    short = (1.0 + 0.5 * rng.random(half)).astype(np.float32)
    long = np.geomspace(1.0, 16.0, half).astype(np.float32)
    return short, long


def longrope_metadata(w: GGUFWriter) -> None:
    w.add_rope_scaling_orig_ctx_len(ORIGINAL)
    w.add_rope_scaling_attn_factors(ATTN_FACTOR)


def write_longrope(src, rope_dim: int = HEAD_DIM, **kw) -> dict:
    short, long = factors(rope_dim // 2)
    return write_tiny_gguf(
        src, arch="phi3", fused=True, tied=False, rope_dim=rope_dim, metadata=longrope_metadata,
        extra_tensors={"rope_factors_short.weight": short, "rope_factors_long.weight": long},
        **kw,
    )  # fmt: skip


def longrope_cfg(rope_dim: int = HEAD_DIM) -> RefConfig:
    short, long = factors(rope_dim // 2)
    return dataclasses.replace(
        CFG, short_factors=short, long_factors=long, original_context=ORIGINAL,
        attn_factor=ATTN_FACTOR, rope_dim=rope_dim if rope_dim != HEAD_DIM else 0,
    )  # fmt: skip


def onnx_run(runner, prompt=PROMPT, steps=STEPS) -> list[np.ndarray]:
    return [runner.step(ids) for ids in [prompt, *steps]]


def assert_close(got, want, tol=1e-4) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=tol, rtol=tol)


def test_reads_phi3_params(tmp_path):
    src = tmp_path / "p.gguf"
    write_longrope(src)
    g = GGUFFile(src)
    p = g.params
    assert (p.arch, p.rope_interleaved, p.qk_norm) == ("phi3", False, False)
    assert not p.tied_embeddings and not p.local_layers
    assert p.rope_original_context == ORIGINAL and p.context_length == CONTEXT
    assert p.rope_attn_factor == pytest.approx(ATTN_FACTOR)
    np.testing.assert_array_equal(g.longrope_factors()[1], factors()[1])


@pytest.mark.parametrize(
    ("qtype", "precision", "exact_offsets"),
    [
        (Q.F32, "native", False),
        (Q.F16, "native", False),
        (Q.Q8_0, "native", False),
        (Q.Q4_0, "native", False),
        (Q.Q4_1, "native", True),
        (Q.Q6_K, "native", False),
        (Q.Q4_K, "native", False),
        (Q.Q4_K, "fp32", False),
    ],
)
def test_fused_matrices_match_reference(tmp_path, qtype, precision, exact_offsets):
    """Plain rotary (Phi-3-mini-4k has no LongRoPE factors); float activations, so the graph
    computes the mapped weights."""
    src = tmp_path / "p.gguf"
    weights = write_tiny_gguf(src, arch="phi3", qtype=qtype, fused=True, tied=False)
    dest = convert_gguf(
        src, tmp_path / "model", precision=precision, accuracy_level=0,
        exact_offsets=exact_offsets,
    )  # fmt: skip
    want_w = weights if precision == "fp32" else nbits_weights(src, weights, exact_offsets)
    got = onnx_run(GrowingRunner(open_session(dest)))
    assert_close(got, run_steps(want_w, CFG, PROMPT, STEPS))
    graph = onnx.load(str(dest / "model.onnx"), load_external_data=False).graph
    # packed, one matmul: the (default) grouped attention splits its rows into q, k and v
    assert not [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert len([n for n in graph.node if n.name.endswith(".attn/split")]) == LAYERS


def test_both_regimes_matter(tmp_path):
    """The reference with short factors only differs past the original context and the one
    with long factors only differs below it, so the tests below check the switch."""
    weights = write_longrope(tmp_path / "p.gguf")
    cfg = longrope_cfg()
    both = run_steps(weights, cfg, LONG_PROMPT, LONG_STEPS)
    short_only = run_steps(
        weights, dataclasses.replace(cfg, long_factors=cfg.short_factors), LONG_PROMPT, LONG_STEPS
    )
    long_only = run_steps(
        weights, dataclasses.replace(cfg, short_factors=cfg.long_factors), LONG_PROMPT, LONG_STEPS
    )
    for j, got in enumerate(both):
        other = long_only if j < SHORT_STEPS else short_only
        assert np.abs(got - other[j]).max() > 1e-2
    unscaled = run_steps(weights, dataclasses.replace(cfg, attn_factor=1.0), LONG_PROMPT, [])
    assert np.abs(unscaled[0] - both[0]).max() > 1e-2


@pytest.mark.parametrize(
    ("runner", "rope_dim"), [("growing", HEAD_DIM), ("shared", HEAD_DIM), ("shared", 32)]
)
def test_longrope_switches_with_the_sequence_length(tmp_path, runner, rope_dim):
    """Short factors up to 64 tokens, long ones past (and for every later cached step), with
    a growing cache and with the engine's shared buffer (longer than the original context);
    rope_dim 32 of 64 is Phi-4-mini's partial rotary."""
    src = tmp_path / "p.gguf"
    weights = write_longrope(src, rope_dim=rope_dim, qtype=Q.F32)
    dest = convert_gguf(src, tmp_path / "model")
    session = open_session(dest)
    run = GrowingRunner(session) if runner == "growing" else SharedBufferRunner(session, 128)
    got = onnx_run(run, LONG_PROMPT, LONG_STEPS)
    assert_close(got, run_steps(weights, longrope_cfg(rope_dim), LONG_PROMPT, LONG_STEPS))


def test_longrope_quantized_greedy_tokens_equal_reference(tmp_path):
    """Token for token at the default accuracy level, from the short regime into the long."""
    src = tmp_path / "p.gguf"
    weights = write_longrope(src, qtype=Q.Q8_0, seed=3)
    dest = convert_gguf(src, tmp_path / "model")
    prompt = (LONG_PROMPT + CROSSING)[:56]
    got = onnx_greedy(SharedBufferRunner(open_session(dest), 128), prompt, 16)
    assert len(prompt) < ORIGINAL < len(prompt) + 16  # starts short, ends long
    assert got == greedy(weights, longrope_cfg(), prompt, 16)


def test_partial_rotary_matters(tmp_path):
    weights = write_longrope(tmp_path / "p.gguf", rope_dim=32)
    partial = run_steps(weights, longrope_cfg(32), LONG_PROMPT, [])
    ones = np.ones(HEAD_DIM // 2)
    full_cfg = dataclasses.replace(
        longrope_cfg(32), rope_dim=0, short_factors=ones, long_factors=ones
    )
    full = run_steps(weights, full_cfg, LONG_PROMPT, [])
    assert np.abs(partial[0] - full[0]).max() > 1e-2


def test_sliding_window(tmp_path):
    """``phi3.attention.sliding_window`` below the context: every layer attends within it."""
    window = 8
    src = tmp_path / "p.gguf"
    weights = write_tiny_gguf(
        src, arch="phi3", fused=True, metadata=lambda w: w.add_sliding_window(window)
    )
    assert GGUFFile(src).params.local_layers == tuple(range(LAYERS))
    dest = convert_gguf(src, tmp_path / "model")
    cfg = dataclasses.replace(CFG, sliding_window=window)
    got = onnx_run(GrowingRunner(open_session(dest)), LONG_PROMPT[:20], [[7], [9, 33, 44], [5]])
    want = run_steps(weights, cfg, LONG_PROMPT[:20], [[7], [9, 33, 44], [5]])
    assert_close(got, want)
    unwindowed = run_steps(weights, CFG, LONG_PROMPT[:20], [])
    assert np.abs(unwindowed[0] - want[0]).max() > 1e-2


def test_chat_ends_at_the_end_of_turn_token(tmp_path):
    """Phi-3 GGUFs name <|endoftext|> as eos; replies end with <|end|> (the eot id)."""
    src = tmp_path / "p.gguf"
    write_tiny_gguf(src, arch="phi3", fused=True, metadata=lambda w: w.add_eot_token_id(1))
    dest = convert_gguf(src, tmp_path / "model")
    cfg = json.loads((dest / "genai_config.json").read_text())["model"]
    assert cfg["type"] == "phi3" and cfg["eos_token_id"] == [2, 1]


def test_engine_generates_the_reference_tokens_across_the_switch(tmp_path):
    """Hearth's own engine (shared KV buffer, chunked prefill, fast decode step) on a LongRoPE
    conversion: greedy tokens from the short regime into the long one equal the reference's."""
    from app.engine.engine import Engine
    from app.engine.types import GenerationSettings, SamplingSettings

    src = tmp_path / "p.gguf"
    weights = write_longrope(src, qtype=Q.F32, seed=7)
    dest = convert_gguf(src, tmp_path / "model")
    engine = Engine.load(dest, provider="cpu", threads=1, huge_pages=False)
    prompt = (LONG_PROMPT + CROSSING)[:56]
    settings = GenerationSettings(SamplingSettings(temperature=0.0), max_new_tokens=16)
    got = [c.token_id for c in engine.generate(prompt, settings) if c.token_id is not None]
    cfg = longrope_cfg()
    want = greedy(weights, cfg, prompt, 16)
    assert got == want
    short_only = greedy(
        weights, dataclasses.replace(cfg, long_factors=cfg.short_factors), prompt, 16
    )
    assert short_only != want  # a graph that never switched would fail here


def test_estimate_counts_fused_matrices_and_both_caches(tmp_path):
    from app.models.gguf.convert import estimate_output_bytes
    from app.models.gguf.weights import WeightSource

    src = tmp_path / "p.gguf"
    write_longrope(src, qtype=Q.Q4_0)
    g = GGUFFile(src)
    est = estimate_output_bytes(g, WeightSource(g, "native"))
    real = (convert_gguf(src, tmp_path / "model") / "model.onnx.data").stat().st_size
    assert 0.9 * real <= est <= 1.2 * real
