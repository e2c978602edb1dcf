"""A pure-numpy forward pass of Gemma 3 (text), following llama.cpp's ``llm_build_gemma3``.

Independent of ONNX: used only by tests. Weights are float32 [N, K] matrices keyed by GGUF
tensor name; norm weights are used as stored (llama.cpp's converter already added Gemma's +1).
Float64 throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tests.models.llama_reference import RefCache, rms_norm


@dataclass
class Gemma3Config:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden: int
    rope_base: float  # global layers
    rms_eps: float
    sliding_window: int  # keys a local query sees, its own included (llama.cpp, HF)
    rope_base_local: float = 10000.0
    swa_pattern: int = 6  # layer i is local when i % pattern < pattern - 1
    final_logit_softcap: float = 0.0

    def is_local(self, layer: int) -> bool:
        return layer % self.swa_pattern < self.swa_pattern - 1


def rope_neox(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """x: [heads, T, head_dim]; rotates the two halves (NeoX style)."""
    d = x.shape[-1]
    inv = 1.0 / base ** (np.arange(0, d // 2) * 2.0 / d)
    ang = positions[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def attention_mask(past: int, t: int, window: int | None) -> np.ndarray:
    """Additive mask [t, past + t]: causal, and key j hidden from query i when
    i - j >= window (positions)."""
    q = np.arange(past, past + t)[:, None]
    k = np.arange(past + t)[None, :]
    hidden = k > q
    if window is not None:
        hidden |= q - k >= window
    return np.where(hidden, -np.inf, 0.0)


def forward(
    w: dict[str, np.ndarray],
    cfg: Gemma3Config,
    ids: list[int],
    cache: RefCache,
    *,
    ignore_window: bool = False,
) -> np.ndarray:
    """Run ``ids`` after the cached tokens; returns logits for every new position [T, V]."""
    past = cache.length
    t = len(ids)
    pos = np.arange(past, past + t, dtype=np.float64)
    x = w["token_embd.weight"][np.array(ids)].astype(np.float64) * np.sqrt(np.float32(cfg.hidden))
    group = cfg.n_heads // cfg.n_kv_heads
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        local = cfg.is_local(i)
        base = cfg.rope_base_local if local else cfg.rope_base
        h = rms_norm(x, w[p + "attn_norm.weight"], cfg.rms_eps)
        q = (h @ w[p + "attn_q.weight"].T).reshape(t, cfg.n_heads, cfg.head_dim)
        k = (h @ w[p + "attn_k.weight"].T).reshape(t, cfg.n_kv_heads, cfg.head_dim)
        v = (h @ w[p + "attn_v.weight"].T).reshape(t, cfg.n_kv_heads, cfg.head_dim)
        q = rms_norm(q, w[p + "attn_q_norm.weight"], cfg.rms_eps).transpose(1, 0, 2)
        k = rms_norm(k, w[p + "attn_k_norm.weight"], cfg.rms_eps).transpose(1, 0, 2)
        v = v.transpose(1, 0, 2)
        q, k = rope_neox(q, pos, base), rope_neox(k, pos, base)
        if past:
            k = np.concatenate([cache.keys[i], k], axis=1)
            v = np.concatenate([cache.values[i], v], axis=1)
        if len(cache.keys) > i:
            cache.keys[i], cache.values[i] = k, v
        else:
            cache.keys.append(k)
            cache.values.append(v)
        window = cfg.sliding_window if local and not ignore_window else None
        mask = attention_mask(past, t, window)
        heads = []
        for hd in range(cfg.n_heads):
            kv = hd // group
            s = q[hd] @ k[kv].T / np.sqrt(cfg.head_dim) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            heads.append(s @ v[kv])
        attn = np.stack(heads, axis=1).reshape(t, cfg.n_heads * cfg.head_dim)
        o = attn @ w[p + "attn_output.weight"].T
        x = x + rms_norm(o, w[p + "post_attention_norm.weight"], cfg.rms_eps)
        h = rms_norm(x, w[p + "ffn_norm.weight"], cfg.rms_eps)
        gate = h @ w[p + "ffn_gate.weight"].T
        up = h @ w[p + "ffn_up.weight"].T
        down = (gelu_tanh(gate) * up) @ w[p + "ffn_down.weight"].T
        x = x + rms_norm(down, w[p + "post_ffw_norm.weight"], cfg.rms_eps)
    x = rms_norm(x, w["output_norm.weight"], cfg.rms_eps)
    logits = x @ w.get("output.weight", w["token_embd.weight"]).T
    if cfg.final_logit_softcap:
        c = cfg.final_logit_softcap
        logits = c * np.tanh(logits / c)
    return logits.astype(np.float32)
