"""A pure-numpy forward pass of the Llama family, following llama.cpp's semantics.

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


def rope(x: np.ndarray, positions: np.ndarray, cfg: RefConfig) -> np.ndarray:
    """x: [heads, T, head_dim]."""
    d = cfg.head_dim
    inv = 1.0 / cfg.rope_base ** (np.arange(0, d // 2) * 2.0 / d)
    if cfg.freq_factors is not None:
        inv = inv / cfg.freq_factors[: d // 2]
    ang = (positions[:, None] / cfg.rope_scale_linear) * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    if cfg.rope_interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def forward(
    w: dict[str, np.ndarray], cfg: RefConfig, ids: list[int], cache: RefCache
) -> np.ndarray:
    """Run ``ids`` after the cached tokens; returns logits for every new position [T, V]."""
    past = cache.length
    t = len(ids)
    pos = np.arange(past, past + t, dtype=np.float64)
    x = w["token_embd.weight"][np.array(ids)].astype(np.float64)
    group = cfg.n_heads // cfg.n_kv_heads
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        h = rms_norm(x, w[p + "attn_norm.weight"], cfg.rms_eps)

        def proj(name: str, h=h, p=p) -> np.ndarray:
            out = h @ w[p + name + ".weight"].T.astype(np.float64)
            bias = w.get(p + name + ".bias")
            return out if bias is None else out + bias

        q = proj("attn_q").reshape(t, cfg.n_heads, cfg.head_dim).transpose(1, 0, 2)
        k = proj("attn_k").reshape(t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 0, 2)
        v = proj("attn_v").reshape(t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 0, 2)
        q, k = rope(q, pos, cfg), rope(k, pos, cfg)
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
        heads = []
        for hd in range(cfg.n_heads):
            kv = hd // group
            s = q[hd] @ k[kv].T / np.sqrt(cfg.head_dim) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            heads.append(s @ v[kv])
        attn = np.stack(heads, axis=1).reshape(t, cfg.n_heads * cfg.head_dim)
        x = x + attn @ w[p + "attn_output.weight"].T
        h = rms_norm(x, w[p + "ffn_norm.weight"], cfg.rms_eps)
        gate = h @ w[p + "ffn_gate.weight"].T
        up = h @ w[p + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
    x = rms_norm(x, w["output_norm.weight"], cfg.rms_eps)
    head = w.get("output.weight", w["token_embd.weight"])
    return (x @ head.T).astype(np.float32)
