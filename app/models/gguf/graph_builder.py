"""The ONNX decoder graph of a Llama-family model (llama, Mistral, SmolLM2/3, Qwen 2/3, Phi-3,
Gemma 3, Granite, gpt-oss); the decoder blocks themselves are built in ``layers``.

Contract (the engine relies on it; it matches onnxruntime-genai's builder):

* inputs ``input_ids`` int64 [batch, seq], ``attention_mask`` int64 [batch, total_seq],
  ``past_key_values.{i}.key|value`` [batch, kv_heads, past_seq, head_dim], float32 (the
  grouped form: float16 unless ``kv_cache`` says float32, ``grouped_attention.KV_CACHES``);
* input ``num_logits_to_keep`` int64 [1] (how many last positions get logits: 1 for prefill and
  decode, K for a speculative verify step; ``verify_logits=False`` builds the graph without
  it, fixed to the last position);
* outputs ``logits`` float32 [batch, logits_length, vocab] (the last ``num_logits_to_keep``
  positions; [batch, 1, vocab] without the input) and ``present.{i}.key|value``.
* ``com.microsoft.GroupQueryAttention`` with ``do_rotary=1`` and cos/sin caches; ``seqlens_k``
  and ``total_sequence_length`` come from ``attention_mask`` inside the graph, so past and
  present may be bound to one shared max-length buffer.
* or, with ``attention="grouped"`` (opset 24): RotaryEmbedding, TensorScatter into the shared
  buffer and grouped FusedMatMuls over its capacity (``grouped_attention``), the same I/O.

Layout chosen for CPU decode speed (one token: many small kernels, so fewer is faster):

* q/k/v run as one matmul (weights stacked along N) whose output goes to GroupQueryAttention
  as packed QKV; gate/up run as one matmul and a Split. Weights of different forms (mixed
  files such as Q4_K_M) stay separate.
* The hidden stream is 2-D rows [batch·seq, hidden] (reshaped to 3-D around attention), so
  the block-offset term of weights that have one (Q4_1/Q4_K converted with
  ``exact_offsets``, see ``quant``) is one Gemm that also adds the MatMulNBits result:
  ``Gemm(block_sums(x), offsets.T, codes_out)``.

Weights are streamed into the external data file as they are built (see ``ExternalData``),
so peak memory stays near one tensor plus the graph.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from app.engine.loaded_context import LOADED_CONTEXT
from app.models.gguf.grouped_attention import (
    ATTENTION_FORMS,
    DEFAULT_KV_CACHE,
    GROUPED_OPSET,
    KV_CACHES,
    GroupedAttentionBuilder,
    kv_cache_of,
    unsupported_reason,
)
from app.models.gguf.layers import LayerBuilder
from app.models.gguf.quant import NBitsWeight, concat, split_blocks
from app.models.gguf.reader import ModelParams
from app.models.gguf.weights import Linear, WeightSource

OPSET = 17
IR_VERSION = 10
MS = "com.microsoft"
DATA_ALIGN = 64

# ``activation_groups``: the matrix groups ``activation_block`` may be limited to, by the
# ONNX node name's ending; "output" is the output layer and the token lookup (one table when
# tied). Matrices outside these (MoE routers, experts) follow only an unlimited block.
MATRIX_GROUPS: dict[str, tuple[str, ...]] = {
    "qkv": (".attn.q_proj", ".attn.k_proj", ".attn.v_proj", ".attn.qkv_proj"),
    "o": (".attn.o_proj",),
    "gate_up": (".mlp.gate_proj", ".mlp.up_proj", ".mlp.gate_up_proj"),
    "down": (".mlp.down_proj",),
    "output": ("lm_head", "model.embed_tokens"),
}


#: the MatMulNBits ``accuracy_level`` of ``float_groups``: fp32 activations (MLAS CompFp32)
FLOAT_ACCURACY = 1


def matrix_group(name: str) -> str | None:
    """The ``MATRIX_GROUPS`` key of the ONNX node ``name``, else None."""
    for group, endings in MATRIX_GROUPS.items():
        if name.endswith(endings):
            return group
    return None


class ExternalData:
    """Appends initializer bytes to one external data file; returns TensorProtos that point
    into it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = path.open("wb")
        self.offset = 0

    def tensor(self, name: str, array: np.ndarray) -> TensorProto:
        array = np.ascontiguousarray(array)
        if array.nbytes < 1024:
            return numpy_helper.from_array(array, name)
        pad = (-self.offset) % DATA_ALIGN
        if pad:
            self._fh.write(b"\0" * pad)
            self.offset += pad
        proto = TensorProto()
        proto.name = name
        proto.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        proto.dims.extend(array.shape)
        proto.data_location = TensorProto.EXTERNAL
        for key, value in (
            ("location", self.path.name),
            ("offset", str(self.offset)),
            ("length", str(array.nbytes)),
        ):
            entry = proto.external_data.add()
            entry.key, entry.value = key, value
        self._fh.write(array.tobytes())
        self.offset += array.nbytes
        return proto

    def close(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()


def rope_caches(
    p: ModelParams, freq_factors: np.ndarray | None, attn_factor: float = 1.0
) -> tuple[np.ndarray, ...]:
    """cos/sin caches [context_length, rotary_dim/2] (frequency divisors such as Llama 3's
    or LongRoPE's, linear scaling, and LongRoPE's attention factor on cos and sin)."""
    dim = p.rotary_dim
    half = dim // 2
    inv_freq = 1.0 / (p.rope_base ** (np.arange(0, half, dtype=np.float64) * 2 / dim))
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors[:half].astype(np.float64)
    if p.yarn_factor:
        inv_freq, mscale = yarn_frequencies(p, inv_freq)
        attn_factor = attn_factor * mscale
    pos = np.arange(p.context_length, dtype=np.float64) / p.rope_scale_linear
    angles = np.outer(pos, inv_freq)
    return (
        (np.cos(angles) * attn_factor).astype(np.float32),
        (np.sin(angles) * attn_factor).astype(np.float32),
    )


def yarn_frequencies(p: ModelParams, inv_freq: np.ndarray) -> tuple[np.ndarray, float]:
    """YaRN as ggml's ``rope_yarn`` computes it (ext_factor 1): frequency i keeps its own
    value below the correction range [low, high] (dimensions from ``ggml_rope_yarn_corr_dims``,
    floored and ceiled unless ``p.yarn_truncate`` is false), is divided by the factor above
    it and blends linearly between; cos and sin are multiplied by ``1 + 0.1·ln(factor)``.
    Returns (frequencies, that multiplier)."""
    dim = p.rotary_dim

    def corr_dim(rotations: float) -> float:
        return dim * np.log(p.yarn_original_context / (rotations * 2 * np.pi)) / (
            2 * np.log(p.rope_base)
        )

    low, high = corr_dim(p.yarn_beta_fast), corr_dim(p.yarn_beta_slow)
    if p.yarn_truncate:
        low, high = np.floor(low), np.ceil(high)
    low, high = max(0.0, float(low)), min(dim - 1.0, float(high))
    i = np.arange(len(inv_freq), dtype=np.float64)
    keep = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
    blended = inv_freq / p.yarn_factor * (1.0 - keep) + inv_freq * keep
    return blended, 1.0 + 0.1 * float(np.log(p.yarn_factor))


class GraphBuilder(GroupedAttentionBuilder, LayerBuilder):
    """Builds the decoder graph node by node; weights come from a ``WeightSource``."""

    def __init__(
        self,
        params: ModelParams,
        weights: WeightSource,
        data: ExternalData,
        *,
        accuracy_level: int = 4,
        progress: Callable[[float, str], None] | None = None,
        verify_logits: bool = True,
        attention: str = "gqa",
        kv_cache: str = DEFAULT_KV_CACHE,
        activation_block: int | None = None,
        activation_groups: frozenset[str] | None = None,
        float_groups: frozenset[str] = frozenset(),
    ) -> None:
        """``activation_block``: MatMulNBits blocks of at most this many elements (16: the
        activations' int8 rounding per 16 instead of per 32; ``quant.split_blocks``), else
        the weights' own blocks; ``activation_groups``: only in these ``MATRIX_GROUPS``
        (None: every matrix); ``float_groups``: ``MATRIX_GROUPS`` whose MatMulNBits nodes
        take float activations (``FLOAT_ACCURACY``) whatever ``accuracy_level`` says."""
        for given in (activation_groups, float_groups):
            if given is not None and (unknown := given - set(MATRIX_GROUPS)):
                raise ValueError(f"unknown matrix groups {sorted(unknown)}")
        if attention not in ATTENTION_FORMS:
            raise ValueError(f"unknown attention form {attention!r}")
        if attention == "grouped" and (reason := unsupported_reason(params)):
            raise ValueError(f"grouped attention does not support {reason} yet")
        if kv_cache not in KV_CACHES:
            raise ValueError(f"unknown KV cache type {kv_cache!r}")
        self.attention = attention
        #: the ONNX element type of the KV buffers
        self.kv_elem = KV_CACHES[kv_cache_of(attention, kv_cache)]
        self.p = params
        self.verify_logits = verify_logits
        self.w = weights
        self.data = data
        self.accuracy_level = accuracy_level
        self.activation_block = activation_block
        self.activation_groups = activation_groups
        self.float_groups = float_groups
        self.progress = progress or (lambda _f, _m: None)
        self.nodes: list[onnx.NodeProto] = []
        #: shapes the graph states for ORT's memory planner (``grouped_attention``)
        self.value_infos: list[onnx.ValueInfoProto] = []
        self.inits: list[TensorProto] = []
        self._block_sums: dict[tuple[str, int], str] = {}
        self._init_names: set[str] = set()
        # the quantized token table and its (qweight, scales) initializers: a tied output
        # layer gets the same object from the WeightSource and reuses them
        self._embed_nbits: tuple[NBitsWeight, tuple[str, str]] | None = None
        self._embed_form: tuple[NBitsWeight, NBitsWeight] | None = None  # (table, its form)

    # -- helpers ---------------------------------------------------------------------------
    def _init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(self.data.tensor(name, array))
        self._init_names.add(name)
        return name

    def _node(
        self, op: str, inputs: list[str], outputs: list[str], name: str, domain: str = "", **attrs
    ) -> list[str]:
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, domain=domain, **attrs))
        return outputs

    def _const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        self._init_names.add(name)
        return name

    def _matmul(self, x: str, weight: Linear, name: str) -> str:
        out = f"{name}/out"
        if isinstance(weight, NBitsWeight):
            form = self._kernel_form(weight, name)
            inputs = [x, *self._nbits_blocks(weight, name, form)]
            if form.zero_points is not None:
                inputs.append(self._init(f"{name}.qzeros", form.zero_points.reshape(-1)))
            main = out if weight.offsets is None else f"{name}/codes"
            self._node(
                "MatMulNBits",
                inputs,
                [main],
                name,
                MS,
                K=weight.k,
                N=weight.n,
                bits=weight.bits,
                block_size=form.block_size,
                accuracy_level=self._accuracy(name),
            )
            if weight.offsets is not None:  # out = block_sums(x) @ offsets.T + codes part
                # (sums and offsets over the weight's own blocks)
                sums = self._block_sum(x, weight.k, weight.block_size)
                table = self._init(f"{name}.offsets", np.ascontiguousarray(weight.offsets.T))
                self._node("Gemm", [sums, table, main], [out], f"{name}/offsets")
            return out
        w_t = self._init(f"{name}.weight", np.ascontiguousarray(weight.T))
        if weight.dtype == np.float16:
            (w_t,) = self._node(
                "Cast", [w_t], [f"{name}.weight_fp32"], f"{name}/cast", to=TensorProto.FLOAT
            )
        self._node("MatMul", [x, w_t], [out], name)
        return out

    def _accuracy(self, name: str) -> int:
        """The MatMulNBits ``accuracy_level`` of node ``name`` (``float_groups``)."""
        return FLOAT_ACCURACY if matrix_group(name) in self.float_groups else self.accuracy_level

    def _nbits_blocks(
        self, weight: NBitsWeight, name: str, form: NBitsWeight
    ) -> tuple[str, str]:
        """(qweight [N, k_blocks, blob] uint8, scales [N·k_blocks]) initializers of
        ``weight`` in its kernel ``form``; the token table's are written once and shared."""
        if self._embed_nbits is not None and weight is self._embed_nbits[0]:
            return self._embed_nbits[1]
        return (
            self._init(f"{name}.qweight", form.packed),
            self._init(f"{name}.scales", form.scales.reshape(-1)),
        )

    def _kernel_form(self, weight: NBitsWeight, name: str) -> NBitsWeight:
        """``weight`` (node ``name``) in the MatMulNBits blocks the kernels get
        (``activation_block``, ``activation_groups``); the token table's is made once (it
        serves the lookup and a tied output layer)."""
        if self._embed_form is not None and weight is self._embed_form[0]:
            return self._embed_form[1]
        if self.activation_block is None or weight.block_size <= self.activation_block:
            return weight
        if self.activation_groups is not None and (
            matrix_group(name) not in self.activation_groups
        ):
            return weight
        return split_blocks(weight, self.activation_block)

    def _embed(self) -> str:
        """The token lookup → [batch, seq, ...] float32 (rows reshaped by the caller).

        A quantized table is read by GatherBlockQuantized straight from MatMulNBits-layout
        blocks: data [vocab, k_blocks, blob] with quantize_axis 2 (one block per innermost
        row), so the tied output layer's MatMulNBits shares the same initializer; only the
        scales need a Reshape to [vocab, k_blocks, 1] (the rank the op wants)."""
        table = self.w.embedding()
        if isinstance(table, NBitsWeight):
            form = self._kernel_form(table, "model.embed_tokens")
            self._embed_form = (table, form)
            qweight, scales = self._nbits_blocks(table, "model.embed_tokens", form)
            self._embed_nbits = (table, (qweight, scales))
            shape = self._const(
                "const.embed_scales_shape",
                np.array([table.n, table.k // form.block_size, 1], np.int64),
            )
            self._node("Reshape", [scales, shape], ["embed/scales"], "embed/scales")
            return self._node(
                "GatherBlockQuantized",
                [qweight, "input_ids", "embed/scales"],
                ["embed/out"],
                "embed",
                MS,
                bits=table.bits,
                block_size=form.block_size,
                gather_axis=0,
                quantize_axis=2,
            )[0]
        emb = self._init("model.embed_tokens.weight", table)
        (x,) = self._node("Gather", [emb, "input_ids"], ["embed/out"], "embed")
        if table.dtype == np.float16:
            (x,) = self._node("Cast", [x], ["embed/fp32"], "embed/cast", to=TensorProto.FLOAT)
        return x

    def _block_sum(self, x: str, k: int, block_size: int) -> str:
        """Sums of ``x`` [M, K] over each run of ``block_size`` inputs → [M, K/block_size]
        (a Reshape, free, and a ReduceSum), computed once per tensor and block size."""
        key = (x, block_size)
        if key not in self._block_sums:
            shape = f"const.blocks_shape.{k}x{block_size}"
            if not self._has_init(shape):
                self._const(shape, np.array([-1, k // block_size, block_size], np.int64))
            self._node("Reshape", [x, shape], [f"{x}/blocks"], f"{x}/blocks")
            self._node(
                "ReduceSum",
                [f"{x}/blocks", "const.minus_one"],
                [f"{x}/block_sums"],
                f"{x}/block_sums",
                keepdims=0,
            )
            self._block_sums[key] = f"{x}/block_sums"
        return self._block_sums[key]

    def _has_init(self, name: str) -> bool:
        return name in self._init_names

    def _linear(self, x: str, gguf_name: str, name: str) -> str:
        weight = self.w.linear(gguf_name + ".weight")
        return self._biased(
            self._matmul(x, weight, name), self.w.optional_vector(gguf_name + ".bias"), name
        )

    def _fused_linear(
        self, x: str, parts: list[tuple[str, str]], name: str, *, split: bool = True
    ) -> tuple[str | None, list[str]]:
        """Projections of one input, ``parts`` = (GGUF name, ONNX name) each.

        When every weight has the same form they run as one matmul stacked along N (fewer,
        larger kernels: the small q/k/v and gate/up matrices thread better) and the result
        is (fused output, its parts after a Split, or [] when ``split`` is false); otherwise
        (None, separate outputs). Biases follow their weights."""
        weights = [self.w.linear(g + ".weight") for g, _ in parts]
        biases = [self.w.optional_vector(g + ".bias") for g, _ in parts]
        if not _stackable(weights):
            return None, [
                self._biased(self._matmul(x, w, n), b, n)
                for w, b, (_, n) in zip(weights, biases, parts, strict=True)
            ]
        sizes = [_rows(w) for w in weights]
        fused_w = (
            concat(weights)
            if isinstance(weights[0], NBitsWeight)
            else np.concatenate(weights, axis=0)
        )
        del weights
        fused_b = None
        if any(b is not None for b in biases):
            fused_b = np.concatenate(
                [
                    np.zeros(n, np.float32) if b is None else b
                    for b, n in zip(biases, sizes, strict=True)
                ]
            )
        out = self._biased(self._matmul(x, fused_w, name), fused_b, name)
        if not split:
            return out, []
        return out, self._split(out, sizes, name)

    def _split(self, x: str, sizes: list[int], name: str) -> list[str]:
        """``x`` cut along its last axis into parts of ``sizes``."""
        split_sizes = self._const(f"{name}.split", np.array(sizes, np.int64))
        outs = [f"{name}/part{j}" for j in range(len(sizes))]
        self._node("Split", [x, split_sizes], outs, f"{name}/split", axis=-1)
        return outs

    def _biased(self, out: str, bias: np.ndarray | None, name: str) -> str:
        if bias is None:
            return out
        (out,) = self._node(
            "Add", [out, self._init(f"{name}.bias", bias)], [f"{name}/biased"], f"{name}/bias"
        )
        return out

    # -- graph -----------------------------------------------------------------------------
    def build(self) -> onnx.ModelProto:
        p = self.p
        inputs = [
            helper.make_tensor_value_info(
                "input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]
            ),
            helper.make_tensor_value_info(
                "attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]
            ),
        ]
        if self.verify_logits:
            inputs.append(
                helper.make_tensor_value_info("num_logits_to_keep", TensorProto.INT64, [1])
            )
        logits_rows: str | int = "logits_length" if self.verify_logits else 1
        outputs = [
            helper.make_tensor_value_info(
                "logits", TensorProto.FLOAT, ["batch_size", logits_rows, p.vocab_size]
            )
        ]
        kv_shape = ["batch_size", p.n_kv_heads, "past_sequence_length", p.head_dim]
        present_shape = ["batch_size", p.n_kv_heads, "total_sequence_length", p.head_dim]
        kv_elem = self.kv_elem
        for i in range(p.n_layers):
            for kind in ("key", "value"):
                inputs.append(
                    helper.make_tensor_value_info(
                        f"past_key_values.{i}.{kind}", kv_elem, kv_shape
                    )
                )
                outputs.append(
                    helper.make_tensor_value_info(f"present.{i}.{kind}", kv_elem, present_shape)
                )

        self._attention_inputs()
        if p.rope_original_context:  # an initializer the engine's sessions override: kept
            # an input, so that ORT's constant folding does not fold its default value in
            inputs.append(helper.make_tensor_value_info(LOADED_CONTEXT, TensorProto.INT64, []))
        x = self._embed()
        # the hidden stream runs as rows [batch·seq, hidden]: every matmul is 2-D, so a
        # weight's block-offset term is one Gemm that also adds the codes' result
        rows = self._const("const.rows_shape", np.array([-1, p.hidden], np.int64))
        (x,) = self._node("Reshape", [x, rows], ["embed/rows"], "embed/rows")
        if p.embed_scale != 1.0:
            scale = self._const("const.embed_scale", np.array(p.embed_scale, np.float32))
            (x,) = self._node("Mul", [x, scale], ["embed/scaled"], "embed/scale")
        residual, delta = x, None
        for i in range(p.n_layers):
            self.progress(i / (p.n_layers + 1), f"Converting layer {i + 1} of {p.n_layers}")
            residual, delta = self._layer(i, residual, delta)
        self.progress(p.n_layers / (p.n_layers + 1), "Converting the output layer")
        normed, _ = self._norm(residual, delta, self.w.vector("output_norm.weight"), "final_norm")
        head = "output" if "output.weight" in self.w.g.tensors else "token_embd"
        head_out = self._matmul(normed, self.w.linear(head + ".weight"), "lm_head")
        if p.logit_scale != 1.0:  # Granite: logits / logit_scale (llama.cpp scales by 1/x)
            inv = self._const("const.logit_scale", np.array(1.0 / p.logit_scale, np.float32))
            (head_out,) = self._node("Mul", [head_out, inv], ["lm_head/scaled"], "lm_head/scale")
        if p.final_logit_softcap:
            head_out = self._softcap(head_out, p.final_logit_softcap)
        if self.verify_logits:  # [batch, logits_to_keep, vocab]
            logits_shape = "logits/shape"
            self._node(
                "Concat",
                ["const.minus_one", "num_logits_to_keep",
                 self._const("const.vocab", np.array([p.vocab_size], np.int64))],
                [logits_shape], "logits/shape", axis=0,
            )  # fmt: skip
        else:
            logits_shape = self._const(
                "const.logits_shape", np.array([-1, 1, p.vocab_size], np.int64)
            )
        self._node("Reshape", [head_out, logits_shape], ["logits"], "logits")
        graph = helper.make_graph(self.nodes, "hearth-decoder", inputs, outputs, self.inits,
                                  value_info=self.value_infos)
        model = helper.make_model(
            graph,
            opset_imports=[
                helper.make_opsetid("", GROUPED_OPSET if self.attention == "grouped" else OPSET),
                helper.make_opsetid(MS, 1),
            ],
        )
        model.ir_version = IR_VERSION
        model.producer_name = "hearth-gguf"
        return model

    def _attention_inputs(self) -> None:
        """seqlens_k = sum(mask) - 1 (int32), total_sequence_length = mask.shape[1]."""
        one = self._const("const.one", np.array(1, np.int64))
        axes = self._const("const.axes1", np.array([1], np.int64))
        self._node("ReduceSum", ["attention_mask", axes], ["mask/sum"], "mask/sum", keepdims=0)
        self._node("Sub", ["mask/sum", one], ["mask/sum_m1"], "mask/sub")
        self._node("Cast", ["mask/sum_m1"], ["seqlens_k"], "mask/seqlens", to=TensorProto.INT32)
        self._node("Shape", ["attention_mask"], ["mask/shape"], "mask/shape")
        self._node("Gather", ["mask/shape", one], ["mask/total64"], "mask/total", axis=0)
        self._node(
            "Cast", ["mask/total64"], ["total_seq_len"], "mask/total_i32", to=TensorProto.INT32
        )
        if self.p.rope_original_context:
            self._longrope_caches()
        else:
            cos, sin = rope_caches(self.p, self.w.g.rope_freq_factors())
            self._init("cos_cache", cos)
            self._init("sin_cache", sin)
        if self.p.rope_base_local:  # Gemma 3's local layers: their own base, never scaled
            local = dataclasses.replace(
                self.p, rope_base=self.p.rope_base_local, rope_scale_linear=1.0
            )
            cos, sin = rope_caches(local, None)
            self._init("cos_cache_local", cos)
            self._init("sin_cache_local", sin)
        minus_one = self._const("const.minus_one", np.array([-1], np.int64))
        self._node("Shape", ["input_ids"], ["ids/shape"], "ids/shape")
        self._node("Concat", ["ids/shape", minus_one], ["shape3d"], "shape3d", axis=0)
        if self.attention == "grouped":
            self._grouped_step_inputs()
        if self.verify_logits:  # the last ``num_logits_to_keep`` positions
            self._node("Neg", ["num_logits_to_keep"], ["const.last_start"], "logits/keep_start")
        else:
            self._const("const.last_start", np.array([-1], np.int64))
        self._const("const.last_end", np.array([np.iinfo(np.int64).max], np.int64))

    def _longrope_caches(self) -> None:
        """LongRoPE (Phi-3): the long factors' caches for every position when the loaded
        context exceeds the original one, the short factors' otherwise, as llama.cpp chooses
        them (``llama_model::get_rope_factors`` in src/llama-model.cpp: ``rope_long`` when
        ``n_ctx_per_seq > n_ctx_orig_yarn``), not by the run's length as Hugging Face and
        onnxruntime-genai do: that way a position's rotation never depends on how long the
        run that wrote it was, so a reply never depends on what was cached. The loaded
        context is the ``LOADED_CONTEXT`` scalar (the file's context length here; the
        engine's sessions put the one they load in its place, app/engine/loaded_context.py).
        Both caches are stacked [short; long] in one initializer per cos/sin; a Slice picks
        ``max(total, past buffer)`` rows (what GroupQueryAttention reads) from the half the
        loaded context selects."""
        p = self.p
        short, long = self.w.g.longrope_factors()
        caches = [rope_caches(p, f, p.rope_attn_factor) for f in (short, long)]
        self._init("cos_cache_stacked", np.concatenate([caches[0][0], caches[1][0]]))
        self._init("sin_cache_stacked", np.concatenate([caches[0][1], caches[1][1]]))
        orig = self._const("const.rope_original", np.array(p.rope_original_context, np.int64))
        loaded = self._const(LOADED_CONTEXT, np.array(p.context_length, np.int64))
        ctx = self._const("const.rope_rows", np.array([p.context_length], np.int64))
        two = self._const("const.two", np.array([2], np.int64))
        zero = self._const("const.axes0", np.array([0], np.int64))
        self._node("Greater", [loaded, orig], ["rope/long"], "rope/long")
        self._node("Cast", ["rope/long"], ["rope/long64"], "rope/long64", to=TensorProto.INT64)
        self._node("Mul", ["rope/long64", ctx], ["rope/start"], "rope/start")
        self._node("Shape", ["past_key_values.0.key"], ["rope/past_shape"], "rope/past_shape")
        self._node("Gather", ["rope/past_shape", two], ["rope/past_len"], "rope/past_len", axis=0)
        self._node("Unsqueeze", ["mask/total64", zero], ["rope/total"], "rope/total")
        self._node("Max", ["rope/total", "rope/past_len"], ["rope/rows"], "rope/rows")
        self._node("Add", ["rope/start", "rope/rows"], ["rope/end"], "rope/end")
        for kind in ("cos", "sin"):
            self._node(
                "Slice",
                [f"{kind}_cache_stacked", "rope/start", "rope/end", zero],
                [f"{kind}_cache"],
                f"rope/{kind}",
            )

    def _norm(
        self, residual: str, delta: str | None, gamma: np.ndarray, name: str
    ) -> tuple[str, str]:
        """RMSNorm of residual (+ delta); returns (normed, new residual)."""
        g = self._init(f"{name}.weight", gamma)
        if delta is None:
            self._node(
                "SimplifiedLayerNormalization",
                [residual, g],
                [f"{name}/out"],
                name,
                axis=-1,
                epsilon=self.p.rms_eps,
                stash_type=1,
            )
            return f"{name}/out", residual
        self._node(
            "SkipSimplifiedLayerNormalization",
            [residual, delta, g],
            [f"{name}/out", "", "", f"{name}/sum"],
            name,
            MS,
            epsilon=self.p.rms_eps,
        )
        return f"{name}/out", f"{name}/sum"

    def _softcap(self, x: str, cap: float) -> str:
        c = self._const("const.softcap", np.array(cap, np.float32))
        self._node("Div", [x, c], ["softcap/div"], "softcap/div")
        self._node("Tanh", ["softcap/div"], ["softcap/tanh"], "softcap/tanh")
        self._node("Mul", ["softcap/tanh", c], ["softcap/out"], "softcap/mul")
        return "softcap/out"

    def _to_3d(self, x: str) -> str:
        """Rows [batch·seq, n] → [batch, seq, n] (a view)."""
        (out,) = self._node("Reshape", [x, "shape3d"], [f"{x}/3d"], f"{x}/3d")
        return out

    def _to_rows(self, x: str) -> str:
        (out,) = self._node("Reshape", [x, "const.rows_shape"], [f"{x}/rows"], f"{x}/rows")
        return out

    def _last_position(self, x: str, name: str) -> str:
        axis = self._const(f"{name}.axis", np.array([1], np.int64))
        self._node("Slice", [x, "const.last_start", "const.last_end", axis], [name], name)
        return name


def _rows(w: Linear) -> int:
    return w.n if isinstance(w, NBitsWeight) else int(w.shape[0])


def _stackable(weights: list[Linear]) -> bool:
    """Whether the weights share one form (all the same MatMulNBits layout, or all floats of
    one dtype), so they can run as one stacked matmul."""
    first = weights[0]
    if isinstance(first, NBitsWeight):
        return all(isinstance(w, NBitsWeight) and first.same_form(w) for w in weights[1:])
    return all(
        isinstance(w, np.ndarray) and w.dtype == first.dtype and w.shape[1] == first.shape[1]
        for w in weights[1:]
    )
