"""The ONNX decoder graph of a Llama-family model (llama, Mistral, SmolLM2, Qwen2).

Contract (the engine relies on it; it matches onnxruntime-genai's builder):

* inputs ``input_ids`` int64 [batch, seq], ``attention_mask`` int64 [batch, total_seq],
  ``past_key_values.{i}.key|value`` float32 [batch, kv_heads, past_seq, head_dim];
* outputs ``logits`` float32 [batch, 1, vocab] (last position only) and
  ``present.{i}.key|value``.
* ``com.microsoft.GroupQueryAttention`` with ``do_rotary=1`` and cos/sin caches; ``seqlens_k``
  and ``total_sequence_length`` come from ``attention_mask`` inside the graph, so past and
  present may be bound to one shared max-length buffer.

Weights are streamed into the external data file as they are built (see ``ExternalData``),
so peak memory stays near one tensor plus the graph.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from app.models.gguf.quant import NBitsWeight
from app.models.gguf.reader import ModelParams
from app.models.gguf.weights import Linear, WeightSource

OPSET = 17
IR_VERSION = 10
MS = "com.microsoft"
DATA_ALIGN = 64


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


def rope_caches(p: ModelParams, freq_factors: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """cos/sin caches [context_length, head_dim/2] (Llama 3 factors and linear scaling)."""
    half = p.head_dim // 2
    inv_freq = 1.0 / (p.rope_base ** (np.arange(0, half, dtype=np.float64) * 2 / p.head_dim))
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors[:half].astype(np.float64)
    pos = np.arange(p.context_length, dtype=np.float64) / p.rope_scale_linear
    angles = np.outer(pos, inv_freq)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


class GraphBuilder:
    """Builds the decoder graph node by node; weights come from a ``WeightSource``."""

    def __init__(
        self,
        params: ModelParams,
        weights: WeightSource,
        data: ExternalData,
        *,
        accuracy_level: int = 4,
        progress: Callable[[float, str], None] | None = None,
    ) -> None:
        self.p = params
        self.w = weights
        self.data = data
        self.accuracy_level = accuracy_level
        self.progress = progress or (lambda _f, _m: None)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []

    # -- helpers ---------------------------------------------------------------------------
    def _init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(self.data.tensor(name, array))
        return name

    def _node(
        self, op: str, inputs: list[str], outputs: list[str], name: str, domain: str = "", **attrs
    ) -> list[str]:
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, domain=domain, **attrs))
        return outputs

    def _const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def _matmul(self, x: str, weight: Linear, name: str) -> str:
        out = f"{name}/out"
        if isinstance(weight, NBitsWeight):
            inputs = [
                x,
                self._init(f"{name}.qweight", weight.packed),
                self._init(f"{name}.scales", weight.scales.reshape(-1)),
            ]
            if weight.zero_points is not None:
                inputs.append(self._init(f"{name}.qzeros", weight.zero_points.reshape(-1)))
            self._node(
                "MatMulNBits",
                inputs,
                [out],
                name,
                MS,
                K=weight.k,
                N=weight.n,
                bits=weight.bits,
                block_size=weight.block_size,
                accuracy_level=self.accuracy_level,
            )
            return out
        w_t = self._init(f"{name}.weight", np.ascontiguousarray(weight.T))
        if weight.dtype == np.float16:
            (w_t,) = self._node(
                "Cast", [w_t], [f"{name}.weight_fp32"], f"{name}/cast", to=TensorProto.FLOAT
            )
        self._node("MatMul", [x, w_t], [out], name)
        return out

    def _linear(self, x: str, gguf_name: str, name: str) -> str:
        out = self._matmul(x, self.w.linear(gguf_name + ".weight"), name)
        bias = self.w.optional_vector(gguf_name + ".bias")
        if bias is not None:
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
        outputs = [
            helper.make_tensor_value_info(
                "logits", TensorProto.FLOAT, ["batch_size", 1, p.vocab_size]
            )
        ]
        kv_shape = ["batch_size", p.n_kv_heads, "past_sequence_length", p.head_dim]
        present_shape = ["batch_size", p.n_kv_heads, "total_sequence_length", p.head_dim]
        for i in range(p.n_layers):
            for kind in ("key", "value"):
                inputs.append(
                    helper.make_tensor_value_info(
                        f"past_key_values.{i}.{kind}", TensorProto.FLOAT, kv_shape
                    )
                )
                outputs.append(
                    helper.make_tensor_value_info(
                        f"present.{i}.{kind}", TensorProto.FLOAT, present_shape
                    )
                )

        self._attention_inputs()
        table = self.w.embedding()
        emb = self._init("model.embed_tokens.weight", table)
        (x,) = self._node("Gather", [emb, "input_ids"], ["embed/out"], "embed")
        if table.dtype == np.float16:
            (x,) = self._node("Cast", [x], ["embed/fp32"], "embed/cast", to=TensorProto.FLOAT)
        del table
        residual, delta = x, None
        for i in range(p.n_layers):
            residual, delta = self._layer(i, residual, delta)
            self.progress((i + 1) / (p.n_layers + 1), f"layer {i + 1}/{p.n_layers}")
        normed, _ = self._norm(residual, delta, self.w.vector("output_norm.weight"), "final_norm")
        head = "output" if "output.weight" in self.w.g.tensors else "token_embd"
        self._matmul(normed, self.w.linear(head + ".weight"), "lm_head")
        self.nodes[-1].output[0] = "logits"  # the lm_head's MatMul/MatMulNBits is last
        self.progress(1.0, "output layer")
        graph = helper.make_graph(self.nodes, "hearth-decoder", inputs, outputs, self.inits)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)]
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
        cos, sin = rope_caches(self.p, self.w.g.rope_freq_factors())
        self._init("cos_cache", cos)
        self._init("sin_cache", sin)
        self._const("const.last_start", np.array([-1], np.int64))
        self._const("const.last_end", np.array([np.iinfo(np.int64).max], np.int64))

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

    def _layer(self, i: int, residual: str, delta: str | None) -> tuple[str, str]:
        p, pre = self.p, f"blk.{i}"
        name = f"layers.{i}"
        h, residual = self._norm(
            residual, delta, self.w.vector(f"{pre}.attn_norm.weight"), f"{name}.input_norm"
        )
        q = self._linear(h, f"{pre}.attn_q", f"{name}.attn.q_proj")
        k = self._linear(h, f"{pre}.attn_k", f"{name}.attn.k_proj")
        v = self._linear(h, f"{pre}.attn_v", f"{name}.attn.v_proj")
        attn = f"{name}.attn/out"
        self._node(
            "GroupQueryAttention",
            [
                q,
                k,
                v,
                f"past_key_values.{i}.key",
                f"past_key_values.{i}.value",
                "seqlens_k",
                "total_seq_len",
                "cos_cache",
                "sin_cache",
            ],
            [attn, f"present.{i}.key", f"present.{i}.value"],
            f"{name}.attn",
            MS,
            num_heads=p.n_heads,
            kv_num_heads=p.n_kv_heads,
            do_rotary=1,
            rotary_interleaved=int(p.rope_interleaved),
            scale=float(1.0 / np.sqrt(p.head_dim)),
        )
        if i == p.n_layers - 1:  # only the last position is needed from here on
            attn = self._last_position(attn, f"{name}.attn/last")
            residual = self._last_position(residual, f"{name}.residual/last")
        o = self._linear(attn, f"{pre}.attn_output", f"{name}.attn.o_proj")
        h2, residual = self._norm(
            residual, o, self.w.vector(f"{pre}.ffn_norm.weight"), f"{name}.post_attention_norm"
        )
        gate = self._linear(h2, f"{pre}.ffn_gate", f"{name}.mlp.gate_proj")
        up = self._linear(h2, f"{pre}.ffn_up", f"{name}.mlp.up_proj")
        self._node("Sigmoid", [gate], [f"{name}.mlp/sig"], f"{name}.mlp/sigmoid")
        self._node("Mul", [gate, f"{name}.mlp/sig"], [f"{name}.mlp/silu"], f"{name}.mlp/silu")
        self._node("Mul", [f"{name}.mlp/silu", up], [f"{name}.mlp/act"], f"{name}.mlp/act")
        down = self._linear(f"{name}.mlp/act", f"{pre}.ffn_down", f"{name}.mlp.down_proj")
        return residual, down

    def _last_position(self, x: str, name: str) -> str:
        axis = self._const(f"{name}.axis", np.array([1], np.int64))
        self._node("Slice", [x, "const.last_start", "const.last_end", axis], [name], name)
        return name
