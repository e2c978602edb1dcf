"""Grouped attention over the shared KV buffer's capacity: the conversion option
``attention="grouped"`` (docs/ARCHITECTURE.md, "Grouped attention"; issue 29 §4).

Per layer, in place of one ``GroupQueryAttention``: com.microsoft ``RotaryEmbedding`` on q
and k at the step's positions, ``TensorScatter`` (opset 24) of the step's k and v rows at the
cache cursor into the [1, kv, capacity, D] buffer bound as its input *and* output (ORT's CPU
kernel writes in place when they are the same buffer), then per KV head one ``FusedMatMul``
of its whole query group against K over the capacity (transB, alpha = scale), an additive
causal mask on the stripe of columns from the step's first position on ([group·S, capacity −
start], built once per step; a Slice of the scores, the Add, ``TensorScatter`` back in place:
the past is visible to every row, so a prefill chunk no longer pays a pass of the mask over
every score), ``Softmax``, ``FusedMatMul`` against V. ``default_attention`` makes it the
conversion's default wherever ``unsupported_reason`` names nothing.

The graph keeps the GQA graph's inputs and outputs (``input_ids``, ``attention_mask`` of the
total length, ``past_key_values.*`` / ``present.*`` of the buffer's capacity), so the engine
feeds it as it feeds the shared-buffer path; what differs is that the MatMuls read every
position of the capacity, so spare positions must hold finite values (zeros: 0 × NaN is NaN).

The buffers hold float16 by default (``KV_CACHES``), as llama.cpp's default F16 cache does:
the step's k and v rows are rounded once as they are written, and each layer's read is one
``Cast`` of its buffer back to float32 before the MatMuls (ORT 1.32 has no float16 GEMM on
x86). Past ~1k positions a decode step is bound by the bytes of KV it reads, so half the
bytes is ~8% more tokens per second at 1k and ~20% at 4k on the starter, and half the
memory at every length (docs/ARCHITECTURE.md, "Grouped attention": float16 buffers). Every
step size reads the same rounded values through the same Cast, so a position's logits stay
the same bits in every step size.

Exact across step sizes: a row's output is one Softmax and one GEMM reduction over the
capacity in position order, later positions at -inf (probability 0), and M = group·S ≥ 2.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

MS = "com.microsoft"
#: ONNX opset a grouped graph needs (TensorScatter).
GROUPED_OPSET = 24
#: The values of the conversion option ``attention``: the graph forms, and the names the
#: CLI switch gives them (``hearth import-gguf --attention grouped|classic``).
ATTENTION_FORMS = ("gqa", "grouped")
ATTENTION_NAMES = {"grouped": "grouped", "classic": "gqa", "gqa": "gqa"}
#: The conversion option ``kv_cache``: the element type of a grouped graph's KV buffers
#: (``past_key_values.*`` / ``present.*``), float16 the default; the GQA form keeps float32.
KV_CACHES = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT}
DEFAULT_KV_CACHE = "float16"


def kv_cache_of(attention: str, kv_cache: str = DEFAULT_KV_CACHE) -> str:
    """The KV buffers' type an ``attention`` graph gets when ``kv_cache`` is asked for."""
    return kv_cache if attention == "grouped" else "float32"


def unsupported_reason(params) -> str | None:
    """Why ``params``' model cannot be converted with grouped attention (None: it can).

    The one place that says which architectures keep GroupQueryAttention: what its kernel
    does that this form does not build (yet)."""
    if params.local_layers:
        return "sliding-window layers"  # GQA's local_window_size (Gemma 3, Mistral)
    if params.attn_sinks:
        return "attention sinks"  # GQA's head_sink (gpt-oss)
    if params.rope_dim and params.rope_dim != params.head_dim:
        return "partial rotary dimensions"  # GQA rotates the cos cache's width only
    return None


def default_attention(params) -> str:
    """The form ``convert_gguf`` writes when not told: grouped wherever it is built for the
    architecture (exact across step sizes, faster decode at long context), else GQA."""
    return "gqa" if unsupported_reason(params) else "grouped"


