"""GGUF blocks → MatMulNBits blocks: exact where claimed, bounded where approximated."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from app.models.gguf import quant
from tests.models.tiny_gguf import encode

N, K = 64, 512


def _raw(qtype: Q, seed: int = 0, offset: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((N, K)) * 0.05 + offset).astype(np.float32)
    raw = encode(w, qtype, rng)
    return raw, quants.dequantize(raw, qtype).reshape(N, K)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q8_0, Q.Q5_0, Q.Q6_K])
def test_symmetric_types_are_exact(qtype):
    raw, ref = _raw(qtype)
    w = quant.to_nbits(raw, qtype, N, K)
    assert w.exact and w.zero_points is None
    assert w.bits == (4 if qtype == Q.Q4_0 else 8)
    np.testing.assert_array_equal(w.dequantize(), ref)


@pytest.mark.parametrize(("qtype", "bits"), [(Q.Q4_1, 4), (Q.Q4_K, 4), (Q.Q5_1, 8), (Q.Q5_K, 8)])
@pytest.mark.parametrize("offset", [0.0, 0.04, 1.0])
def test_affine_types_are_exact_with_offsets(qtype, bits, offset):
    """w = s·q + o → s·(q − z) + (o + z·s) with a zero point z per block (4-bit codes: a
    zero-point tensor, 0…15; 5-bit ones on 8 bits: codes q + 128 − z against the default
    zero point) and the residual as a float block offset: bit-exact, whatever the offset."""
    raw, ref = _raw(qtype, offset=offset)
    w = quant.to_nbits(raw, qtype, N, K, exact_offsets=True)
    assert (w.bits, w.block_size, w.exact, w.fallback_blocks) == (bits, 32, True, 0)
    assert w.offsets is not None and w.offsets.shape == (N, K // 32)
    # 4-bit codes fill their blocks: a zero-point tensor; 5-bit ones are stored shifted
    # against the default zero point 128 instead
    assert (w.zero_points is not None) is (bits == 4)
    np.testing.assert_array_equal(w.dequantize(), ref)


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q5_1])
def test_zero_points_leave_the_int8_part_near_the_weights(qtype):
    """The part MatMulNBits computes, s·(q − z), is the weights themselves within half a step
    (with zero point 8 for every block it sat about s/2 plus the block's midrange off them),
    so int8 activations err as llama.cpp's dot products do: the residual offset is at most
    s/2 where the block spans zero, and never more than the offset itself."""
    raw, ref = _raw(qtype, seed=5)
    w = quant.to_nbits(raw, qtype, N, K, exact_offsets=True)
    part = w.dequantize().reshape(N, -1, 32) - w.offsets[..., None]
    assert np.all(np.abs(part - ref.reshape(N, -1, 32))
                  <= w.scales[..., None] * 0.5 * (1 + 1e-5))


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K])
def test_k_quant_zero_points_are_the_block_mean_codes(qtype):
    """The K-quants' zero point is each 32-element sub-block's mean code, rounded, so the
    int8 part s·(q − z) is the weights less their sub-block mean within half a step."""
    raw, ref = _raw(qtype, seed=6)
    w = quant.to_nbits(raw, qtype, N, K, exact_offsets=True)
    blocks = raw.reshape(N * K // 256, -1)
    scale = quant._affine_params(blocks, qtype)[2]
    ok = (scale != 0).reshape(N, -1)
    part = w.dequantize().reshape(N, -1, 32) - w.offsets[..., None]
    blocks_ref = ref.reshape(N, -1, 32)
    centred = blocks_ref - blocks_ref.mean(axis=-1, keepdims=True)
    near = np.abs(part - centred) <= scale.reshape(N, -1, 1) * 0.5 * (1 + 1e-5) + 1e-9
    assert ok.mean() > 0.9 and near[ok].all()


def test_q4_1_codes_carry_over_unchanged():
    """The packed nibbles are the GGUF's own codes (element j of a block = byte j's low
    nibble, element j + 16 = its high nibble), re-packed in element order."""
    raw, _ = _raw(Q.Q4_1, seed=4)
    w = quant.to_nbits(raw, Q.Q4_1, N, K, exact_offsets=True)
    qs = raw.reshape(-1, 20)[:, 4:]
    gguf_codes = np.concatenate([qs & 0x0F, qs >> 4], axis=1).reshape(N, K)
    np.testing.assert_array_equal(w.codes(), gguf_codes)


@pytest.mark.parametrize(("qtype", "code_bits"), [(Q.Q4_1, 4), (Q.Q5_1, 5), (Q.Q4_K, 4)])
@pytest.mark.parametrize("offset", [0.0, 0.04])
def test_affine_types_within_bound(qtype, code_bits, offset):
    """Default form: q8 = f·q + k, scale s/f: error ≤ s/(2f) (= d/32 for Q4_1), blocks that
    do not fit fall back to 8-bit min/max with error ≤ half their step."""
    raw, ref = _raw(qtype, offset=offset)
    w = quant.to_nbits(raw, qtype, N, K)
    assert w.bits == 8 and w.zero_points is not None and w.offsets is None
    err = np.abs(w.dequantize() - ref).reshape(N, -1, w.block_size).max(axis=-1)
    assert np.all(err <= w.scales * 0.5 * (1 + 1e-5) + 1e-9)
    if qtype == Q.Q4_1:  # the bound in the source's own step d
        d = raw.reshape(-1, 20)[:, :2].copy().view(np.float16).astype(np.float32)
        assert np.all(err.reshape(-1) <= d.reshape(-1) / 32 * (1 + 1e-5) + 1e-9)
        assert w.fallback_blocks == 0


def test_offset_that_does_not_fit_falls_back():
    raw, ref = _raw(Q.Q5_1, offset=1.0)  # all weights positive: min ≫ step
    w = quant.to_nbits(raw, Q.Q5_1, N, K)
    assert w.fallback_blocks > 0
    err = np.abs(w.dequantize() - ref).reshape(N, -1, 32).max(axis=-1)
    assert np.all(err <= w.scales * 0.5 * (1 + 1e-5))


@pytest.mark.parametrize(("qtype", "exact"), [(Q.Q4_1, True), (Q.Q4_1, False), (Q.Q8_0, False)])
def test_concat_stacks_rows(qtype, exact):
    parts = [
        quant.to_nbits(_raw(qtype, seed=s)[0], qtype, N, K, exact_offsets=exact) for s in (1, 2)
    ]
    fused = quant.concat(parts)
    assert fused.n == 2 * N and fused.same_form(parts[0])
    np.testing.assert_array_equal(
        fused.dequantize(), np.concatenate([p.dequantize() for p in parts], axis=0)
    )
    other = quant.to_nbits(_raw(Q.Q4_0)[0], Q.Q4_0, N, K)
    assert not parts[0].same_form(other)
    with pytest.raises(ValueError):
        quant.concat([parts[0], other])


def test_int4_packing_order_and_bound():
    rng = np.random.default_rng(1)
    dense = rng.standard_normal((8, 64)).astype(np.float32)
    w = quant.quantize_int4(dense)
    codes = w.codes()
    assert (w.packed[0, 0, 0] & 0x0F) == codes[0, 0] and (w.packed[0, 0, 0] >> 4) == codes[0, 1]
    absmax = np.abs(dense).reshape(8, 2, 32).max(axis=-1, keepdims=True)
    # step absmax/8; the peak maps to code 0, the opposite extreme may clip at 15: ≤ one step
    assert np.all(np.abs(w.dequantize() - dense).reshape(8, 2, 32) <= absmax / 8 + 1e-6)


@pytest.mark.parametrize(
    "qtype", [Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q5_1, Q.Q5_K, Q.Q8_0, Q.Q6_K, Q.Q2_K]
)
@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("k", [K, K - 32])  # K - 32: an odd number of blocks per row
def test_size_estimate_is_exact(qtype, exact, k):
    """The size estimate counts what the conversion writes, zero points and offsets too."""
    if k % quants.GGML_QUANT_SIZES[qtype][0]:
        pytest.skip("not a whole number of this type's blocks")
    raw, _ = _raw(qtype)
    raw = raw.reshape(N, -1)[:, : raw.reshape(N, -1).shape[1] * k // K]
    got = quant.to_nbits(raw, qtype, N, k, exact_offsets=exact).nbytes
    assert quant.nbits_size(qtype, N, k, exact_offsets=exact) == got


@pytest.mark.parametrize(("qtype", "exact_offsets"),
                         [(Q.Q4_1, True), (Q.Q8_0, False), (Q.Q5_1, True), (Q.Q4_1, False)])
def test_split_blocks_keep_the_matrix(qtype, exact_offsets):
    """Blocks of 32 cut into runs of 16 that repeat the block's scale, zero point and offset:
    the same matrix bit for bit, in blocks of 16 (what ORT then rounds activations by)."""
    raw, _ = _raw(qtype, seed=2, offset=0.04)
    w = quant.to_nbits(raw, qtype, N, K, exact_offsets=exact_offsets)
    split = quant.split_blocks(w, 16)
    assert (split.block_size, split.bits, split.scales.shape) == (16, w.bits, (N, K // 16))
    assert split.packed.shape == (N, K // 16, 16 * w.bits // 8)
    assert (split.zero_points is None) is (w.zero_points is None)
    np.testing.assert_array_equal(split.dequantize(), w.dequantize())


def test_split_blocks_leave_small_blocks_and_refuse_odd_sizes():
    raw, _ = _raw(Q.Q6_K)
    w = quant.to_nbits(raw, Q.Q6_K, N, K)  # already in blocks of 16
    assert quant.split_blocks(w, 16) is w
    with pytest.raises(ValueError):
        quant.split_blocks(quant.to_nbits(_raw(Q.Q8_0)[0], Q.Q8_0, N, K), 8)
