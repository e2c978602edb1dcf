"""The decoder blocks of the graph: one builder for every supported architecture.

They differ in a few switches (see ``ModelParams``): per-head q/k RMSNorm before rotary
(Qwen 3, Gemma 3), Gemma 3's sandwich norms and GELU, a sliding window on some or all
layers (Gemma 3's local layers, Mistral, Phi-3), and the fused ``attn_qkv`` / ``ffn_up``
matrices of Phi-3, which arrive stacked exactly as the builder stacks separate ones, and
gpt-oss's attention sinks, q/k/v/o biases and mixture of experts (``_experts``).

``LayerBuilder`` is the per-layer half of ``GraphBuilder`` (which supplies ``_norm``,
``_linear``, ``_fused_linear``, ``_split`` and the reshape helpers).
"""

from __future__ import annotations

import numpy as np

from app.models.gguf.experts import QMOE_BLOCK, interleave

MS = "com.microsoft"
# gpt-oss's SwiGLU (llama.cpp's ``swiglu_oai``): the gate clamped at 7, up at ±7, σ(1.702·g)
GPT_OSS_SWIGLU_LIMIT = 7.0
GPT_OSS_SWIGLU_ALPHA = 1.702


class LayerBuilder:
    """Mixin for ``GraphBuilder``: adds one decoder block per call of ``_layer``."""

    def _layer(self, i: int, residual: str, delta: str | None) -> tuple[str, str]:
        """Block ``i`` of the residual stream (rows [batch·seq, hidden]); returns the new
        residual and the block's output still to be added (fused into the next norm)."""
        p, pre = self.p, f"blk.{i}"
        name = f"layers.{i}"
        sandwich = p.arch == "gemma3"
        h, residual = self._norm(
            residual, delta, self.w.vector(f"{pre}.attn_norm.weight"), f"{name}.input_norm"
        )
        local = i in p.local_layers
        # ORT's local_window_size counts the keys a query sees, its own included, as Gemma's
        # and Mistral's windows do (checked against the references on CPU)
        window = {"local_window_size": p.sliding_window} if local else {}
        attn = self._group_query_attention(
            self._attention_inputs_of(h, pre, name), i, name,
            rope_suffix="_local" if local and p.rope_base_local else "",
            scale=p.attn_scale, rotary=i not in p.nope_layers,
            sinks=self.w.vector(f"{pre}.attn_sinks.weight") if p.attn_sinks else None,
            **window,
        )  # fmt: skip
        if i == p.n_layers - 1:  # only the last position is needed from here on
            attn = self._last_position(attn, f"{name}.attn/last")
            residual = self._last_position(self._to_3d(residual), f"{name}.residual/last")
            residual = self._to_rows(residual)
        if p.n_heads * p.head_dim == p.hidden:
            attn = self._to_rows(attn)
        else:  # heads·head_dim may differ from hidden (Gemma 3 270M: 4·256 vs 640, Qwen 3)
            attn_rows = "const.attn_rows_shape"
            if not self._has_init(attn_rows):
                self._const(attn_rows, np.array([-1, p.n_heads * p.head_dim], np.int64))
            (attn,) = self._node("Reshape", [attn, attn_rows], [f"{attn}/rows"], f"{attn}/rows")
        o = self._residual_scaled(self._linear(attn, f"{pre}.attn_output", f"{name}.attn.o_proj"))
        if sandwich:
            o, _ = self._norm(
                o, None, self.w.vector(f"{pre}.post_attention_norm.weight"),
                f"{name}.attn_post_norm",
            )  # fmt: skip
        # gpt-oss names the norm before its experts ``attn_post_norm``
        ffn_norm = f"{pre}.attn_post_norm.weight" if p.n_experts else f"{pre}.ffn_norm.weight"
        h2, residual = self._norm(
            residual, o, self.w.vector(ffn_norm), f"{name}.post_attention_norm"
        )
        if p.n_experts:
            return residual, self._experts(h2, pre, name)
        gate, up = self._gate_up(h2, pre, name)
        if sandwich:  # com.microsoft FastGelu is GELU's tanh approximation (gelu_pytorch_tanh)
            act = f"{name}.mlp/gelu"
            self._node("FastGelu", [gate], [act], act, MS)
        else:
            self._node("Sigmoid", [gate], [f"{name}.mlp/sig"], f"{name}.mlp/sigmoid")
            self._node("Mul", [gate, f"{name}.mlp/sig"], [f"{name}.mlp/silu"], f"{name}.mlp/silu")
            act = f"{name}.mlp/silu"
        self._node("Mul", [act, up], [f"{name}.mlp/act"], f"{name}.mlp/act")
        down = self._linear(f"{name}.mlp/act", f"{pre}.ffn_down", f"{name}.mlp.down_proj")
        down = self._residual_scaled(down)
        if sandwich:
            down, _ = self._norm(
                down, None, self.w.vector(f"{pre}.post_ffw_norm.weight"), f"{name}.ffn_post_norm"
            )
        return residual, down

    def _experts(self, h: str, pre: str, name: str) -> str:
        """gpt-oss's mixture of experts on rows [M, hidden], as llama.cpp's
        ``LLM_FFN_SWIGLU_OAI_MOE`` with softmax-weight gating computes it: router logits
        ``ffn_gate_inp`` (with bias), the top ``n_experts_used`` by logit weighted by the
        softmax over just those, each expert ``down((up + 1) · g · σ(1.702·g))`` with
        ``g = min(gate, 7)`` and ``up`` clamped to ±7, biases on gate, up and down.

        ORT's MoE / QMoE take the router logits, softmax them over all experts, keep the top
        k and renormalize those (``normalize_routing_weights``): the same weights. Only the
        chosen experts run."""
        p, out = self.p, f"{name}.moe/out"
        router = self._linear(h, f"{pre}.ffn_gate_inp", f"{name}.moe.router")
        mats = [self.w.experts(f"{pre}.ffn_{t}_exps.weight") for t in ("gate", "up", "down")]
        biases = []
        for t, m in zip(("gate", "up", "down"), mats, strict=True):
            b = self.w.optional_vector(f"{pre}.ffn_{t}_exps.bias")
            biases.append(np.zeros((m.n_experts, m.n), np.float32) if b is None
                          else b.reshape(m.n_experts, m.n))
        gate, up, down = mats
        fc1_bias = self._init(f"{name}.moe.fc1_bias", interleave(biases[0], biases[1]))
        fc2_bias = self._init(f"{name}.moe.fc2_bias", biases[2])
        attrs = {
            "k": p.n_experts_used,
            "activation_type": "swiglu",
            "swiglu_fusion": 1,
            "swiglu_limit": GPT_OSS_SWIGLU_LIMIT,
            "activation_alpha": GPT_OSS_SWIGLU_ALPHA,
            "activation_beta": 1.0,
            "normalize_routing_weights": 1,
        }
        if gate.bits and gate.bits == up.bits == down.bits:
            inputs = [
                h, router,
                self._init(f"{name}.moe.fc1_qweight", interleave(gate.codes, up.codes)),
                self._init(f"{name}.moe.fc1_scales", interleave(gate.scales, up.scales)),
                fc1_bias,
                self._init(f"{name}.moe.fc2_qweight", down.codes),
                self._init(f"{name}.moe.fc2_scales", down.scales),
                fc2_bias,
            ]  # fmt: skip
            self._node(
                "QMoE", inputs, [out], f"{name}.moe", MS, **attrs,
                expert_weight_bits=gate.bits, block_size=QMOE_BLOCK,
                accuracy_level=self.accuracy_level,
            )  # fmt: skip
            return out
        fc1 = interleave(gate.float32(), up.float32())
        inputs = [
            h, router, self._init(f"{name}.moe.fc1_weight", fc1), fc1_bias,
            self._init(f"{name}.moe.fc2_weight", down.float32()), fc2_bias,
        ]  # fmt: skip
        self._node("MoE", inputs, [out], f"{name}.moe", MS, **attrs)
        return out

    def _residual_scaled(self, x: str) -> str:
        """A block output times Granite's ``residual_scale`` (unchanged when it is 1)."""
        if self.p.residual_scale == 1.0:
            return x
        c = "const.residual_scale"
        if not self._has_init(c):
            self._const(c, np.array(self.p.residual_scale, np.float32))
        (out,) = self._node("Mul", [x, c], [f"{x}/scaled"], f"{x}/residual_scale")
        return out

    def _attention_inputs_of(self, h: str, pre: str, name: str) -> list[str]:
        """GroupQueryAttention's query/key/value inputs (3-D): packed [qkv, "", ""] when q,
        k and v come from one matmul and need no norm, else [q, k, v]."""
        p = self.p
        split = p.qk_norm
        if f"{pre}.attn_qkv.weight" in self.w.g.tensors:  # Phi-3: stored stacked [q | k | v]
            qkv = self._linear(h, f"{pre}.attn_qkv", f"{name}.attn.qkv_proj")
            q_rows, kv_rows = p.n_heads * p.head_dim, p.n_kv_heads * p.head_dim
            sizes = [q_rows, kv_rows, kv_rows]
            parts = self._split(qkv, sizes, f"{name}.attn.qkv_proj") if split else []
        else:
            qkv, parts = self._fused_linear(
                h,
                [(f"{pre}.attn_{t}", f"{name}.attn.{t}_proj") for t in ("q", "k", "v")],
                f"{name}.attn.qkv_proj",
                split=split,
            )
        if not split and qkv is not None:
            return [self._to_3d(qkv), "", ""]
        if not split:
            return [self._to_3d(t) for t in parts]
        q, k, v = parts
        q = self._head_norm(q, self.w.vector(f"{pre}.attn_q_norm.weight"), f"{name}.attn.q_norm")
        k = self._head_norm(k, self.w.vector(f"{pre}.attn_k_norm.weight"), f"{name}.attn.k_norm")
        return [self._to_3d(q), self._to_3d(k), self._to_3d(v)]

    def _gate_up(self, h: str, pre: str, name: str) -> tuple[str, str]:
        """The MLP's gate and up projections. Phi-3 stores them as one ``ffn_up`` matrix,
        gate rows first (llama.cpp's fused SwiGLU), and has no ``ffn_gate``."""
        if f"{pre}.ffn_gate.weight" not in self.w.g.tensors:
            fused = self._linear(h, f"{pre}.ffn_up", f"{name}.mlp.gate_up_proj")
            gate, up = self._split(fused, [self.p.ffn, self.p.ffn], f"{name}.mlp.gate_up_proj")
            return gate, up
        _, (gate, up) = self._fused_linear(
            h,
            [(f"{pre}.ffn_{t}", f"{name}.mlp.{t}_proj") for t in ("gate", "up")],
            f"{name}.mlp.gate_up_proj",
        )
        return gate, up

    def _group_query_attention(
        self,
        q_k_v: list[str],
        i: int,
        name: str,
        *,
        rope_suffix: str = "",
        scale: float = 0.0,
        rotary: bool = True,
        sinks: np.ndarray | None = None,
        **attributes,
    ) -> str:
        """Layer ``i``'s GroupQueryAttention over the shared KV buffers; returns its output.

        ``q_k_v`` is [q, k, v] or a packed [qkv, "", ""]; ``scale`` 0 means 1/sqrt(head_dim);
        ``rotary`` False: no rotation at all (SmolLM3's NoPE layers); ``sinks`` (gpt-oss):
        one logit per head added to its softmax's denominator (GroupQueryAttention's
        ``head_sink``, checked against the reference on CPU)."""
        p = self.p
        if self.attention == "grouped":
            return self._grouped_attention(
                q_k_v, i, name, rope_suffix=rope_suffix,
                scale=scale or float(1.0 / np.sqrt(p.head_dim)), rotary=rotary,
            )  # fmt: skip
        out = f"{name}.attn/out"
        caches = [f"cos_cache{rope_suffix}", f"sin_cache{rope_suffix}"] if rotary else []
        if sinks is not None:  # after cos/sin, position_ids and attention_bias
            caches = (caches or ["", ""]) + ["", "", self._init(f"{name}.attn.sinks", sinks)]
        self._node(
            "GroupQueryAttention",
            [
                *q_k_v,
                f"past_key_values.{i}.key",
                f"past_key_values.{i}.value",
                "seqlens_k",
                "total_seq_len",
                *caches,
            ],
            [out, f"present.{i}.key", f"present.{i}.value"],
            f"{name}.attn",
            MS,
            num_heads=p.n_heads,
            kv_num_heads=p.n_kv_heads,
            do_rotary=int(rotary),
            rotary_interleaved=int(p.rope_interleaved),
            scale=scale or float(1.0 / np.sqrt(p.head_dim)),
            **attributes,
        )
        return out

    def _head_norm(self, x: str, gamma: np.ndarray, name: str) -> str:
        """RMSNorm over each head of rows [M, heads·head_dim] (q_norm / k_norm)."""
        heads = self._const(f"{name}.heads_shape", np.array([-1, self.p.head_dim], np.int64))
        (flat,) = self._node("Reshape", [x, heads], [f"{name}/heads"], f"{name}/heads")
        normed, _ = self._norm(flat, None, gamma, name)
        self._node("Shape", [x], [f"{name}/shape"], f"{name}/shape")
        (out,) = self._node("Reshape", [normed, f"{name}/shape"], [f"{name}/rows"], f"{name}/rows")
        return out
