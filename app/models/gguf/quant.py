"""GGUF weight blocks → ONNX Runtime ``MatMulNBits`` blocks, without quantizing a second time.

A GGUF matrix is stored row by row, one row per output feature, quantized in blocks along
the input features: exactly MatMulNBits' ``B`` layout ``[N, k_blocks, blob]``. So the blocks
carry over as they are:

* Q4_0 (``w = d·(q − 8)``) → 4-bit, default zero point 8: exact.
* Q8_0 (``w = d·q``, q int8) → 8-bit, default zero point 128: exact.
* Q5_0 / Q6_K (symmetric, 5/6-bit codes) → 8-bit, zero point 128: exact (Q6_K in 16-element
  sub-blocks, scale ``d·sc``).
* Q4_1 / Q4_K / Q5_1 / Q5_K (``w = s·q + o``: a scale and a per-block offset), with
  ``exact_offsets=False`` → 8-bit with uint8 zero points: ``q8 = f·q + k`` with
  ``f = 2**(8 − bits)``, scale ``s/f`` and ``zp = k − round(f·o/s)``. The codes stay exact;
  only the offset is rounded, so the error is at most ``s/(2f)`` (``d/32`` for Q4_1). A block
  whose offset does not fit the uint8 zero point falls back to a plain 8-bit min/max
  quantization of its values (counted).
* ``exact_offsets=True`` (the default, ``weights.DEFAULT_EXACT_OFFSETS``), Q4_1 / Q4_K / Q2_K
  on 4-bit blocks, Q5_1 / Q5_K on 8-bit ones → ``w = s·(q − z) + (o + z·s)``, exact: a zero
  point per block ``z`` (Q4_1 / Q5_1: ``round(−o/s)``; the K-quants: the block's mean code;
  Q4_1 / Q4_K: MatMulNBits' ``zero_points``; the narrower codes of Q2_K and Q5_1 / Q5_K are
  stored shifted, ``q + 8 − z`` / ``q + 128 − z``, against the default zero point) and the
  residual float block offset ``o + z·s``. MatMulNBits computes the first term; the graph
  adds ``block_sums(x) @ offsets`` (a small float Gemm). With int8 activations
  (accuracy_level 4) the error is the activations' rounding error times the first term,
  which ``z`` keeps near the weights (``_with_offsets``; bench/bench_fidelity.py;
  ``EXACT_OFFSETS_FORM`` 3).
  Form 2 used the default zero point 8 for every block (Q4_1's int8 part sat about ``s/2``
  plus the block's midrange off the weights: 3–6% behind llama.cpp on the starter) and
  rounded Q5_1 / Q5_K's offsets (up to 4x behind). On the SmolLM2 starter
  (bench/bench_prefill.py, ORT 1.32, AVX2, CPU seconds on one thread) the 4-bit form decodes
  with ~20% less work than the 8-bit form and reads prompts with ~25% less (ORT's 8-bit int8
  kernel is ~1.8x slower than fp32 GEMM at hundreds of rows, the 4-bit one ~1.1x), from a
  smaller file (114 vs 153 MiB). The offsets' ReduceSum + Gemm cost ~10% of a prompt.

Verify steps (several rows) and one-token steps: with int8 activations (accuracy_level 4) they
differ by up to ~1 logit on the starter, whatever the weights' form. The 4-bit MatMulNBits
kernel for one row rounds ~7e-7 differently from the several-row kernel (which gives the very
same bits for a row at any M >= 2), GroupQueryAttention a K-row step ~1e-7 differently from K
one-row steps, and each layer's int8 quantization of its input turns such tiny differences
into whole int8 steps now and then, which 30 layers compound. Two-row steps match verify rows
bit for bit, so a reply that speculates runs its one-token steps as two rows
(``Decoder.calibrate`` / ``choose_rows``). Float activations (accuracy_level 0) keep a verify
step within ~6e-5 of one-token steps (fp32: ~5e-5), but on AVX2 decode takes ~2x the work of
level 4 (the exact-offsets form ~20x), and 8-bit weights at level 0 have no MLAS kernel at all
(ORT dequantizes the whole matrix per call: a Q8_0 output layer makes decode ~15x slower).

The low-bit types people download for 7–14B models map the same way, all exactly:

* Q3_K (``w = d·sc·q``, q in −4…3, 16-element sub-blocks) → 4-bit block 16, default zero
  point 8 (codes ``q + 8``). ORT has no 3-bit MatMulNBits.
* Q2_K (``w = d·sc·q − dmin·m``, 2-bit codes, sub-blocks of 16) → 4-bit block 16 shifted
  codes and block offsets (``exact_offsets``, the default, above), or 8-bit codes with
  rounded offsets like Q4_K. Codes ``q`` against zero point 8 erred ~4x as much as
  llama.cpp's Q2_K with int8 activations. ORT's 2-bit MatMulNBits computes it exactly too,
  but has no fast CPU kernel (it dequantizes the whole matrix per call: ~70x the 4-bit
  kernel's time for one row).
* IQ4_NL / IQ4_XS (``w = d·kvalues[q]``, a 16-entry int8 table) and the grid types IQ2_XXS,
  IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (``w = d·db·(±g)``, g a small integer of a fixed grid) →
  8-bit, default zero point 128, the signed integer value as the code: exact, 32- or
  16-element blocks as the type scales them.
* IQ1_S / IQ1_M (``w = dl·(g ± 1/8)``, g in −1…1) → 8-bit codes ``8g ± 1`` with scale
  ``dl/8`` (a power-of-two step: exact).
* TQ1_0 / TQ2_0 (ternary, one scale per 256) → 4-bit block 256, codes ``q + 8``.
* MXFP4 (gpt-oss experts: 32 e2m1 values and one e8m0 exponent ``e`` per block) → 8-bit
  block 32, default zero point 128: an e2m1 value doubled is an integer in −12…12 (ggml's
  ``kvalues_mxfp4``), the scale ``2**(e − 128)`` a power of two, so the codes are exact.
  4 bits cannot hold the 15 values −12…12 on a uniform grid.

The scales are read from the blocks by hand (``_affine_params``); the codes are the GGUF's
values divided by them, and ``to_nbits`` checks that they give back those values bit for
bit (a block that does not is counted as inexact and measured, never silently wrong).

Float types become float matrices. ``quantize_int4`` is the only lossy *fresh* quantizer
(``--precision int4``: symmetric 4-bit, block 32).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

FLOAT_TYPES = (Q.F32, Q.F16, Q.BF16)
# symmetric types with their own scales: w = s · signed code (see the module docstring)
SIGNED_TYPES = (
    Q.Q3_K, Q.IQ4_NL, Q.IQ4_XS, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S,
    Q.IQ1_S, Q.IQ1_M, Q.TQ1_0, Q.TQ2_0, Q.MXFP4,
)
# types carried over as MatMulNBits blocks; everything else is dequantized to float
NBITS_TYPES = (
    Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, *SIGNED_TYPES,
)
# types whose blocks map exactly, without zero points or offsets, to MatMulNBits blocks of a
# power-of-two size ≥ 16: ``com.microsoft.GatherBlockQuantized`` reads those very blocks for
# the token lookup (uint8 data, gather_axis 0, quantize_axis last, default zero point
# 2**(bits−1), as in MatMulNBits). Other types keep a float lookup table.
GATHER_TYPES = (Q.Q4_0, Q.Q5_0, Q.Q8_0, Q.Q6_K, *SIGNED_TYPES)
QK_K = 256
# e2m1 values doubled, by 4-bit code (ggml's ``kvalues_mxfp4``): sign, 2-bit exponent, mantissa
MXFP4_DOUBLED = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int16)
_MXFP4_CODES = (MXFP4_DOUBLED + 128).astype(np.uint8)  # as 8-bit codes, zero point 128
_BYTES = np.arange(256)
# byte → the code of its low / high nibble, as translation tables
_MXFP4_LOW = _MXFP4_CODES[_BYTES & 0x0F].tobytes()
_MXFP4_HIGH = _MXFP4_CODES[_BYTES >> 4].tobytes()
# rows of an MXFP4 tensor checked against the gguf package at each end (gpt-oss-20b's expert
# tensors have 92,160 rows of 2,880; its dequantizer takes ~22 s for all of one)
CHECK_ROWS = 4096
# (bits of the MatMulNBits form, its block size) of each symmetric type
_SIGNED_FORM = {
    Q.Q3_K: (4, 16), Q.IQ4_NL: (8, 32), Q.IQ4_XS: (8, 32), Q.IQ2_XXS: (8, 32),
    Q.IQ2_XS: (8, 16), Q.IQ2_S: (8, 16), Q.IQ3_XXS: (8, 32), Q.IQ3_S: (8, 32),
    Q.IQ1_S: (8, 32), Q.IQ1_M: (8, 16), Q.TQ1_0: (4, 256), Q.TQ2_0: (4, 256),
    Q.MXFP4: (8, 32),
}


@dataclass
class NBitsWeight:
    """A weight in MatMulNBits form: ``w[n, k] = scales[n, b] · (q[n, k] − zp[n, b])``, plus
    ``offsets[n, b]`` when present (added by a separate float matmul of the input's block
    sums; see ``GraphBuilder``)."""

    bits: int  # 4 or 8
    block_size: int
    n: int
    k: int
    packed: np.ndarray  # uint8 [N, k_blocks, block_size * bits / 8]
    scales: np.ndarray  # float32 [N, k_blocks]
    zero_points: np.ndarray | None  # uint8: 8-bit [N, k_blocks]; 4-bit packed [N, ceil(kb/2)]
    exact: bool = True
    fallback_blocks: int = 0  # blocks re-quantized because their offset did not fit
    offsets: np.ndarray | None = None  # float32 [N, k_blocks]: added to every weight of a block

    @property
    def nbytes(self) -> int:
        zp = 0 if self.zero_points is None else self.zero_points.nbytes
        off = 0 if self.offsets is None else self.offsets.nbytes
        return self.packed.nbytes + self.scales.nbytes + zp + off

    def codes(self) -> np.ndarray:
        """Unpacked integer codes, [N, K] uint8."""
        if self.bits == 8:
            return self.packed.reshape(self.n, self.k)
        lo = self.packed & 0x0F
        hi = self.packed >> 4
        return np.stack([lo, hi], axis=-1).reshape(self.n, self.k)

    def zero_point_array(self) -> np.ndarray:
        """Zero points as float32 [N, k_blocks] (defaults applied)."""
        kb = self.k // self.block_size
        if self.zero_points is None:
            return np.full((self.n, kb), 2 ** (self.bits - 1), np.float32)
        if self.bits == 8:
            return self.zero_points.astype(np.float32)
        both = np.stack([self.zero_points & 0x0F, self.zero_points >> 4], axis=-1)
        return both.reshape(self.n, -1)[:, :kb].astype(np.float32)

    def dequantize(self) -> np.ndarray:
        """The float32 [N, K] matrix that MatMulNBits computes with."""
        q = self.codes().astype(np.float32).reshape(self.n, -1, self.block_size)
        zp = self.zero_point_array()[..., None]
        w = (q - zp) * self.scales[..., None]
        if self.offsets is not None:
            w = w + self.offsets[..., None]
        return w.reshape(self.n, self.k)

    def same_form(self, other: NBitsWeight) -> bool:
        """Whether ``concat`` can stack the two along N (one MatMulNBits for both)."""
        return (
            (self.bits, self.block_size, self.k) == (other.bits, other.block_size, other.k)
            and (self.zero_points is None) == (other.zero_points is None)
            and (self.offsets is None) == (other.offsets is None)
        )


def concat(parts: list[NBitsWeight]) -> NBitsWeight:
    """Stack weights of the same form along N (rows): the fused matrix of q/k/v or gate/up."""
    first = parts[0]
    if not all(first.same_form(p) for p in parts[1:]):
        raise ValueError("weights of different forms cannot be stacked")

    def stack(attr: str) -> np.ndarray | None:
        arrays = [getattr(p, attr) for p in parts]
        return None if arrays[0] is None else np.concatenate(arrays, axis=0)

    return NBitsWeight(
        first.bits,
        first.block_size,
        sum(p.n for p in parts),
        first.k,
        stack("packed"),
        stack("scales"),
        stack("zero_points"),
        exact=all(p.exact for p in parts),
        fallback_blocks=sum(p.fallback_blocks for p in parts),
        offsets=stack("offsets"),
    )


def split_blocks(w: NBitsWeight, block: int) -> NBitsWeight:
    """The same weight in MatMulNBits blocks of ``block`` elements (a power of two, at least
    16, dividing ``w.block_size``): each block's codes cut into runs that repeat its scale and
    zero point (and offset), so it dequantizes to the very same matrix. What changes is the
    kernel: with int8 activations (accuracy_level 4) ORT quantizes each row of activations
    per MatMulNBits block, so 16-element blocks round the activations more finely than
    llama.cpp's 32-element ``q8_0`` / ``q8_1`` blocks (``GraphBuilder`` ``activation_block``;
    measured in docs/ARCHITECTURE.md)."""
    if block >= w.block_size:
        return w
    if block < 16 or block & (block - 1) or w.block_size % block:
        raise ValueError(f"cannot cut blocks of {w.block_size} into blocks of {block}")
    r = w.block_size // block
    kb = w.k // w.block_size
    packed = np.ascontiguousarray(w.packed).reshape(w.n, kb * r, -1)
    zp = None
    if w.zero_points is not None:
        z = np.repeat(w.zero_point_array().astype(np.uint8), r, axis=1)
        if w.bits == 4:
            if z.shape[1] % 2:
                z = np.concatenate([z, np.zeros((w.n, 1), np.uint8)], axis=1)
            z = _pack4(z)
        zp = z
    offsets = None if w.offsets is None else np.repeat(w.offsets, r, axis=1)
    return NBitsWeight(
        w.bits, block, w.n, w.k, packed, np.repeat(w.scales, r, axis=1), zp, exact=w.exact,
        fallback_blocks=w.fallback_blocks, offsets=offsets,
    )


def _row_blocks(raw: np.ndarray, n: int, k: int, qtype: Q) -> np.ndarray:
    """Raw GGUF bytes as [N * k/block, type_size] uint8 blocks."""
    block, type_size = quants.GGML_QUANT_SIZES[qtype]
    return np.ascontiguousarray(raw).view(np.uint8).reshape(n * (k // block), type_size)


def dequantize(raw: np.ndarray, qtype: Q, n: int, k: int) -> np.ndarray:
    """Any GGUF tensor data (as the reader exposes it) → float32 [N, K]."""
    if qtype == Q.F32:
        return np.ascontiguousarray(raw, dtype=np.float32).reshape(n, k)
    if qtype == Q.F16:
        return np.asarray(raw).view(np.float16).astype(np.float32).reshape(n, k)
    if qtype == Q.BF16:
        bits = np.ascontiguousarray(raw).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(n, k)
    flat = np.ascontiguousarray(raw).view(np.uint8).reshape(n, -1)
    return quants.dequantize(flat, qtype).astype(np.float32, copy=False).reshape(n, k)


def _fp16(col: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(col).view(np.float16).astype(np.float32).reshape(-1)


def _affine_params(blocks: np.ndarray, qtype: Q) -> tuple[int, int, np.ndarray, np.ndarray]:
    """(code bits, sub-block size, scale s, offset o) with ``w = s·code + o`` per sub-block."""
    if qtype == Q.Q4_0:
        d = _fp16(blocks[:, :2])
        return 4, 32, d, -8 * d
    if qtype == Q.Q5_0:
        d = _fp16(blocks[:, :2])
        return 5, 32, d, -16 * d
    if qtype == Q.Q4_1:
        return 4, 32, _fp16(blocks[:, :2]), _fp16(blocks[:, 2:4])
    if qtype == Q.Q5_1:
        return 5, 32, _fp16(blocks[:, :2]), _fp16(blocks[:, 2:4])
    if qtype in (Q.Q4_K, Q.Q5_K):
        d = _fp16(blocks[:, :2])[:, None]
        dmin = _fp16(blocks[:, 2:4])[:, None]
        sc, mn = quants.Q4_K.get_scale_min(blocks[:, 4:16].copy())
        s = (d * sc.astype(np.float32)).reshape(-1)
        o = -(dmin * mn.astype(np.float32)).reshape(-1)
        return (4 if qtype == Q.Q4_K else 5), 32, s, o
    if qtype == Q.Q6_K:
        sc = blocks[:, 192:208].copy().view(np.int8).astype(np.float32)
        d = _fp16(blocks[:, 208:210])[:, None]
        s = (d * sc).reshape(-1)
        return 6, 16, s, -32 * s
    if qtype == Q.Q2_K:  # scales[16] (low nibble scale, high nibble min), qs[64], d, dmin
        d = _fp16(blocks[:, 80:82])[:, None]
        dmin = _fp16(blocks[:, 82:84])[:, None]
        sc = blocks[:, :16]
        s = (d * (sc & 0x0F).astype(np.float32)).reshape(-1)
        o = -(dmin * (sc >> 4).astype(np.float32)).reshape(-1)
        return 2, 16, s, o
    if qtype in _SIGNED_FORM:
        bits, sub = _SIGNED_FORM[qtype]
        s = _signed_scales(blocks, qtype).reshape(-1)
        return bits, sub, s, -(2 ** (bits - 1)) * s
    raise ValueError(f"no affine form for {qtype.name}")


def _nibbles(b: np.ndarray) -> np.ndarray:
    """Bytes [B, m] → their 4-bit halves [B, 2m], low nibble first."""
    return np.stack([b & 0x0F, b >> 4], axis=-1).reshape(len(b), -1)


def _signed_scales(blocks: np.ndarray, qtype: Q) -> np.ndarray:
    """Each sub-block's scale s of a symmetric type (``w = s · signed integer``), [B, subs],
    computed in float32 in the very order ggml's dequantizers use."""
    f32 = np.float32
    if qtype == Q.Q3_K:  # hmask[32] qs[64] scales[12] d: 16 six-bit scales, minus 32
        d = _fp16(blocks[:, 108:110])[:, None]
        raw = blocks[:, 96:108]
        low = _nibbles(raw[:, :8])
        low = np.concatenate([low[:, 0::2], low[:, 1::2]], axis=1)  # bytes 0–7 low, then high
        hi = np.stack([(raw[:, 8:12] >> sh) & 3 for sh in (0, 2, 4, 6)], axis=1).reshape(-1, 16)
        sc = (low | (hi << 4)).astype(np.int8) - np.int8(32)
        return d * sc.astype(f32)
    if qtype == Q.IQ4_NL:
        return _fp16(blocks[:, :2])[:, None]
    if qtype == Q.IQ4_XS:  # d, scales_h (u16), scales_l[4]: 8 six-bit scales, minus 32
        d = _fp16(blocks[:, :2])[:, None]
        h = blocks[:, 2:4].copy().view(np.uint16)
        high = np.stack([(h[:, 0] >> (2 * i)) & 3 for i in range(8)], axis=1).astype(np.uint8)
        sc = (_nibbles(blocks[:, 4:8]) | (high << 4)).astype(np.int8) - np.int8(32)
        return d * sc.astype(f32)
    if qtype in (Q.IQ2_XXS, Q.IQ3_XXS):  # a 4-bit scale in the top of each group's u32
        d = _fp16(blocks[:, :2])[:, None]
        if qtype == Q.IQ2_XXS:
            words = blocks[:, 2:].copy().view(np.uint32)[:, 1::2]
            return d * (f32(0.5) + (words >> 28).astype(f32)) * f32(0.25)
        words = blocks[:, 66:98].copy().view(np.uint32)
        return d * (f32(0.5) + (words >> 28).astype(f32)) * f32(0.5)
    if qtype in (Q.IQ2_XS, Q.IQ2_S):  # 16 four-bit scales in the last 8 bytes
        d = _fp16(blocks[:, :2])[:, None]
        ls = _nibbles(blocks[:, -8:])
        return d * (f32(0.5) + ls) * f32(0.25)
    if qtype == Q.IQ3_S:  # 8 four-bit scales in the last 4 bytes
        d = _fp16(blocks[:, :2])[:, None]
        return d * (1 + 2 * _nibbles(blocks[:, -4:]))
    if qtype == Q.IQ1_S:  # d, qs[32], qh u16[8]: scale 2·((qh >> 12) & 7) + 1; step 1/8
        d = _fp16(blocks[:, :2])[:, None]
        qh = blocks[:, 34:50].copy().view(np.uint16)
        return d * (2 * ((qh >> 12) & 7) + 1) / f32(8)
    if qtype == Q.IQ1_M:  # qs[32] qh[16] scales u16[4]: d in the top nibbles, 3-bit scales
        sc = blocks[:, 48:56].copy().view(np.uint16)
        d16 = sum(((sc[:, i] & 0xF000) >> (12 - 4 * i)) for i in range(4)).astype(np.uint16)
        d = d16.view(np.float16).astype(f32)[:, None]
        ls = np.stack([(sc >> sh) & 7 for sh in (0, 3, 6, 9)], axis=-1).reshape(-1, 16)
        return d * (2 * ls + 1) / f32(8)
    if qtype == Q.MXFP4:  # e8m0 exponent byte, then 16 bytes of e2m1 nibbles
        return _e8m0_half(blocks[:, 0])[:, None]
    if qtype == Q.TQ1_0:
        return _fp16(blocks[:, 52:54])[:, None]
    if qtype == Q.TQ2_0:
        return _fp16(blocks[:, 64:66])[:, None]
    raise ValueError(f"no symmetric form for {qtype.name}")


