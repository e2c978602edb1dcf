"""SmolLM3 (NoPE: every 4th layer skips rotary) and Granite (embedding, residual, attention
and logit multipliers) GGUFs convert and match the numpy reference (gpt-oss: test_gguf_gpt_oss)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from app.models.gguf.convert import convert_gguf
from app.models.gguf.reader import GGUFFile
from tests.models.llama_reference import RefConfig, greedy, run_steps
from tests.models.ort_runner import GrowingRunner, SharedBufferRunner, open_session
from tests.models.ort_runner import greedy as onnx_greedy
from tests.models.test_gguf_convert import PROMPT, STEPS, nbits_weights
from tests.models.tiny_gguf import HEAD_DIM, HEADS, KV_HEADS, write_tiny_gguf

LAYERS = 4  # SmolLM3's layer 3 is a NoPE layer
GRANITE = {"embed_scale": 12.0, "residual_scale": 0.22, "attn_scale": 0.015625,
           "logit_scale": 8.0}


def cfg(arch: str, **kw) -> RefConfig:
    return RefConfig(LAYERS, HEADS, KV_HEADS, HEAD_DIM, 1e6, 1e-5, rope_interleaved=True, **kw)


SMOLLM3 = cfg("smollm3", nope_layers=(3,))
GRANITE_CFG = cfg("granite", **GRANITE)


def granite_keys(w) -> None:
    w.add_embedding_scale(GRANITE["embed_scale"])
    w.add_residual_scale(GRANITE["residual_scale"])
    w.add_attention_scale(GRANITE["attn_scale"])
    w.add_logit_scale(GRANITE["logit_scale"])


def write(src, arch: str, **kw) -> dict:
    return write_tiny_gguf(
        src, arch=arch, layers=LAYERS, metadata=granite_keys if arch == "granite" else None, **kw
    )


def onnx_run(runner) -> list[np.ndarray]:
    return [runner.step(ids) for ids in [PROMPT, *STEPS]]


def assert_close(got, want, tol=1e-4) -> None:
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=tol, rtol=tol)


def test_reads_the_params(tmp_path):
    write(tmp_path / "s.gguf", "smollm3")
    write(tmp_path / "g.gguf", "granite")
    s, g = GGUFFile(tmp_path / "s.gguf").params, GGUFFile(tmp_path / "g.gguf").params
    assert (s.nope_layers, s.rope_interleaved, s.residual_scale) == ((3,), True, 1.0)
    assert (g.embed_scale, g.residual_scale, g.attn_scale, g.logit_scale) == tuple(
        np.float32(v) for v in GRANITE.values()
    )
    assert g.nope_layers == () and g.rope_interleaved


@pytest.mark.parametrize(("arch", "ref"), [("smollm3", SMOLLM3), ("granite", GRANITE_CFG)])
def test_each_twist_matters(tmp_path, arch, ref):
    """The reference without the twist answers differently, so the conversion tests below
    would catch a graph that left it out."""
    weights = write(tmp_path / "m.gguf", arch)
    plain = cfg(arch)
    for a, b in zip(run_steps(weights, ref, PROMPT, STEPS), run_steps(weights, plain, PROMPT,
                                                                       STEPS), strict=True):
        assert np.abs(a - b).max() > 1e-2


@pytest.mark.parametrize(("arch", "ref"), [("smollm3", SMOLLM3), ("granite", GRANITE_CFG)])
@pytest.mark.parametrize(("qtype", "precision"), [(Q.F32, "native"), (Q.Q3_K, "fp32")])
def test_float_paths_match_reference(tmp_path, arch, ref, qtype, precision):
    src = tmp_path / "m.gguf"
    weights = write(src, arch, qtype=qtype)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", precision=precision)
    assert_close(onnx_run(GrowingRunner(open_session(dest))), run_steps(weights, ref, PROMPT,
                                                                        STEPS))


@pytest.mark.parametrize(("arch", "ref"), [("smollm3", SMOLLM3), ("granite", GRANITE_CFG)])
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q2_K, Q.IQ4_XS])
def test_native_paths_match_reference(tmp_path, arch, ref, qtype):
    src = tmp_path / "m.gguf"
    weights = write(src, arch, qtype=qtype, tied=False)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0)
    got = onnx_run(GrowingRunner(open_session(dest)))
    assert_close(got, run_steps(nbits_weights(src, weights), ref, PROMPT, STEPS))


@pytest.mark.parametrize(("arch", "ref"), [("smollm3", SMOLLM3), ("granite", GRANITE_CFG)])
def test_greedy_tokens_over_the_shared_buffer(tmp_path, arch, ref):
    src = tmp_path / "m.gguf"
    weights = write(src, arch, seed=3, tied=False)
    dest = convert_gguf(src, tmp_path / "model")
    got = onnx_greedy(SharedBufferRunner(open_session(dest), 64), PROMPT, 12)
    assert got == greedy(weights, ref, PROMPT, 12)


def test_granite_without_multipliers_is_plain_llama(tmp_path):
    """A Granite file with no multiplier keys converts as the plain trunk."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, arch="granite", layers=LAYERS)
    p = GGUFFile(src).params
    assert (p.embed_scale, p.residual_scale, p.attn_scale, p.logit_scale) == (1.0, 1.0, 0.0, 1.0)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0)
    got = onnx_run(GrowingRunner(open_session(dest)))
    assert_close(got, run_steps(weights, cfg("granite"), PROMPT, STEPS))
