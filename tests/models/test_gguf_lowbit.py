"""The low-bit types people download (Q2_K, Q3_K, IQ4_NL/XS, IQ3, IQ2, IQ1, TQ): each file's
fp32 conversion equals the ``gguf`` package's own dequantization run through the numpy
reference, and its native form (MatMulNBits blocks, GatherBlockQuantized lookup) is exact:
the same logits with float activations, as close as the Q4_0/Q8_0 forms are."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from app.models.gguf import quant
from app.models.gguf.convert import convert_gguf
from tests.models.ort_runner import GrowingRunner, open_session
from tests.models.test_gguf_convert import nbits_weights, onnx_logits, reference_logits
from tests.models.tiny_gguf import encode, write_tiny_gguf

N, K = 64, 512
# type → (bits, block size) of its exact MatMulNBits form, offsets or not
FORMS = {
    Q.Q2_K: (4, 16, True),
    Q.Q3_K: (4, 16, False),
    Q.IQ4_NL: (8, 32, False),
    Q.IQ4_XS: (8, 32, False),
    Q.IQ2_XXS: (8, 32, False),
    Q.IQ2_XS: (8, 16, False),
    Q.IQ2_S: (8, 16, False),
    Q.IQ3_XXS: (8, 32, False),
    Q.IQ3_S: (8, 32, False),
    Q.IQ1_S: (8, 32, False),
    Q.IQ1_M: (8, 16, False),
    Q.TQ1_0: (4, 256, False),
    Q.TQ2_0: (4, 256, False),
}
LOW_BIT = list(FORMS)


def _raw(qtype: Q, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    raw = encode(np.zeros((N, K), np.float32), qtype, rng)
    return raw, quants.dequantize(raw, qtype).reshape(N, K)


def _max_diff(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("qtype", LOW_BIT)
def test_blocks_map_exactly(qtype):
    """The hand-read scales and the codes give back gguf's dequantization bit for bit."""
    raw, ref = _raw(qtype)
    assert np.isfinite(ref).all() and ref.std() > 0
    w = quant.to_nbits(raw, qtype, N, K, exact_offsets=True)
    bits, block, offsets = FORMS[qtype]
    assert (w.bits, w.block_size, w.exact, w.fallback_blocks) == (bits, block, True, 0)
    # Q2_K's per-block zero points are in its shifted codes: MatMulNBits' default, as the rest
    assert w.zero_points is None and (w.offsets is not None) is offsets
    np.testing.assert_array_equal(w.dequantize(), ref)
    assert quant.nbits_size(qtype, N, K, exact_offsets=True) == w.nbytes


def test_q2_k_without_offsets_is_bounded():
    """The 8-bit form of Q2_K (rounded offsets) errs by at most half a step per weight."""
    raw, ref = _raw(Q.Q2_K)
    w = quant.to_nbits(raw, Q.Q2_K, N, K, exact_offsets=False)
    assert w.bits == 8 and not w.exact and w.zero_points is not None
    err = np.abs(w.dequantize() - ref).reshape(N, -1, 16).max(axis=-1)
    # (blocks whose offset does not fit fall back to 8-bit min/max: half a step, rounded)
    assert np.all(err <= w.scales * 0.5 * (1 + 1e-3) + 1e-9)
    assert quant.nbits_size(Q.Q2_K, N, K) == w.nbytes


def test_a_scale_read_wrong_is_caught():
    """A block whose codes do not give back the GGUF's values is marked inexact (so the
    converter measures it) rather than passed off as exact."""
    raw, _ = _raw(Q.IQ4_XS)
    real = quant._signed_scales

    def off_by_one_ulp(blocks, qtype):
        return np.nextafter(real(blocks, qtype), np.float32(1))

    try:
        quant._signed_scales = off_by_one_ulp
        w = quant.to_nbits(raw, Q.IQ4_XS, N, K)
    finally:
        quant._signed_scales = real
    assert not w.exact


