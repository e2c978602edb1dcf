"""Tiny random GGUF files written with ``gguf.GGUFWriter`` (test helper)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, quants

HIDDEN, FFN, HEADS, KV_HEADS, LAYERS = 256, 512, 4, 2, 2
HEAD_DIM = HIDDEN // HEADS
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ c", "a t", "Ġ s"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def rope_base(arch: str) -> float:
    """The tiny files' rope base: llama's 10,000 for llama-layout files, 1e6 otherwise."""
    return 10000.0 if arch in ("llama", "mistral") else 1000000.0


def byte_level_alphabet() -> list[str]:
    """GPT-2's bytes→unicode table, in byte order."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def gpt2_vocab() -> tuple[list[str], list[int]]:
    tokens = SPECIALS + byte_level_alphabet()
    for m in MERGES:
        merged = m.replace(" ", "")
        if merged not in tokens:
            tokens.append(merged)
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types


# where each type keeps its fp16 super-block scale(s) d (and dmin), for ``_raw_blocks``
D_OFFSETS = {
    Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q5_K: (0, 2), Q.TQ1_0: (52,), Q.TQ2_0: (64,),
    Q.IQ4_NL: (0,), Q.IQ4_XS: (0,), Q.IQ2_XXS: (0,), Q.IQ2_XS: (0,), Q.IQ2_S: (0,),
    Q.IQ3_XXS: (0,), Q.IQ3_S: (0,), Q.IQ1_S: (0,), Q.IQ1_M: (),
}
# the types gguf cannot quantize: tests write random, well-formed blocks of them
RANDOM_BLOCK_TYPES = (Q.Q6_K, Q.Q4_K, *D_OFFSETS)


def _set_d(blocks: np.ndarray, qtype: Q, d: float) -> None:
    """Set every block's fp16 super-block scale(s) to ``d``."""
    value = np.full((len(blocks), 1), d, np.float16).view(np.uint16)
    if qtype == Q.IQ1_M:  # d is spread over the top nibbles of the last four u16
        sc = blocks[:, 48:56].copy().view(np.uint16)
        for i in range(4):
            sc[:, i] = (sc[:, i] & 0x0FFF) | (((value[:, 0] >> (4 * i)) & 0xF) << 12)
        blocks[:, 48:56] = sc.view(np.uint8)
        return
    for off in D_OFFSETS[qtype]:
        blocks[:, off : off + 2] = value.view(np.uint8)


def _raw_kquant(
    qtype: Q, n: int, k: int, rng: np.random.Generator, spread: float = 0.05
) -> np.ndarray:
    """Random but well-formed blocks of a type gguf cannot quantize (K- and IQ-quants);
    those of the types in ``D_OFFSETS`` are scaled so that the weights spread by about
    ``spread`` (their standard deviation)."""
    block, size = quants.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n * k // block, size), dtype=np.uint8)
    if qtype == Q.Q6_K:
        blocks[:, 192:208] = rng.integers(-40, 40, (len(blocks), 16)).astype(np.int8).view(np.uint8)
        blocks[:, 208:210] = np.full((len(blocks), 1), 4e-5, np.float16).view(np.uint8)
    elif qtype == Q.Q4_K:
        blocks[:, 0:2] = np.full((len(blocks), 1), 2e-4, np.float16).view(np.uint8)
        blocks[:, 2:4] = np.full((len(blocks), 1), 1e-4, np.float16).view(np.uint8)
    else:
        _set_d(blocks, qtype, 1.0)
        unit = float(quants.dequantize(blocks[:64].copy(), qtype).std())
        _set_d(blocks, qtype, spread / unit)
    return blocks.reshape(n, -1)


