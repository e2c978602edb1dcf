"""Tiny random Gemma 3 GGUF files written with ``gguf.GGUFWriter`` (test helper).

Seven layers, so both kinds appear: layers 0-4 are local (sliding window), layer 5 is global,
layer 6 is local again. Norm weights are stored as llama.cpp's converter stores them, with
Gemma's +1 already added (values near 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

from tests.models.tiny_gguf import MERGES, add_random_tensor, gpt2_vocab

HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM, LAYERS, WINDOW = 64, 128, 4, 2, 16, 7, 8
ROPE_BASE = 1e6
RMS_EPS = 1e-6
SPECIALS = ["<start_of_turn>", "<end_of_turn>"]


def write_tiny_gemma3(
    path: Path,
    *,
    qtype: Q = Q.F32,
    seed: int = 0,
    window: int = WINDOW,
    softcap: float | None = None,
    matrix_types: dict[str, Q] | None = None,
    hidden: int = HIDDEN,
    ffn: int = FFN,
) -> dict[str, np.ndarray]:
    """Write a tiny Gemma 3; returns its weights as the reference sees them (float32).

    K-quants need rows of 256: pass ``hidden=ffn=256`` for them (attn_output's rows stay
    heads·head_dim = 64, so give it a 32-block type)."""
    overrides = matrix_types or {}
    rng = np.random.default_rng(seed)
    tokens, types = gpt2_vocab()
    tokens += SPECIALS
    types += [3] * len(SPECIALS)
    vocab = len(tokens) + (-len(tokens)) % 32
    tokens += [f"<unused{i}>" for i in range(vocab - len(tokens))]
    types += [5] * (vocab - len(types))
    w = GGUFWriter(str(path), "gemma3")
    w.add_block_count(LAYERS)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_sliding_window(window)
    if softcap is not None:
        w.add_final_logit_softcapping(softcap)
    w.add_name("tiny-gemma3")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    weights: dict[str, np.ndarray] = {}

    def put(name: str, shape: tuple[int, ...], qt: Q, scale: float = 0.1, offset=0.0) -> None:
        add_random_tensor(w, weights, rng, name, shape, qt, scale=scale, offset=offset)

    put("token_embd.weight", (vocab, hidden), qtype, scale=0.05)
    for i in range(LAYERS):
        p = f"blk.{i}."
        for norm in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            put(p + norm + ".weight", (hidden,), Q.F32, 0.1, 1.0)
        put(p + "attn_q_norm.weight", (HEAD_DIM,), Q.F32, 0.1, 1.0)
        put(p + "attn_k_norm.weight", (HEAD_DIM,), Q.F32, 0.1, 1.0)
        shapes = {
            "attn_q": (HEADS * HEAD_DIM, hidden),
            "attn_k": (KV_HEADS * HEAD_DIM, hidden),
            "attn_v": (KV_HEADS * HEAD_DIM, hidden),
            "attn_output": (hidden, HEADS * HEAD_DIM),
            "ffn_gate": (ffn, hidden),
            "ffn_up": (ffn, hidden),
            "ffn_down": (hidden, ffn),
        }
        for short, shape in shapes.items():
            put(p + short + ".weight", shape, overrides.get(short, qtype))
    put("output_norm.weight", (hidden,), Q.F32, 0.1, 1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return weights
