"""A tiny random gpt-oss GGUF written with ``gguf.GGUFWriter`` (test helper), laid out as
llama.cpp's converter writes gpt-oss-20b: MXFP4 expert tensors [K, N, E] with float biases,
attention sinks, q/k/v/o biases, ``attn_post_norm``, YaRN and an alternating window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, RopeScalingType, quants

from tests.models.gpt_oss_reference import GptOssConfig
from tests.models.tiny_gguf import MERGES, add_random_tensor, gpt2_vocab

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 128, 6, 2, 32  # heads·head_dim 192 ≠ hidden, as in 20b
EXPERTS, USED, EXPERT_FFN, LAYERS = 4, 2, 64, 4
WINDOW, YARN_FACTOR, YARN_ORIGINAL = 5, 4.0, 64
ROPE_BASE, EPS = 150000.0, 1e-5
# the harmony turn format, shortened (the real template is in the GGUF people download)
HARMONY_TEMPLATE = (
    "{% for m in messages %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
SPECIALS = ["<|startoftext|>", "<|return|>", "<|start|>", "<|message|>", "<|end|>",
            "<|channel|>", "<|call|>"]

CONFIG = GptOssConfig(
    n_layers=LAYERS, n_heads=HEADS, n_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
    n_experts_used=USED, rope_base=ROPE_BASE, rms_eps=EPS, sliding_window=WINDOW,
    yarn_factor=YARN_FACTOR, yarn_original_context=YARN_ORIGINAL,
)  # fmt: skip


def _experts(w: GGUFWriter, weights: dict, rng: np.random.Generator, name: str,
             shape: tuple[int, int, int], qtype: Q) -> None:
    """An [E, N, K] expert tensor in ``qtype``; ``weights[name]`` gets what it dequantizes to."""
    data = (rng.standard_normal(shape) * 0.08).astype(np.float32)
    if qtype == Q.F32:
        w.add_tensor(name, data)
        weights[name] = data
        return
    raw = quants.quantize(data, qtype)
    w.add_tensor(name, raw, raw_dtype=qtype)
    weights[name] = quants.dequantize(raw, qtype).reshape(shape).astype(np.float32)


def write_tiny_gpt_oss(
    path: Path, *, qtype: Q = Q.Q8_0, expert_type: Q = Q.MXFP4, seed: int = 0,
    layers: int = LAYERS,
) -> dict[str, np.ndarray]:
    """Write the model; returns its weights as the reference sees them (float32)."""
    rng = np.random.default_rng(seed)
    tokens, types = gpt2_vocab()
    tokens = [*SPECIALS, *tokens[3:]]  # the byte-level table and merges after gpt-oss's specials
    types = [3] * len(SPECIALS) + types[3:]
    vocab = len(tokens) + (-len(tokens)) % 32
    tokens += [f"<|reserved_{i}|>" for i in range(vocab - len(tokens))]
    types += [5] * (vocab - len(types))
    w = GGUFWriter(str(path), "gpt-oss")
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(EXPERT_FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(EPS)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(USED)
    w.add_expert_feed_forward_length(EXPERT_FFN)
    w.add_sliding_window(WINDOW)
    w.add_rope_scaling_type(RopeScalingType.YARN)
    w.add_rope_scaling_factor(YARN_FACTOR)
    w.add_rope_scaling_orig_ctx_len(YARN_ORIGINAL)
    w.add_name("tiny-gpt-oss")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_add_bos_token(False)
    w.add_chat_template(HARMONY_TEMPLATE)
    weights: dict[str, np.ndarray] = {}

    def put(name: str, shape: tuple[int, ...], qt: Q, scale: float = 0.05,
            offset: float = 0.0) -> None:
        add_random_tensor(w, weights, rng, name, shape, qt, scale=scale, offset=offset)

    put("token_embd.weight", (vocab, HIDDEN), qtype, scale=0.5)
    q_rows, kv_rows = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for i in range(layers):
        p = f"blk.{i}."
        put(p + "attn_norm.weight", (HIDDEN,), Q.F32, 0.1, 1.0)
        put(p + "attn_post_norm.weight", (HIDDEN,), Q.F32, 0.1, 1.0)
        for t, rows in (("q", q_rows), ("k", kv_rows), ("v", kv_rows)):
            put(p + f"attn_{t}.weight", (rows, HIDDEN), qtype)
            put(p + f"attn_{t}.bias", (rows,), Q.F32, 0.1)
        put(p + "attn_output.weight", (HIDDEN, q_rows), qtype)
        put(p + "attn_output.bias", (HIDDEN,), Q.F32, 0.1)
        put(p + "attn_sinks.weight", (HEADS,), Q.F32, 1.0, 1.0)
        put(p + "ffn_gate_inp.weight", (EXPERTS, HIDDEN), Q.F32, 0.5)
        put(p + "ffn_gate_inp.bias", (EXPERTS,), Q.F32, 0.5)
        _experts(w, weights, rng, p + "ffn_gate_exps.weight", (EXPERTS, EXPERT_FFN, HIDDEN),
                 expert_type)
        _experts(w, weights, rng, p + "ffn_up_exps.weight", (EXPERTS, EXPERT_FFN, HIDDEN),
                 expert_type)
        _experts(w, weights, rng, p + "ffn_down_exps.weight", (EXPERTS, HIDDEN, EXPERT_FFN),
                 expert_type)
        # biases wide enough that the ±7 clamps of gate and up bite on some channels
        put(p + "ffn_gate_exps.bias", (EXPERTS, EXPERT_FFN), Q.F32, 4.0)
        put(p + "ffn_up_exps.bias", (EXPERTS, EXPERT_FFN), Q.F32, 4.0)
        put(p + "ffn_down_exps.bias", (EXPERTS, HIDDEN), Q.F32, 0.1)
    put("output_norm.weight", (HIDDEN,), Q.F32, 0.1, 1.0)
    put("output.weight", (vocab, HIDDEN), qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return weights