@pytest.mark.parametrize("qtype", LOW_BIT)
def test_fp32_conversion_equals_gguf_dequantization(tmp_path, qtype):
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=qtype, tied=False)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", precision="fp32")
    got = onnx_logits(GrowingRunner(open_session(dest)))
    for g, w in zip(got, reference_logits(weights, "llama"), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("qtype", LOW_BIT)
def test_native_form_is_exact(tmp_path, qtype):
    """Float activations (accuracy_level 0): the native graph, its lookup table read by
    GatherBlockQuantized from the same blocks as the tied head, equals the reference on the
    GGUF's own weights as closely as the fp32 conversion does."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=qtype, tied=True)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0)
    graph = onnx.load(str(dest / "model.onnx"), load_external_data=False).graph
    kinds = {n.name: n.op_type for n in graph.node}
    assert kinds["embed"] == ("Gather" if FORMS[qtype][2] else "GatherBlockQuantized")
    assert kinds["lm_head"] == "MatMulNBits"
    got = onnx_logits(GrowingRunner(open_session(dest)))
    for g, w in zip(got, reference_logits(weights, "llama"), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "mix",
    [
        {"attn_v": Q.Q4_K, "ffn_down": Q.Q4_K, "attn_output": Q.Q4_K},  # Q3_K_M
        {"attn_v": Q.Q5_K, "ffn_down": Q.Q5_K},  # Q3_K_L-style, Q5_K on 8 bits
    ],
)
def test_q3_k_mixes(tmp_path, mix):
    """Q3_K files mix in Q4_K / Q5_K / Q6_K matrices, as llama.cpp's Q3_K_M writes them.
    All three are exact (Q5_K as 8-bit codes with zero points and block offsets)."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=Q.Q3_K, tied=True, matrix_types=mix)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0)
    got = onnx_logits(GrowingRunner(open_session(dest)))
    for g, w in zip(got, reference_logits(nbits_weights(src, weights), "llama"), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)
    assert _max_diff(got, reference_logits(weights, "llama")) < 1e-4


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q8_0, *LOW_BIT])
def test_default_accuracy_level_errs_like_q4_0_and_q8_0(tmp_path, qtype):
    """At the default accuracy level (int8 activations) every type's native model stays as
    close to the reference on the GGUF's weights as the Q4_0 and Q8_0 ones (largest logit
    difference ~0.4% of the largest logit for those; 0.1–0.7% for the low-bit types)."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=qtype, tied=True)
    dest = convert_gguf(src, tmp_path / "model")
    want = reference_logits(weights, "llama")
    got = onnx_logits(GrowingRunner(open_session(dest)))
    peak = max(float(np.abs(w).max()) for w in want)
    assert _max_diff(got, want) <= 1e-2 * peak


def test_q2_k_codes_are_shifted_by_their_mean():
    """Q2_K's 2-bit codes are stored as q + 8 − z against MatMulNBits' default zero point 8,
    z the 16-element sub-block's mean code, rounded (the offsets take the rest): no
    zero-point tensor, and the int8 part s·(q − z) is the weights less their sub-block mean
    within half a step (with codes 0…3 against zero point 8 it was ~5x their size)."""
    raw, ref = _raw(Q.Q2_K)
    w = quant.to_nbits(raw, Q.Q2_K, N, K, exact_offsets=True)
    assert w.zero_points is None
    blocks = raw.reshape(N * K // 256, -1)
    _, _, scale, offset = quant._affine_params(blocks, Q.Q2_K)  # w = s·q + o per sub-block
    ok = scale != 0
    gguf_codes = np.rint((ref.reshape(-1, 16)[ok] - offset[ok, None]) / scale[ok, None])
    z = np.rint(gguf_codes.mean(axis=1))
    stored = w.codes().reshape(-1, 16)[ok].astype(np.int64)
    np.testing.assert_array_equal(stored, gguf_codes + 8 - z[:, None])
    part = (w.dequantize() - np.repeat(w.offsets, 16, axis=1)).reshape(-1, 16)[ok]
    centred = ref.reshape(-1, 16)[ok] - ref.reshape(-1, 16)[ok].mean(axis=1, keepdims=True)
    assert np.all(np.abs(part - centred) <= scale[ok, None] * 0.5 * (1 + 1e-5) + 1e-9)
    np.testing.assert_array_equal(w.dequantize(), ref)


def test_q2_k_with_int8_activations_stays_close(tmp_path):
    """Through ORT at the app's accuracy level (4, int8 activations), the Q2_K native model
    stays within 0.15% of the largest logit of the reference on the GGUF's weights (centred
    codes: ~0.10%; codes 0…3 against zero point 8 gave ~0.26%, and on bench/bench_fidelity.py's
    file 4x llama.cpp's error, where the centred form errs ~0.6x as much as llama.cpp)."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=Q.Q2_K, tied=True)
    dest = convert_gguf(src, tmp_path / "model")
    graph = onnx.load(str(dest / "model.onnx"), load_external_data=False).graph
    levels = {a.i for n in graph.node if n.op_type == "MatMulNBits"
              for a in n.attribute if a.name == "accuracy_level"}
    assert levels == {4}
    want = reference_logits(weights, "llama")
    got = onnx_logits(GrowingRunner(open_session(dest)))
    peak = max(float(np.abs(w).max()) for w in want)
    assert _max_diff(got, want) <= 1.5e-3 * peak