class GroupedAttentionBuilder:
    """Mixin for ``GraphBuilder``: the grouped attention of one layer and its per-step nodes."""

    def _grouped_step_inputs(self) -> None:
        """Once per step: positions [1, S], write index [1] and the stripe's mask
        [group·S, capacity − start] (0 where a row sees the column, −inf after its position).

        The step's first position is ``total - S`` (``total`` = attention_mask's length); the
        capacity is the bound buffer's length (layer 0's key)."""
        p = self.p
        group = p.n_heads // p.n_kv_heads
        c = {
            name: self._const(f"grouped.{name}", np.array(value, np.int64))
            for name, value in (
                ("zero", 0), ("one", 1), ("axis0", [0]), ("axis1", [1]), ("two", 2),
                ("tiles", [group, 1]), ("kv_heads", [p.n_kv_heads]),
            )
        }
        if self._half_buffers:  # the range the buffers hold (_stored)
            half_max = float(np.finfo(np.float16).max)
            self._const("grouped.half_min", np.array(-half_max, np.float32))
            self._const("grouped.half_max", np.array(half_max, np.float32))
        f0 = self._const("grouped.f0", np.array(0.0, np.float32))
        finf = self._const("grouped.minus_inf", np.array(-np.inf, np.float32))
        self._node("Gather", ["ids/shape", c["one"]], ["grouped/rows"], "grouped/rows", axis=0)
        self._node("Sub", ["mask/total64", "grouped/rows"], ["grouped/start"], "grouped/start")
        self._node("Range", ["grouped/start", "mask/total64", c["one"]], ["grouped/pos1"],
                   "grouped/pos1")
        self._node("Unsqueeze", ["grouped/pos1", c["axis0"]], ["grouped/positions"],
                   "grouped/positions")
        self._node("Unsqueeze", ["grouped/start", c["axis0"]], ["grouped/write_at"],
                   "grouped/write_at")
        self._node("Shape", ["past_key_values.0.key"], ["grouped/past_shape"],
                   "grouped/past_shape")
        self._node("Gather", ["grouped/past_shape", c["two"]], ["grouped/capacity"],
                   "grouped/capacity", axis=0)
        # only the columns from the step's first position on are ever masked (the past is
        # visible to every row): the mask covers [start, capacity), the stripe's columns
        self._node("Sub", ["grouped/capacity", "grouped/start"], ["grouped/stripe_len"],
                   "grouped/stripe_len")
        self._node("Range", [c["zero"], "grouped/stripe_len", c["one"]], ["grouped/cols"],
                   "grouped/cols")
        self._node("Range", [c["zero"], "grouped/rows", c["one"]], ["grouped/row_ids"],
                   "grouped/row_ids")
        self._node("Unsqueeze", ["grouped/row_ids", c["axis1"]], ["grouped/limits"],
                   "grouped/limits")
        self._node("LessOrEqual", ["grouped/cols", "grouped/limits"], ["grouped/visible"],
                   "grouped/visible")
        self._node("Where", ["grouped/visible", f0, finf], ["grouped/mask_rows"],
                   "grouped/mask_rows")
        # the grouped scores' rows run (query head in group, step row): the mask per head
        self._node("Tile", ["grouped/mask_rows", c["tiles"]], ["grouped/mask"], "grouped/mask")
        # where the masked stripe goes back into each KV head's scores (TensorScatter)
        self._node("Expand", ["grouped/write_at", c["kv_heads"]], ["grouped/stripe_at"],
                   "grouped/stripe_at")
        self._node("Unsqueeze", ["grouped/capacity", c["axis0"]], ["grouped/capacity1"],
                   "grouped/capacity1")

    @property
    def _half_buffers(self) -> bool:
        """Whether the KV buffers hold float16 (``GraphBuilder.kv_elem``)."""
        return self.kv_elem == TensorProto.FLOAT16

    def _stored(self, rows: str) -> str:
        """The step's k or v ``rows`` as a float16 buffer holds them: rounded once, and
        saturated at float16's largest magnitude (65,504) rather than turned to inf, which
        would make every later score of the layer NaN; values that large only come from a
        broken or hostile file, never from a model float16 runs as llama.cpp does."""
        (clipped,) = self._node("Clip", [rows, "grouped.half_min", "grouped.half_max"],
                                [f"{rows}/in_range"], f"{rows}/in_range")
        (half,) = self._node("Cast", [clipped], [f"{rows}/half"], f"{rows}/half",
                             to=TensorProto.FLOAT16)
        return half

    def _grouped_attention(
        self, q_k_v: list[str], i: int, name: str, *, rope_suffix: str, scale: float,
        rotary: bool,
    ) -> str:
        """Layer ``i``'s grouped attention; ``q_k_v`` as for GroupQueryAttention."""
        p = self.p
        hq, hkv, d = p.n_heads, p.n_kv_heads, p.head_dim
        group = hq // hkv
        out = f"{name}.attn/out"
        shapes = {
            key: self._const(f"{name}.attn.{key}", np.array(value, np.int64))
            for key, value in (
                ("kv_rows", [1, -1, hkv, d]), ("q_rows", [-1, hkv, group, d]),
                ("grouped", [hkv, -1, d]), ("out4", [hkv, group, -1, d]),
                ("out3", [1, -1, hq * d]), ("axis2", [2]),
            )
        }
        if q_k_v[1] == "":  # packed [qkv, "", ""]
            split = self._const(f"{name}.attn.split",
                                np.array([hq * d, hkv * d, hkv * d], np.int64))
            q, k, v = self._node("Split", [q_k_v[0], split],
                                 [f"{name}.attn/q", f"{name}.attn/k", f"{name}.attn/v"],
                                 f"{name}.attn/split", axis=2)
        else:
            q, k, v = q_k_v
        if rotary:
            caches = [f"cos_cache{rope_suffix}", f"sin_cache{rope_suffix}"]
            inter = int(p.rope_interleaved)
            (q,) = self._node("RotaryEmbedding", [q, "grouped/positions", *caches],
                              [f"{name}.attn/q_rot"], f"{name}.attn/q_rot", MS,
                              interleaved=inter, num_heads=hq)
            (k,) = self._node("RotaryEmbedding", [k, "grouped/positions", *caches],
                              [f"{name}.attn/k_rot"], f"{name}.attn/k_rot", MS,
                              interleaved=inter, num_heads=hkv)
        read = {}
        for kind, rows in (("key", k), ("value", v)):
            (r4,) = self._node("Reshape", [rows, shapes["kv_rows"]], [f"{rows}/4d"],
                               f"{rows}/4d")
            (rt,) = self._node("Transpose", [r4], [f"{rows}/heads"], f"{rows}/heads",
                               perm=[0, 2, 1, 3])
            if self._half_buffers:
                rt = self._stored(rt)
            present = f"present.{i}.{kind}"
            self._node("TensorScatter",
                       [f"past_key_values.{i}.{kind}", rt, "grouped/write_at"], [present],
                       f"{name}.attn/write_{kind}", axis=2)
            wide = present
            if self._half_buffers:
                (wide,) = self._node("Cast", [present], [f"{name}.attn/{kind}_f32"],
                                     f"{name}.attn/{kind}_f32", to=TensorProto.FLOAT)
            (read[kind],) = self._node("Reshape", [wide, shapes["grouped"]],
                                       [f"{name}.attn/{kind}3"], f"{name}.attn/{kind}3")
        (q4,) = self._node("Reshape", [q, shapes["q_rows"]], [f"{name}.attn/q4"],
                           f"{name}.attn/q4")
        (qt,) = self._node("Transpose", [q4], [f"{name}.attn/qt"], f"{name}.attn/qt",
                           perm=[1, 2, 0, 3])
        (qg,) = self._node("Reshape", [qt, shapes["grouped"]], [f"{name}.attn/qg"],
                           f"{name}.attn/qg")
        (s,) = self._node("FusedMatMul", [qg, read["key"]], [f"{name}.attn/scores"],
                          f"{name}.attn/scores", MS, alpha=scale, transB=1)
        # mask only the stripe [start, capacity): a Slice of it, the Add, and TensorScatter
        # writing it back in place (the scores are not read again), instead of a pass over
        # every score (docs/ARCHITECTURE.md, "Grouped attention": prefill)
        (st,) = self._node("Slice", [s, "grouped/write_at", "grouped/capacity1",
                                     shapes["axis2"]], [f"{name}.attn/stripe"],
                           f"{name}.attn/stripe")
        (sm,) = self._node("Add", [st, "grouped/mask"], [f"{name}.attn/stripe_masked"],
                           f"{name}.attn/stripe_masked")
        (m,) = self._node("TensorScatter", [s, sm, "grouped/stripe_at"],
                          [f"{name}.attn/masked"], f"{name}.attn/masked", axis=2)
        # the same symbolic shape on both sides lets ORT's planner run TensorScatter in place
        # (its kernel then copies nothing but the stripe); unknown dims would not match
        scores_shape = [hkv, "grouped_score_rows", "kv_capacity"]
        self.value_infos += [helper.make_tensor_value_info(value, TensorProto.FLOAT, scores_shape)
                             for value in (s, m)]
        (pr,) = self._node("Softmax", [m], [f"{name}.attn/probs"], f"{name}.attn/probs",
                           axis=-1)
        (o3,) = self._node("FusedMatMul", [pr, read["value"]], [f"{name}.attn/o3"],
                           f"{name}.attn/o3", MS)
        (o4,) = self._node("Reshape", [o3, shapes["out4"]], [f"{name}.attn/o4"],
                           f"{name}.attn/o4")
        (ot,) = self._node("Transpose", [o4], [f"{name}.attn/ot"], f"{name}.attn/ot",
                           perm=[2, 0, 1, 3])
        self._node("Reshape", [ot, shapes["out3"]], [out], f"{name}.attn/rows")
        return out

