"""A pure-numpy forward pass of the Llama family, following llama.cpp's semantics.

Covers llama / Mistral / Qwen 2 and, by switches, Qwen 3 (per-head q/k RMSNorm before
rotary: llama.cpp's ``llm_build_qwen3``) and Phi-3 (fused ``attn_qkv`` and ``ffn_up``, gate
rows first; LongRoPE factors chosen once by the loaded context, as llama.cpp does; partial
rotary), a sliding window on every layer, SmolLM3 (no rotary on some layers: llama.cpp's
``use_rope``) and Granite (embedding, residual, attention and logit multipliers: llama.cpp's
``llm_build_granite``).

Independent of ONNX: used only by tests to check converted graphs. Weights are float32
[N, K] matrices keyed by GGUF tensor name (as ``gguf.quants.dequantize`` gives them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RefConfig:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_base: float
    rms_eps: float
    rope_interleaved: bool  # llama: adjacent pairs; qwen2: halves (NeoX)
    freq_factors: np.ndarray | None = None  # Llama 3 rope scaling: per-frequency divisors
    rope_scale_linear: float = 1.0  # linear rope scaling: positions are divided by this
    qk_norm: bool = False  # Qwen 3: RMSNorm of each q/k head (attn_q_norm/attn_k_norm)
    rope_dim: int = 0  # rotated dimensions per head (the first ones); 0: all
    # LongRoPE: the long factors at every position when the loaded context exceeds
    # original_context, the short ones otherwise (llama.cpp's get_rope_factors)
    short_factors: np.ndarray | None = None
    long_factors: np.ndarray | None = None
    original_context: int = 0
    context_length: int = 0  # the context the model is loaded with
    attn_factor: float = 1.0  # LongRoPE: cos and sin are multiplied by this
    sliding_window: int = 0  # > 0: a query sees this many keys, its own included
    nope_layers: tuple[int, ...] = ()  # layers whose q and k are not rotated
    embed_scale: float = 1.0  # token embeddings times this
    residual_scale: float = 1.0  # each block's attention and MLP output times this
    attn_scale: float = 0.0  # scores times this; 0: 1/sqrt(head_dim)
    logit_scale: float = 1.0  # logits divided by this
    # K and V rounded to float16 as they are stored, then read back: llama.cpp's default F16
    # cache, which the default conversion keeps; False: float32 (``kv_cache="float32"``, the
    # GroupQueryAttention form)
    kv_half: bool = False


@dataclass
class RefCache:
    keys: list[np.ndarray] = field(default_factory=list)  # per layer [kv_heads, T, head_dim]
    values: list[np.ndarray] = field(default_factory=list)

    @property
    def length(self) -> int:
        return 0 if not self.keys else self.keys[0].shape[1]


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w


def rope(
    x: np.ndarray, positions: np.ndarray, cfg: RefConfig, factors: np.ndarray | None = None
) -> np.ndarray:
    """x: [heads, T, head_dim]; rotates the first ``rope_dim`` dimensions. ``factors``
    (LongRoPE's, chosen by the caller) divide the frequencies like ``freq_factors``."""
    d = cfg.rope_dim or cfg.head_dim
    inv = 1.0 / cfg.rope_base ** (np.arange(0, d // 2) * 2.0 / d)
    if cfg.freq_factors is not None:
        inv = inv / cfg.freq_factors[: d // 2]
    if factors is not None:
        inv = inv / factors.astype(np.float64)
    ang = (positions[:, None] / cfg.rope_scale_linear) * inv[None, :]
    cos, sin = np.cos(ang) * cfg.attn_factor, np.sin(ang) * cfg.attn_factor
    rot, rest = x[..., :d], x[..., d:]
    if cfg.rope_interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = np.empty_like(rot)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
    else:
        a, b = rot[..., : d // 2], rot[..., d // 2 :]
        out = np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    return np.concatenate([out, rest], axis=-1)


def longrope_factors(cfg: RefConfig) -> np.ndarray | None:
    """The LongRoPE factors of every position of a model loaded with ``cfg.context_length``
    (whatever the length of the run)."""
    if cfg.short_factors is None:
        return None
    return cfg.long_factors if cfg.context_length > cfg.original_context else cfg.short_factors


def split_fused(w: dict[str, np.ndarray], cfg: RefConfig, layer: int) -> dict[str, np.ndarray]:
    """Layer ``layer``'s q/k/v and gate/up matrices, cut out of Phi-3's fused ones."""
    p = f"blk.{layer}."
    out = {}
    if p + "attn_qkv.weight" in w:
        qkv = w[p + "attn_qkv.weight"]
        q_rows, kv_rows = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        out[p + "attn_q.weight"] = qkv[:q_rows]
        out[p + "attn_k.weight"] = qkv[q_rows : q_rows + kv_rows]
        out[p + "attn_v.weight"] = qkv[q_rows + kv_rows :]
    if p + "ffn_gate.weight" not in w:
        up = w[p + "ffn_up.weight"]
        half = up.shape[0] // 2
        out[p + "ffn_gate.weight"], out[p + "ffn_up.weight"] = up[:half], up[half:]
    return out


def forward(
    w: dict[str, np.ndarray], cfg: RefConfig, ids: list[int], cache: RefCache
) -> np.ndarray:
    """Run ``ids`` after the cached tokens; returns logits for every new position [T, V]."""
    past = cache.length
    t = len(ids)
    pos = np.arange(past, past + t, dtype=np.float64)
    x = w["token_embd.weight"][np.array(ids)].astype(np.float64) * cfg.embed_scale
    scale = cfg.attn_scale or 1 / np.sqrt(cfg.head_dim)
    group = cfg.n_heads // cfg.n_kv_heads
    factors = longrope_factors(cfg)
    all_w = w
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        w = {**all_w, **split_fused(all_w, cfg, i)}
        h = rms_norm(x, w[p + "attn_norm.weight"], cfg.rms_eps)

        def proj(name: str, h=h, p=p, w=w) -> np.ndarray:
            out = h @ w[p + name + ".weight"].T.astype(np.float64)
            bias = w.get(p + name + ".bias")
            return out if bias is None else out + bias

        q = proj("attn_q").reshape(t, cfg.n_heads, cfg.head_dim)
        k = proj("attn_k").reshape(t, cfg.n_kv_heads, cfg.head_dim)
        if cfg.qk_norm:  # per head, before rotary (llama.cpp's qwen3 graph)
            q = rms_norm(q, w[p + "attn_q_norm.weight"], cfg.rms_eps)
            k = rms_norm(k, w[p + "attn_k_norm.weight"], cfg.rms_eps)
        q, k = q.transpose(1, 0, 2), k.transpose(1, 0, 2)
        v = proj("attn_v").reshape(t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 0, 2)
        if i not in cfg.nope_layers:
            q, k = rope(q, pos, cfg, factors), rope(k, pos, cfg, factors)
        if cfg.kv_half:
            k, v = (x.astype(np.float32).astype(np.float16).astype(np.float64) for x in (k, v))
        if past:
            k = np.concatenate([cache.keys[i], k], axis=1)
            v = np.concatenate([cache.values[i], v], axis=1)
        if len(cache.keys) > i:
            cache.keys[i], cache.values[i] = k, v
        else:
            cache.keys.append(k)
            cache.values.append(v)
        total = past + t
        mask = np.triu(np.full((t, total), -np.inf), k=past + 1)
        if cfg.sliding_window:  # key j hidden from query i when i - j >= window
            qpos = np.arange(past, total)[:, None]
            mask[qpos - np.arange(total)[None, :] >= cfg.sliding_window] = -np.inf
        heads = []
        for hd in range(cfg.n_heads):
            kv = hd // group
            s = q[hd] @ k[kv].T * scale + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            heads.append(s @ v[kv])
        attn = np.stack(heads, axis=1).reshape(t, cfg.n_heads * cfg.head_dim)
        x = x + attn @ w[p + "attn_output.weight"].T * cfg.residual_scale
        h = rms_norm(x, w[p + "ffn_norm.weight"], cfg.rms_eps)
        gate = h @ w[p + "ffn_gate.weight"].T
        up = h @ w[p + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T * cfg.residual_scale
    w = all_w
    x = rms_norm(x, w["output_norm.weight"], cfg.rms_eps)
    head = w.get("output.weight", w["token_embd.weight"])
    return (x @ head.T / cfg.logit_scale).astype(np.float32)


def greedy(w: dict[str, np.ndarray], cfg: RefConfig, prompt: list[int], max_new: int) -> list[int]:
    """Greedy decoding with the reference: the prompt, then one cached token at a time."""
    cache = RefCache()
    logits = forward(w, cfg, prompt, cache)[-1]
    out: list[int] = []
    for _ in range(max_new):
        out.append(int(np.argmax(logits)))
        logits = forward(w, cfg, [out[-1]], cache)[-1]
    return out


def run_steps(
    w: dict[str, np.ndarray], cfg: RefConfig, prompt: list[int], steps: list[list[int]]
) -> list[np.ndarray]:
    """Last-position logits after the prompt and after each cached step."""
    cache = RefCache()
    return [forward(w, cfg, ids, cache)[-1] for ids in [prompt, *steps]]
