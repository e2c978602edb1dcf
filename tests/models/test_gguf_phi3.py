"""Phi-3 GGUFs (``general.architecture = "phi3"``): fused ``attn_qkv`` and ``ffn_up`` (gate
rows first), LongRoPE — the long factors at every position when the model is loaded with a
context above ``rope.scaling.original_context_length``, the short ones when at or below it,
as llama.cpp chooses them, so that a reply never depends on what was cached — the attention
factor on cos/sin, partial rotary (Phi-4-mini) and a sliding window. Each converted file
matches the numpy reference in every regime."""

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
# the 40-token prompt and one cached token (41 ≤ 64); then a chunk that takes the sequence to
# 71 > 64 and single cached tokens past the original context
LONG_STEPS = [[7], CROSSING, [9], [33], [120]]
SHORT_STEPS = [[7], [9, 33, 44], [5]]  # within the original context (45 ≤ 64 tokens)


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


def longrope_cfg(rope_dim: int = HEAD_DIM, context: int = CONTEXT) -> RefConfig:
    """The reference of ``write_longrope``'s model loaded with ``context`` tokens."""
    short, long = factors(rope_dim // 2)
    return dataclasses.replace(
        CFG, short_factors=short, long_factors=long, original_context=ORIGINAL,
        attn_factor=ATTN_FACTOR, rope_dim=rope_dim if rope_dim != HEAD_DIM else 0,
        context_length=context,
    )  # fmt: skip


def loaded_at(dest, context: int):
    """The converted folder ``dest`` as Hearth loads it with a context of ``context`` tokens
    (genai_config's, as when ``bounded_context`` cuts it to what memory holds)."""
    path = dest / "genai_config.json"
    config = json.loads(path.read_text())
    config["model"]["context_length"] = context
    config["search"]["max_length"] = min(config["search"].get("max_length", context), context)
    path.write_text(json.dumps(config))
    return dest


def app_session(dest):
    """The session Hearth itself opens over ``dest`` (app/engine/providers.py)."""
    from app.engine.package import read_model_folder
    from app.engine.providers import create_session

    return create_session(read_model_folder(dest), provider="cpu", threads=1)[0]


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
        exact_offsets=exact_offsets, kv_cache="float32",
    )  # fmt: skip
    want_w = weights if precision == "fp32" else nbits_weights(src, weights, exact_offsets)
    got = onnx_run(GrowingRunner(open_session(dest)))
    assert_close(got, run_steps(want_w, CFG, PROMPT, STEPS))
    graph = onnx.load(str(dest / "model.onnx"), load_external_data=False).graph
    # packed, one matmul: the (default) grouped attention splits its rows into q, k and v
    assert not [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert len([n for n in graph.node if n.name.endswith(".attn/split")]) == LAYERS


def test_both_regimes_matter(tmp_path):
    """The reference loaded above the original context differs from the one loaded within it
    at every step, on either side of the original context: the tests below check which
    factors each run uses."""
    weights = write_longrope(tmp_path / "p.gguf")
    long = run_steps(weights, longrope_cfg(), LONG_PROMPT, LONG_STEPS)
    short = run_steps(weights, longrope_cfg(context=ORIGINAL), LONG_PROMPT, LONG_STEPS)
    for got, other in zip(long, short, strict=True):
        assert np.abs(got - other).max() > 1e-2
    unscaled = run_steps(
        weights, dataclasses.replace(longrope_cfg(), attn_factor=1.0), LONG_PROMPT, []
    )
    assert np.abs(unscaled[0] - long[0]).max() > 1e-2


@pytest.mark.parametrize(
    ("runner", "rope_dim"), [("growing", HEAD_DIM), ("shared", HEAD_DIM), ("shared", 32)]
)
def test_longrope_factors_follow_the_loaded_context(tmp_path, runner, rope_dim):
    """Loaded with its own context (256 > 64): the long factors from the first token on, on
    both sides of the original context, whatever each run's length; loaded with 64 tokens
    (the engine's session puts the loaded context in the graph): the short ones. With a
    growing cache and with the engine's shared buffer; rope_dim 32 of 64 is Phi-4-mini's
    partial rotary."""
    src = tmp_path / "p.gguf"
    weights = write_longrope(src, rope_dim=rope_dim, qtype=Q.F32)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32")

    def run(session, steps):
        r = GrowingRunner(session) if runner == "growing" else SharedBufferRunner(session, 128)
        return onnx_run(r, LONG_PROMPT, steps)

    want = run_steps(weights, longrope_cfg(rope_dim), LONG_PROMPT, LONG_STEPS)
    assert_close(run(open_session(dest), LONG_STEPS), want)
    assert_close(run(app_session(dest), LONG_STEPS), want)
    short = run_steps(weights, longrope_cfg(rope_dim, ORIGINAL), LONG_PROMPT, SHORT_STEPS)
    assert_close(run(app_session(loaded_at(dest, ORIGINAL)), SHORT_STEPS), short)


def test_longrope_quantized_greedy_tokens_equal_reference(tmp_path):
    """Token for token at the default accuracy level, from within the original context past
    it."""
    src = tmp_path / "p.gguf"
    weights = write_longrope(src, qtype=Q.Q8_0, seed=3)
    dest = convert_gguf(src, tmp_path / "model")
    prompt = (LONG_PROMPT + CROSSING)[:56]
    got = onnx_greedy(SharedBufferRunner(open_session(dest), 128), prompt, 16)
    assert len(prompt) < ORIGINAL < len(prompt) + 16  # crosses the original context
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


GREEDY_16 = {"temperature": 0.0}
SEEDED_16 = {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "seed": 1234}


def _engine(dest):
    from app.engine.engine import Engine

    return Engine.load(dest, provider="cpu", threads=1, huge_pages=False)


def _generate(engine, prompt, sampling=GREEDY_16, max_new=16, reuse=True) -> list[int]:
    from app.engine.types import GenerationSettings, SamplingSettings

    settings = GenerationSettings(SamplingSettings(**sampling), max_new_tokens=max_new)
    chunks = engine.generate(prompt, settings, reuse=reuse)
    return [c.token_id for c in chunks if c.token_id is not None]


def test_engine_generates_the_reference_tokens_of_its_loaded_context(tmp_path):
    """Hearth's own engine (shared KV buffer, chunked prefill, fast decode step) on a LongRoPE
    conversion: loaded with its 256 tokens, greedy tokens across the original context equal
    the reference's with the long factors throughout; loaded with 64, those of a reply within
    them equal the short factors' reference (as before the factors were chosen by context)."""
    src = tmp_path / "p.gguf"
    weights = write_longrope(src, qtype=Q.F32, seed=1)
    dest = convert_gguf(src, tmp_path / "model")
    prompt = (LONG_PROMPT + CROSSING)[:56]
    want = greedy(weights, longrope_cfg(), prompt, 16)
    assert _generate(_engine(dest), prompt) == want
    assert greedy(weights, longrope_cfg(context=ORIGINAL), prompt, 16) != want
    short = LONG_PROMPT[:40]
    within = greedy(weights, longrope_cfg(context=ORIGINAL), short, 16)
    assert within != greedy(weights, longrope_cfg(), short, 16)
    engine = _engine(loaded_at(dest, ORIGINAL))
    stop = next(i for i, t in enumerate([*within, engine.eos_token_ids[0]])
                if t in engine.eos_token_ids)  # the engine ends the reply there
    assert stop > 2 and _generate(engine, short) == within[: stop + 1][:16]


@pytest.mark.parametrize("context", [CONTEXT, ORIGINAL], ids=["above", "within"])
def test_a_reply_never_depends_on_what_was_cached(tmp_path, context):
    """On a 4-bit conversion loaded above the original context (a reply that crosses it)
    and within it: each token of a greedy reply equals a cold run's over the prompt and the
    reply so far, and a warm run that reuses the reply's cache; a regenerate (greedy and
    seeded) equals the first reply."""
    src = tmp_path / "p.gguf"
    write_longrope(src, qtype=Q.Q4_0)
    dest = convert_gguf(src, tmp_path / "model")
    if context != CONTEXT:
        loaded_at(dest, context)
    engine, cold = _engine(dest), _engine(dest)
    prompt = (LONG_PROMPT + CROSSING)[: 56 if context == CONTEXT else 40]
    reply = _generate(engine, prompt)
    assert len(reply) == 16 and len(prompt) + 16 <= context
    assert (len(prompt) < ORIGINAL < len(prompt) + 16) == (context > ORIGINAL)
    colds = [_generate(cold, prompt + reply[:i], max_new=1, reuse=False) for i in range(16)]
    assert [c[0] for c in colds] == reply
    for i in (3, 8, 12):  # over the reply's own cache: prompt + reply[:i] is reused
        assert _generate(engine, prompt + reply[:i], max_new=16 - i) == reply[i:]
        assert _generate(engine, prompt) == reply
    seeded = _generate(engine, prompt, SEEDED_16)
    _generate(engine, prompt + seeded[:10], max_new=4)
    assert _generate(engine, prompt, SEEDED_16) == seeded
    assert _generate(cold, prompt, SEEDED_16, reuse=False) == seeded


def test_estimate_counts_fused_matrices_and_both_caches(tmp_path):
    from app.models.gguf.convert import estimate_output_bytes
    from app.models.gguf.weights import WeightSource

    src = tmp_path / "p.gguf"
    write_longrope(src, qtype=Q.Q4_0)
    g = GGUFFile(src)
    est = estimate_output_bytes(g, WeightSource(g, "native"))
    real = (convert_gguf(src, tmp_path / "model",
                         kv_cache="float32") / "model.onnx.data").stat().st_size
    assert 0.9 * real <= est <= 1.2 * real