def _e8m0_half(e: np.ndarray) -> np.ndarray:
    """An e8m0 exponent byte as the float32 ``2**(e − 128)``: half the MX block scale, since
    the e2m1 values are read doubled (integers −12…12), as ggml's ``kvalues_mxfp4`` are."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def _pack4(codes: np.ndarray) -> np.ndarray:
    """[..., 2m] 4-bit codes → [..., m] bytes, element 2i in the low nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def to_nbits(
    raw: np.ndarray, qtype: Q, n: int, k: int, *, exact_offsets: bool = False
) -> NBitsWeight:
    """Carry a quantized GGUF matrix over to MatMulNBits blocks (see the module docstring)."""
    if qtype not in NBITS_TYPES:
        raise ValueError(f"{qtype.name} has no MatMulNBits form")
    blocks = _row_blocks(raw, n, k, qtype)
    if qtype == Q.Q8_0:
        d = _fp16(blocks[:, :2])
        q8 = (blocks[:, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return NBitsWeight(8, 32, n, k, q8.reshape(n, k // 32, 32), d.reshape(n, -1), None)
    if qtype == Q.MXFP4:  # the codes straight from the nibbles (no w/s: the scale may be huge)
        # element j in the low nibble of byte j, j+16 in the high; bytes.translate maps a
        # byte through a 256-entry table 2-3x faster than numpy's indexing does
        qs = np.ascontiguousarray(blocks[:, 1:]).tobytes()
        q8 = np.empty((len(blocks), 32), np.uint8)
        q8[:, :16] = np.frombuffer(qs.translate(_MXFP4_LOW), np.uint8).reshape(-1, 16)
        q8[:, 16:] = np.frombuffer(qs.translate(_MXFP4_HIGH), np.uint8).reshape(-1, 16)
        del qs
        d = _e8m0_half(blocks[:, 0])
        w = NBitsWeight(8, 32, n, k, q8.reshape(n, k // 32, 32), d.reshape(n, -1), None)
        return _checked_by_rows(w, raw, qtype)
    if qtype == Q.Q4_0:
        d = _fp16(blocks[:, :2])
        qs = blocks[:, 2:]
        codes = np.concatenate([qs & 0x0F, qs >> 4], axis=1)  # GGUF: element j and j+16
        return NBitsWeight(
            4, 32, n, k, _pack4(codes).reshape(n, k // 32, 16), d.reshape(n, -1), None
        )
    bits, sub, s, o = _affine_params(blocks, qtype)
    w = dequantize(raw, qtype, n, k).reshape(-1, sub)
    with np.errstate(divide="ignore", invalid="ignore"):
        codes = np.where(s[:, None] != 0, np.rint((w - o[:, None]) / s[:, None]), 0)
    codes = np.clip(np.nan_to_num(codes), 0, 2**bits - 1).astype(np.int32)
    kb = k // sub
    symmetric = qtype in SIGNED_TYPES or bool(np.all(o == -(2 ** (bits - 1)) * s))
    if symmetric and bits == 4:  # MatMulNBits' default 4-bit zero point 8
        packed = _pack4(codes.astype(np.uint8).reshape(n, kb, sub))
        return _checked(NBitsWeight(4, sub, n, k, packed, s.reshape(n, kb), None), w)
    if symmetric:  # zero point 2**(bits-1): shift the codes to the 8-bit default 128
        q8 = (codes + 128 - 2 ** (bits - 1)).astype(np.uint8)
        return _checked(
            NBitsWeight(8, sub, n, k, q8.reshape(n, kb, sub), s.reshape(n, kb), None), w
        )
    if exact_offsets:
        return _checked(_with_offsets(codes, s, o, n, k, sub, bits, qtype), w)
    f = 2 ** (8 - bits)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(s != 0, np.rint(f * o / s), 0).astype(np.int64)
    ok = (r >= -255) & (r <= f - 1) & (s != 0)
    kk = np.clip(r, 0, f - 1)
    q8 = f * codes + kk[:, None]
    zp = kk - r
    scale = s / f
    bad = ~ok
    if bad.any():  # plain 8-bit min/max for blocks whose offset does not fit
        wb = w[bad]
        lo = np.minimum(wb.min(axis=1), 0)
        hi = np.maximum(wb.max(axis=1), 0)
        step = (hi - lo) / 255
        step = np.where(step == 0, 1.0, step).astype(np.float32)
        zb = np.clip(np.rint(-lo / step), 0, 255)
        q8[bad] = np.clip(np.rint(wb / step[:, None] + zb[:, None]), 0, 255)
        zp[bad] = zb
        scale = scale.copy()
        scale[bad] = step
    return NBitsWeight(
        8,
        sub,
        n,
        k,
        q8.astype(np.uint8).reshape(n, kb, sub),
        scale.astype(np.float32).reshape(n, kb),
        zp.astype(np.uint8).reshape(n, kb),
        exact=False,
        fallback_blocks=int(bad.sum()),
    )


def _checked(w: NBitsWeight, want: np.ndarray) -> NBitsWeight:
    """``w`` marked inexact unless it gives back ``want`` (the GGUF's values) bit for bit."""
    w.exact = bool(np.array_equal(w.dequantize().reshape(want.shape), want))
    return w


def _checked_by_rows(w: NBitsWeight, raw: np.ndarray, qtype: Q) -> NBitsWeight:
    """``_checked`` on the first and last ``CHECK_ROWS`` rows, against the gguf package's
    dequantization of the same rows. MXFP4's codes come from a fixed 16-entry table and its
    scale from the exponent byte alone, so every block maps alike: the tests prove the table
    and every exponent bit for bit, and this catches a mapping changed since. Checking all
    of a tensor of experts would take the gguf dequantizer minutes per model (and several
    float32 copies of the tensor)."""
    rows = np.ascontiguousarray(raw).view(np.uint8).reshape(w.n, -1)
    kb = w.k // w.block_size
    w.exact = True
    for r0 in sorted({0, max(0, w.n - CHECK_ROWS)}):
        r1 = min(w.n, r0 + CHECK_ROWS)
        part = NBitsWeight(w.bits, w.block_size, r1 - r0, w.k, w.packed[r0:r1],
                           w.scales[r0:r1].reshape(-1, kb), None)
        if not np.array_equal(part.dequantize(), dequantize(rows[r0:r1], qtype, r1 - r0, w.k)):
            w.exact = False
            break
    return w


#: types whose zero point is the block's mean code; the others' is ``round(−o/s)`` (see
#: ``_with_offsets``)
MEAN_ZERO_TYPES = (Q.Q2_K, Q.Q4_K, Q.Q5_K)


def _with_offsets(
    codes: np.ndarray, s: np.ndarray, o: np.ndarray, n: int, k: int, sub: int, bits: int,
    qtype: Q,
) -> NBitsWeight:
    """Codes with ``w = s·code + o`` → ``s·(code − z) + (o + z·s)``, ``z`` a zero point per
    block and the residual ``o + z·s`` the block offset the graph adds in float: exact (see
    the module docstring).

    ``z`` only moves weight between the two terms, but with int8 activations
    (accuracy_level 4) it decides the error, which is the activations' rounding error times
    the int8 part ``s·(code − z)``. Measured (bench/bench_fidelity.py, docs/ARCHITECTURE.md),
    the closer choice differs by family:

    * Q4_1 / Q5_1: ``z = round(−o/s)``, the code of the value 0, so the int8 part is the
      weights themselves within half a step, as llama.cpp's Q4_1 · Q8_1 dot has it (on the
      starter's real weights the block's mean code erred 5% more, on a Q5_1 requantization
      of it 17% more);
    * the K-quants (``MEAN_ZERO_TYPES``): the block's mean code, rounded, so the int8 part is
      the weights less their block mean (``round(−o/s)`` erred 8% more on a Q4_K_S
      requantization of the starter, 3x on random K-quant blocks).

    Codes narrower than their blocks (Q2_K's 2-bit codes on 4 bits, Q5_1 / Q5_K's 5-bit codes
    on 8) are stored shifted, ``code + m − z`` against MatMulNBits' default zero point ``m``
    (8, 128), so no zero-point tensor is needed (``z`` kept where every code stays in range:
    −4…8 for 2-bit codes). 4-bit codes (Q4_1 / Q4_K) fill their blocks, so ``z`` (0…15) is a
    zero-point tensor, two per byte, each row padded to whole bytes; ORT's int8 kernel then
    takes 2–9% more CPU time per decoded token on the starter (docs/ARCHITECTURE.md)."""
    kb = k // sub
    s = s.astype(np.float32)
    store = 4 if bits <= 4 else 8
    mid = 2 ** (store - 1)
    top = 2**bits - 1
    lo, hi = (0, top) if bits == store else (top + 1 - mid, mid)
    if qtype in MEAN_ZERO_TYPES:
        z = np.rint(codes.mean(axis=1))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(s != 0, np.rint(-o / s), 0)
    z = np.clip(np.nan_to_num(z), lo, hi).astype(np.int64)
    offsets = (o + z.astype(np.float32) * s).astype(np.float32).reshape(n, kb)
    if bits < store:  # shifted codes, the default zero point
        stored = (codes + (mid - z)[:, None]).astype(np.uint8).reshape(n, kb, sub)
        packed = stored if store == 8 else _pack4(stored)
        return NBitsWeight(store, sub, n, k, packed, s.reshape(n, kb), None, offsets=offsets)
    zp = z.astype(np.uint8).reshape(n, kb)
    if kb % 2:
        zp = np.concatenate([zp, np.zeros((n, 1), np.uint8)], axis=1)
    packed = _pack4(codes.astype(np.uint8).reshape(n, kb, sub))
    return NBitsWeight(4, sub, n, k, packed, s.reshape(n, kb), _pack4(zp), offsets=offsets)


def quantize_int4(w: np.ndarray, block_size: int = 32) -> NBitsWeight:
    """A fresh, lossy symmetric 4-bit quantization of a float [N, K] matrix (zero point 8)."""
    n, k = w.shape
    if k % block_size:
        raise ValueError(f"K={k} is not a multiple of {block_size}")
    b = w.reshape(n, k // block_size, block_size).astype(np.float32)
    idx = np.abs(b).argmax(axis=-1)[..., None]
    peak = np.take_along_axis(b, idx, axis=-1)[..., 0]
    scale = (peak / -8).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale[..., None] != 0, np.rint(b / scale[..., None]) + 8, 8)
    codes = np.clip(q, 0, 15).astype(np.uint8)
    return NBitsWeight(4, block_size, n, k, _pack4(codes), scale, None, exact=False)


def nbits_size(qtype: Q, n: int, k: int, *, exact_offsets: bool = False) -> int:
    """Bytes that ``to_nbits`` produces for a tensor, without converting it."""
    if qtype == Q.Q4_0:
        return n * k // 2 + n * k // 32 * 4
    if qtype in _SIGNED_FORM:
        bits, sub = _SIGNED_FORM[qtype]
        return n * k * bits // 8 + n * k // sub * 4
    sub = 16 if qtype in (Q.Q6_K, Q.Q2_K) else 32
    kb = k // sub
    if exact_offsets and qtype in (Q.Q4_1, Q.Q4_K):  # codes, scales, offsets, zero points
        return n * k // 2 + n * kb * 8 + n * ((kb + 1) // 2)
    if exact_offsets and qtype == Q.Q2_K:  # shifted 4-bit codes, scales, offsets
        return n * k // 2 + n * kb * 8
    if exact_offsets and qtype in (Q.Q5_1, Q.Q5_K):  # shifted 8-bit codes, scales, offsets
        return n * k + n * kb * 8
    zp = 0 if qtype in (Q.Q8_0, Q.Q5_0, Q.Q6_K) else n * k // sub
    return n * k + n * k // sub * 4 + zp
