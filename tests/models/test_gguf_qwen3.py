"""Qwen 3 GGUFs (``general.architecture = "qwen3"``): per-head q/k RMSNorm before rotary,
NeoX rotary, a head size other than hidden/heads (``attention.key_length``), no q/k/v
biases, tied or untied output. Each converted file matches the numpy reference."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from app.models.gguf.convert import convert_gguf
from app.models.gguf.reader import GGUFFile
from tests.models.llama_reference import RefConfig, greedy, run_steps
from tests.models.ort_runner import GrowingRunner, SharedBufferRunner, open_session
from tests.models.ort_runner import greedy as onnx_greedy
from tests.models.test_gguf_convert import PROMPT, STEPS, nbits_weights
from tests.models.tiny_gguf import HEADS, HIDDEN, KV_HEADS, LAYERS, rope_base, write_tiny_gguf

HEAD_DIM = 32  # 4 heads · 32 = 128, not the hidden size 256 (as in Qwen3-0.6B: 16 · 128 vs 1024)
CFG = RefConfig(
    LAYERS, HEADS, KV_HEADS, HEAD_DIM, rope_base("qwen3"), 1e-5, rope_interleaved=False,
    qk_norm=True,
)  # fmt: skip


def write(src, **kw) -> dict:
    return write_tiny_gguf(src, arch="qwen3", head_dim=HEAD_DIM, qk_norm=True, **kw)


def onnx_run(runner) -> list[np.ndarray]:
    return [runner.step(ids) for ids in [PROMPT, *STEPS]]


def assert_close(got, want, tol=1e-4) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=tol, rtol=tol)


def test_reads_qwen3_params(tmp_path):
    src = tmp_path / "q.gguf"
    write(src)
    p = GGUFFile(src).params
    assert (p.arch, p.head_dim, p.hidden, p.qk_norm, p.rope_interleaved) == (
        "qwen3",
        HEAD_DIM,
        HIDDEN,
        True,
        False,
    )
    assert not p.qkv_bias and not p.local_layers and p.rotary_dim == HEAD_DIM


def test_the_norms_matter(tmp_path):
    """The reference without the q/k norms answers differently, so the tests below would
    catch a graph that skipped them."""
    weights = write(tmp_path / "q.gguf")
    with_norms = run_steps(weights, CFG, PROMPT, STEPS)
    without = run_steps(weights, dataclasses.replace(CFG, qk_norm=False), PROMPT, STEPS)
    for a, b in zip(with_norms, without, strict=True):
        assert np.abs(a - b).max() > 1e-2


@pytest.mark.parametrize(
    ("qtype", "tied", "precision"),
    [(Q.F32, True, "native"), (Q.F16, False, "native"), (Q.Q4_1, False, "fp32")],
)
def test_float_paths_match_reference(tmp_path, qtype, tied, precision):
    src = tmp_path / "q.gguf"
    weights = write(src, qtype=qtype, tied=tied)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", precision=precision)
    got = onnx_run(GrowingRunner(open_session(dest)))
    assert_close(got, run_steps(weights, CFG, PROMPT, STEPS))


@pytest.mark.parametrize(
    ("qtype", "tied", "exact_offsets", "matrix_types"),
    [
        (Q.Q8_0, True, False, None),
        (Q.Q4_0, False, False, None),
        (Q.Q4_1, True, True, None),
        (Q.Q6_K, False, False, {"attn_output": Q.Q8_0}),  # K-quants need rows of 256
        (Q.Q4_K, True, False, {"attn_output": Q.Q8_0, "attn_v": Q.Q6_K}),
    ],
)
def test_native_quantized_paths_match_reference(tmp_path, qtype, tied, exact_offsets, matrix_types):
    """Float activations (accuracy_level 0): the graph computes the mapped weights."""
    src = tmp_path / "q.gguf"
    weights = write(src, qtype=qtype, tied=tied, matrix_types=matrix_types)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0,
                        exact_offsets=exact_offsets)
    got = onnx_run(GrowingRunner(open_session(dest)))
    assert_close(got, run_steps(nbits_weights(src, weights, exact_offsets), CFG, PROMPT, STEPS))


def test_greedy_tokens_equal_reference_with_shared_buffer(tmp_path):
    """Token for token, at the default accuracy level, over the engine's shared KV buffer."""
    src = tmp_path / "q.gguf"
    weights = write(src, qtype=Q.Q8_0, seed=2)
    dest = convert_gguf(src, tmp_path / "model")
    got = onnx_greedy(SharedBufferRunner(open_session(dest), 64), PROMPT, 12)
    assert got == greedy(weights, CFG, PROMPT, 12)


PROMPTS = [PROMPT, [11, 12, 13], [200, 7, 7, 7, 150, 33, 90, 1, 60], [42]]


@pytest.mark.parametrize("seed", [1, 3])
def test_q8_0_forks_only_by_int8_activation_rounding(tmp_path, seed):
    """Untied random Qwen 3 in Q8_0 (top-2 logit gaps down to ~0.002): with float
    activations the native graph and the fp32 one follow the reference token for token on
    four prompts; only the default int8 activations (logits within ~0.04 of the reference)
    may fork, and only where the reference's top two are closer than that."""
    src = tmp_path / "q.gguf"
    weights = write(src, qtype=Q.Q8_0, seed=seed, tied=False)
    for precision in ("fp32", "native"):
        dest = convert_gguf(src, tmp_path / precision, precision=precision, accuracy_level=0)
        for prompt in PROMPTS:
            got = onnx_greedy(SharedBufferRunner(open_session(dest), 64), prompt, 8)
            assert got == greedy(weights, CFG, prompt, 8)
