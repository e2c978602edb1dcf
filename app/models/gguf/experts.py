"""A mixture-of-experts layer's 3-D expert tensors in the forms ORT's MoE operators read.

A GGUF stores all experts of one projection as one tensor ``[K, N, E]`` (ne0 first: each
expert's matrix row by row, one expert after another), so its bytes are those of an
``[E·N, K]`` matrix and carry over through ``quant.to_nbits`` like any other:

* ``com.microsoft.QMoE`` (quant_type "int") reads per-expert blocks along K exactly as
  MatMulNBits does: codes [E, N, K·bits/8], scales [E, N, K/block], default zero point
  2**(bits−1). A tensor whose ``to_nbits`` form has blocks of 32, no zero points and no
  offsets (MXFP4 → 8-bit, Q8_0, Q5_0, the IQ types of 32 → 8-bit, Q4_0 → 4-bit) keeps its
  values exactly. ORT's CPU QMoE runs 8-bit experts with int8 activations at every
  ``accuracy_level`` (its schema says so), 4-bit ones with float activations at level 0.
* ``com.microsoft.MoE`` reads float32 [E, N, K] (every other type, and ``--precision
  fp32``): exact, four bytes per weight.

On CPU both take only the interleaved SwiGLU layout (``swiglu_fusion=1``: gate row j, then
up row j), so ``interleave`` builds fc1 from the gate and up experts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.models.gguf import quant

#: the block size QMoE shares between fc1 and fc2 (its single ``block_size`` attribute)
QMOE_BLOCK = 32


@dataclass
class ExpertMatrix:
    """One projection of every expert: ``bits`` > 0 with ``codes`` and ``scales`` (QMoE
    blocks), or ``bits`` 0 with ``dense`` float32 [E, N, K]."""

    n_experts: int
    n: int
    k: int
    bits: int
    codes: np.ndarray | None = None  # uint8 [E, N, K·bits/8]
    scales: np.ndarray | None = None  # float32 [E, N, K/32]
    dense: np.ndarray | None = None

    def float32(self) -> np.ndarray:
        """The [E, N, K] values the operator computes with."""
        if self.dense is not None:
            return self.dense
        if self.bits == 8:
            q = self.codes.astype(np.float32)
        else:
            q = np.stack([self.codes & 0x0F, self.codes >> 4], axis=-1).astype(np.float32)
        q = q.reshape(self.n_experts, self.n, -1, QMOE_BLOCK) - 2 ** (self.bits - 1)
        return (q * self.scales[..., None]).reshape(self.n_experts, self.n, self.k)

    @property
    def nbytes(self) -> int:
        if self.dense is not None:
            return self.dense.nbytes
        return self.codes.nbytes + self.scales.nbytes


def qmoe_form(raw: np.ndarray, qtype, e: int, n: int, k: int) -> ExpertMatrix | None:
    """The experts as exact QMoE blocks, or None when their type has no such form."""
    if qtype not in quant.NBITS_TYPES:
        return None
    w = quant.to_nbits(raw, qtype, e * n, k)
    if (
        w.block_size != QMOE_BLOCK
        or w.zero_points is not None
        or w.offsets is not None
        or not w.exact
    ):
        return None
    return ExpertMatrix(
        e, n, k, w.bits,
        codes=w.packed.reshape(e, n, -1),
        scales=w.scales.reshape(e, n, k // QMOE_BLOCK),
    )  # fmt: skip


def dense_form(raw: np.ndarray, qtype, e: int, n: int, k: int) -> ExpertMatrix:
    values = quant.dequantize(raw, qtype, e * n, k).reshape(e, n, k)
    return ExpertMatrix(e, n, k, 0, dense=np.ascontiguousarray(values, dtype=np.float32))


def interleave(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """[E, I, …] gate and up → [E, 2I, …] with gate row j at 2j and up row j at 2j+1."""
    both = np.stack([gate, up], axis=2)
    return np.ascontiguousarray(both.reshape(gate.shape[0], 2 * gate.shape[1], *gate.shape[2:]))
