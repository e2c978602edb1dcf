"""Which form each GGUF weight takes in the ONNX graph, for a chosen precision.

``native`` keeps the file's own quantization (see ``quant``); ``fp32`` dequantizes
everything; ``fp16`` stores float16 weights; ``int4`` is a fresh, lossy symmetric 4-bit
quantization (block 32) of every matrix, the output matrix included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from gguf import GGML_QUANT_SIZES, ReaderTensor
from gguf import GGMLQuantizationType as Q

from app.errors import ConversionError
from app.models.gguf import experts, quant
from app.models.gguf.experts import ExpertMatrix
from app.models.gguf.quant import NBitsWeight
from app.models.gguf.reader import GGUFFile, matrix_shape

PRECISIONS = ("native", "int4", "fp16", "fp32")
#: Q4_1/Q4_K/Q2_K as exact 4-bit codes (Q5_1/Q5_K 8-bit) with zero points plus a block-offset
#: term (see ``quant``) unless asked otherwise: exact, and on the starter smaller and faster
#: than the 8-bit form with rounded offsets (bench_prefill)
DEFAULT_EXACT_OFFSETS = True

Linear = NBitsWeight | np.ndarray  # ndarray: float [N, K] (float32 or float16)


@dataclass
class ConversionStats:
    """What happened to the weights, for the manifest and the report."""

    forms: dict[str, int] = field(default_factory=dict)  # e.g. "Q4_1->nbits8": 210
    inexact_max_error_per_step: float = 0.0  # worst |error| / MatMulNBits step (bound 0.5)
    fallback_blocks: int = 0

    def count(self, key: str) -> None:
        self.forms[key] = self.forms.get(key, 0) + 1


class WeightSource:
    """Hands the graph builder each weight in the form the precision asks for."""

    def __init__(
        self, g: GGUFFile, precision: str, *, exact_offsets: bool = DEFAULT_EXACT_OFFSETS,
        check: Callable[[], None] | None = None,
    ) -> None:
        """``check()`` runs before each weight matrix is converted (a cancel raises there:
        one matrix takes tens of milliseconds, a layer a quarter of a second)."""
        if precision not in PRECISIONS:
            raise ConversionError(
                f"Unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}."
            )
        self.g = g
        self.precision = precision
        self.exact_offsets = exact_offsets  # Q4_1/Q4_K as exact 4-bit + offsets (see quant)
        self.stats = ConversionStats()
        self._embedding_nbits: NBitsWeight | None = None  # shared by lookup and tied head
        self._check = check or (lambda: None)
        for t in g.tensors.values():
            _check_type(g, t)

    def linear(self, name: str) -> Linear:
        self._check()
        t = self.g.tensor(name)
        n, k = matrix_shape(t)
        qtype = t.tensor_type
        if name == "token_embd.weight" and self._embedding_nbits is not None:
            self.stats.count(f"{qtype.name}->nbits{self._embedding_nbits.bits}")
            return self._embedding_nbits  # the very blocks the lookup reads (tied head)
        if self.precision == "native" and qtype in quant.NBITS_TYPES:
            w = quant.to_nbits(t.data, qtype, n, k, exact_offsets=self.exact_offsets)
            if not w.exact:
                self._measure(t, w)
            self.stats.count(f"{qtype.name}->nbits{w.bits}")
            self.stats.fallback_blocks += w.fallback_blocks
            return w
        dense = quant.dequantize(t.data, qtype, n, k)
        if self.precision == "int4" and k % 32 == 0:
            self.stats.count(f"{qtype.name}->int4")
            return quant.quantize_int4(dense)
        if self.precision == "fp16" or (self.precision == "native" and qtype in (Q.F16, Q.BF16)):
            self.stats.count(f"{qtype.name}->fp16")
            return dense.astype(np.float16)
        self.stats.count(f"{qtype.name}->fp32")
        return dense

    def experts(self, name: str) -> ExpertMatrix:
        """A 3-D expert tensor [K, N, E]: exact QMoE blocks where its type has them (any
        precision but fp32), else float32 (see ``experts``)."""
        self._check()
        t = self.g.tensor(name)
        if len(t.shape) != 3:
            raise ConversionError(
                f"{self.g.path.name}: tensor {name} has the shape {list(t.shape)}; a tensor "
                "of experts has three dimensions."
            )
        k, n, e = (int(d) for d in t.shape)
        qtype = t.tensor_type
        if self.precision != "fp32":
            form = experts.qmoe_form(t.data, qtype, e, n, k)
            if form is not None:
                self.stats.count(f"{qtype.name}->qmoe{form.bits}")
                return form
        self.stats.count(f"{qtype.name}->fp32")
        return experts.dense_form(t.data, qtype, e, n, k)

    def vector(self, name: str) -> np.ndarray:
        t = self.g.tensor(name)
        return quant.dequantize(t.data, t.tensor_type, 1, int(t.n_elements)).reshape(-1)

    def optional_vector(self, name: str) -> np.ndarray | None:
        return self.vector(name) if name in self.g.tensors else None

    def quantized_embedding(self) -> bool:
        """Whether ``embedding`` keeps the file's blocks (read by GatherBlockQuantized)."""
        return (
            self.precision == "native"
            and self.g.tensor("token_embd.weight").tensor_type in quant.GATHER_TYPES
        )

    def embedding(self) -> Linear:
        """The token table [vocab, hidden]: the GGUF's own blocks as an exact ``NBitsWeight``
        when GatherBlockQuantized can read them (see ``quant.GATHER_TYPES``; a tied output
        layer then gets the same object from ``linear``), else float32 (float16 at fp16)."""
        t = self.g.tensor("token_embd.weight")
        n, k = matrix_shape(t)
        if self.quantized_embedding():
            self._embedding_nbits = quant.to_nbits(t.data, t.tensor_type, n, k)
            return self._embedding_nbits
        dense = quant.dequantize(t.data, t.tensor_type, n, k)
        return dense.astype(np.float16) if self.precision == "fp16" else dense

    def estimated_embedding_bytes(self) -> int:
        """Output bytes of the lookup table beyond what a tied output layer already stores."""
        t = self.g.tensor("token_embd.weight")
        n, k = matrix_shape(t)
        if self.quantized_embedding():
            tied = "output.weight" not in self.g.tensors
            return 0 if tied else quant.nbits_size(t.tensor_type, n, k)
        return n * k * (2 if self.precision == "fp16" else 4)

    def estimated_bytes(self, name: str) -> int:
        """Output bytes of ``linear(name)`` without converting it."""
        t = self.g.tensor(name)
        n, k = matrix_shape(t)
        n *= int(np.prod([int(d) for d in t.shape[2:]], dtype=np.int64))  # experts: E·N rows
        if len(t.shape) == 3 and self.precision != "fp32" and t.tensor_type in quant.NBITS_TYPES:
            return quant.nbits_size(t.tensor_type, n, k)
        if self.precision == "native" and t.tensor_type in quant.NBITS_TYPES:
            return quant.nbits_size(t.tensor_type, n, k, exact_offsets=self.exact_offsets)
        if self.precision == "int4":
            return n * k // 2 + n * k // 8
        half = self.precision == "fp16" or (
            self.precision == "native" and t.tensor_type in (Q.F16, Q.BF16)
        )
        return n * k * (2 if half else 4)

    def _measure(self, t: ReaderTensor, w: NBitsWeight) -> None:
        """Worst |error| of an approximated tensor, in units of its MatMulNBits step (≤ 0.5)."""
        ref = quant.dequantize(t.data, t.tensor_type, w.n, w.k)
        err = np.abs(w.dequantize() - ref).reshape(w.n, -1, w.block_size).max(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(w.scales > 0, err / w.scales, 0.0)
        self.stats.inexact_max_error_per_step = max(
            self.stats.inexact_max_error_per_step, float(rel.max(initial=0.0))
        )


def _check_type(g: GGUFFile, t: ReaderTensor) -> None:
    qtype = t.tensor_type
    if qtype in quant.FLOAT_TYPES or qtype in quant.NBITS_TYPES:
        return
    # any other type is dequantized to float32 when the gguf package knows how
    try:
        block, type_size = GGML_QUANT_SIZES[qtype]
        quant.dequantize(np.zeros((1, type_size), np.uint8), qtype, 1, block)
    except (NotImplementedError, ValueError, KeyError) as exc:
        raise ConversionError(
            f"{g.path.name}: tensor {t.name} uses the quantization type {qtype.name}, which "
            "Hearth cannot convert.",
            hint="Use a file of another quantization: Q2_K to Q8_0, the IQ1 to IQ4 types, "
            "TQ1_0/TQ2_0, F16, BF16 or F32.",
        ) from exc