def encode(w: np.ndarray, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    if qtype in RANDOM_BLOCK_TYPES:  # random blocks as widely spread as ``w``
        return _raw_kquant(qtype, w.shape[0], w.shape[1], rng, float(w.std()) or 0.05)
    return quants.quantize(w.astype(np.float32), qtype)


def add_random_tensor(
    w: GGUFWriter, weights: dict[str, np.ndarray], rng: np.random.Generator, name: str,
    shape: tuple[int, ...], qt: Q, *, scale: float = 0.05, offset: float = 0.0,
) -> None:
    """Write a random tensor of type ``qt``; ``weights[name]`` gets what it dequantizes to."""
    data = (rng.standard_normal(shape) * scale + offset).astype(np.float32)
    if len(shape) == 1 or qt == Q.F32:
        raw = data
        weights[name] = data
    elif qt == Q.F16:
        raw = data.astype(np.float16)
        weights[name] = raw.astype(np.float32)
    else:
        raw = encode(data, qt, rng)
        weights[name] = quants.dequantize(raw, qt).reshape(shape).astype(np.float32)
    if raw.dtype == np.uint8:
        w.add_tensor(name, raw, raw_dtype=qt)
    else:
        w.add_tensor(name, raw)


def write_tiny_gguf(
    path: Path,
    *,
    arch: str = "llama",
    qtype: Q = Q.F32,
    tied: bool = True,
    bias: bool = False,
    embd_type: Q | None = None,
    seed: int = 0,
    tokenizer: bool = True,
    matrix_types: dict[str, Q] | None = None,
    name: str | None = None,
    head_dim: int = HEAD_DIM,
    rope_dim: int | None = None,
    qk_norm: bool = False,
    fused: bool = False,
    metadata: Callable[[GGUFWriter], None] | None = None,
    extra_tensors: dict[str, np.ndarray] | None = None,
    layers: int = LAYERS,
) -> dict[str, np.ndarray]:
    """Write a tiny model; returns its weights as the reference sees them (float32).

    ``matrix_types`` overrides the type of some matrices by short name (``"attn_v"``), as
    llama.cpp's mixed files do (Q4_K_M keeps attn_v and ffn_down in Q6_K). ``head_dim`` other
    than hidden/heads is written as ``attention.key_length`` (Qwen 3), ``rope_dim`` as
    ``rope.dimension_count`` (partial rotary, Phi-4-mini); ``qk_norm`` adds
    ``attn_q_norm`` / ``attn_k_norm``; ``fused`` stores q/k/v as one ``attn_qkv`` and gate/up
    as one ``ffn_up`` (Phi-3; the returned weights then hold the fused matrices too);
    ``metadata`` writes more keys; ``extra_tensors`` adds float32 tensors (rope factors)."""
    overrides = matrix_types or {}
    rng = np.random.default_rng(seed)
    tokens, types = gpt2_vocab()
    vocab = len(tokens) + (-len(tokens)) % 32
    tokens += [f"<unused{i}>" for i in range(vocab - len(tokens))]
    types += [5] * (vocab - len(types))
    w = GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(rope_base(arch))
    w.add_layer_norm_rms_eps(1e-5)
    if head_dim != HEAD_DIM:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_rope_dimension_count(rope_dim or head_dim)
    w.add_name(name if name is not None else f"tiny-{arch}")
    if metadata is not None:
        metadata(w)
    if tokenizer:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm" if arch == "llama" else "qwen2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(MERGES)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(False)
        w.add_chat_template(CHAT_TEMPLATE)
    weights: dict[str, np.ndarray] = {}

    def put(
        name: str, shape: tuple[int, ...], qt: Q, scale: float = 0.05, offset: float = 0.0
    ) -> None:
        add_random_tensor(w, weights, rng, name, shape, qt, scale=scale, offset=offset)

    put("token_embd.weight", (vocab, HIDDEN), embd_type or qtype, scale=0.5)
    for i in range(layers):
        p = f"blk.{i}."
        put(p + "attn_norm.weight", (HIDDEN,), Q.F32, 0.1, 1.0)
        put(p + "ffn_norm.weight", (HIDDEN,), Q.F32, 0.1, 1.0)
        q_rows, kv_rows = HEADS * head_dim, KV_HEADS * head_dim
        if fused:
            put(p + "attn_qkv.weight", (q_rows + 2 * kv_rows, HIDDEN), qtype)
        else:
            put(p + "attn_q.weight", (q_rows, HIDDEN), overrides.get("attn_q", qtype))
            put(p + "attn_k.weight", (kv_rows, HIDDEN), overrides.get("attn_k", qtype))
            put(p + "attn_v.weight", (kv_rows, HIDDEN), overrides.get("attn_v", qtype))
        if bias:
            put(p + "attn_q.bias", (q_rows,), Q.F32, 0.1)
            put(p + "attn_k.bias", (kv_rows,), Q.F32, 0.1)
            put(p + "attn_v.bias", (kv_rows,), Q.F32, 0.1)
        if qk_norm:
            put(p + "attn_q_norm.weight", (head_dim,), Q.F32, 0.1, 1.0)
            put(p + "attn_k_norm.weight", (head_dim,), Q.F32, 0.1, 1.0)
        put(p + "attn_output.weight", (HIDDEN, q_rows), overrides.get("attn_output", qtype))
        if fused:
            put(p + "ffn_up.weight", (2 * FFN, HIDDEN), qtype)
        else:
            put(p + "ffn_gate.weight", (FFN, HIDDEN), overrides.get("ffn_gate", qtype))
            put(p + "ffn_up.weight", (FFN, HIDDEN), overrides.get("ffn_up", qtype))
        put(p + "ffn_down.weight", (HIDDEN, FFN), overrides.get("ffn_down", qtype))
    put("output_norm.weight", (HIDDEN,), Q.F32, 0.1, 1.0)
    if not tied:
        put("output.weight", (vocab, HIDDEN), qtype)
    for tensor_name, array in (extra_tensors or {}).items():
        w.add_tensor(tensor_name, np.asarray(array, np.float32))
        weights[tensor_name] = np.asarray(array, np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return weights
