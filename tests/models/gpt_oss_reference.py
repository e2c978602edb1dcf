"""A pure-numpy forward pass of gpt-oss, following llama.cpp's ``llm_build_openai_moe_iswa``.

Per layer: RMSNorm (``attn_norm``) → q/k/v with biases → NeoX rotary with YaRN (ggml's
``rope_yarn``: per-dimension angles blended between extrapolated and interpolated ones over
the correction range, not rounded as gpt-oss's config says, cos/sin times
``1 + 0.1·ln(factor)``) → attention with one learned sink
logit per head in each softmax's denominator, a sliding window on even layers → ``o`` with
bias → residual → RMSNorm (``attn_post_norm``) → router (``ffn_gate_inp`` with bias), the
top-k experts by logit weighted by the softmax over just those, each expert
``down((clamp(up, ±7) + 1) · g · σ(1.702·g))`` with ``g = min(gate, 7)`` and biases on all three
projections → residual. Then ``output_norm`` and ``output``.

Independent of ONNX and of Hearth's converter: weights are float32 arrays keyed by GGUF tensor
name as ``gguf.quants.dequantize`` gives them (experts [E, N, K]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tests.models.llama_reference import RefCache, rms_norm


@dataclass
class GptOssConfig:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    n_experts_used: int
    rope_base: float
    rms_eps: float
    sliding_window: int  # even layers: a query sees this many keys, its own included
    yarn_factor: float = 0.0  # 0: plain rotary
    yarn_original_context: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    yarn_truncate: bool = False  # gpt-oss's config: the correction range is not rounded
    sinks: bool = True
    swiglu_limit: float = 7.0
    swiglu_alpha: float = 1.702
    up_offset: float = 1.0  # the "+1" on the clamped up projection
    local_layers: tuple[int, ...] | None = None  # None: the even layers

    def is_local(self, i: int) -> bool:
        return i % 2 == 0 if self.local_layers is None else i in self.local_layers


def yarn_rope(x: np.ndarray, positions: np.ndarray, cfg: GptOssConfig) -> np.ndarray:
    """x [heads, T, head_dim], NeoX halves; the angle of dimension pair i follows ggml."""
    d = cfg.head_dim
    i = np.arange(d // 2, dtype=np.float64)
    theta_extrap = positions[:, None] * cfg.rope_base ** (-2.0 * i / d)[None, :]
    mscale = 1.0
    theta = theta_extrap
    if cfg.yarn_factor:
        def corr(rot: float) -> float:
            n = cfg.yarn_original_context / (rot * 2 * np.pi)
            return d * np.log(n) / (2 * np.log(cfg.rope_base))

        lo, hi = corr(cfg.beta_fast), corr(cfg.beta_slow)
        if cfg.yarn_truncate:  # llama.cpp's ggml_rope_yarn_corr_dims
            lo, hi = np.floor(lo), np.ceil(hi)
        lo, hi = max(0.0, lo), min(d - 1.0, hi)
        y = (i - lo) / max(0.001, hi - lo)
        ramp = 1 - np.minimum(1, np.maximum(0, y))
        theta_interp = theta_extrap / cfg.yarn_factor
        theta = theta_interp * (1 - ramp) + theta_extrap * ramp
        mscale = 1.0 + 0.1 * np.log(cfg.yarn_factor)
    cos, sin = np.cos(theta) * mscale, np.sin(theta) * mscale
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def experts(w: dict[str, np.ndarray], cfg: GptOssConfig, p: str, h: np.ndarray) -> np.ndarray:
    logits = h @ w[p + "ffn_gate_inp.weight"].T + w[p + "ffn_gate_inp.bias"]
    out = np.zeros_like(h)
    lim = cfg.swiglu_limit
    for t in range(len(h)):
        top = np.argsort(-logits[t], kind="stable")[: cfg.n_experts_used]
        sel = logits[t, top]
        weights = np.exp(sel - sel.max())
        weights /= weights.sum()
        for e, weight in zip(top, weights, strict=True):
            g = w[p + "ffn_gate_exps.weight"][e] @ h[t] + w[p + "ffn_gate_exps.bias"][e]
            u = w[p + "ffn_up_exps.weight"][e] @ h[t] + w[p + "ffn_up_exps.bias"][e]
            g = np.minimum(g, lim)
            u = np.clip(u, -lim, lim)
            act = g / (1 + np.exp(-cfg.swiglu_alpha * g)) * (u + cfg.up_offset)
            y = w[p + "ffn_down_exps.weight"][e] @ act + w[p + "ffn_down_exps.bias"][e]
            out[t] += weight * y
    return out


def forward(
    w: dict[str, np.ndarray], cfg: GptOssConfig, ids: list[int], cache: RefCache
) -> np.ndarray:
    """Run ``ids`` after the cached tokens; returns logits for every new position [T, V]."""
    past, t = cache.length, len(ids)
    pos = np.arange(past, past + t, dtype=np.float64)
    x = w["token_embd.weight"][np.array(ids)].astype(np.float64)
    group = cfg.n_heads // cfg.n_kv_heads
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        h = rms_norm(x, w[p + "attn_norm.weight"], cfg.rms_eps)

        def proj(name: str, n_heads: int, h=h, p=p) -> np.ndarray:
            out = h @ w[p + name + ".weight"].T.astype(np.float64) + w[p + name + ".bias"]
            return out.reshape(t, n_heads, cfg.head_dim).transpose(1, 0, 2)

        q = yarn_rope(proj("attn_q", cfg.n_heads), pos, cfg)
        k = yarn_rope(proj("attn_k", cfg.n_kv_heads), pos, cfg)
        v = proj("attn_v", cfg.n_kv_heads)
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
        if cfg.is_local(i):
            qpos = np.arange(past, total)[:, None]
            mask[qpos - np.arange(total)[None, :] >= cfg.sliding_window] = -np.inf
        sinks = w[p + "attn_sinks.weight"] if cfg.sinks else None
        heads = []
        for hd in range(cfg.n_heads):
            kv = hd // group
            s = q[hd] @ k[kv].T / np.sqrt(cfg.head_dim) + mask
            m = s.max(axis=-1, keepdims=True)
            if sinks is not None:
                m = np.maximum(m, sinks[hd])
            e = np.exp(s - m)
            den = e.sum(axis=-1, keepdims=True)
            if sinks is not None:
                den = den + np.exp(sinks[hd] - m)
            heads.append((e / den) @ v[kv])
        attn = np.stack(heads, axis=1).reshape(t, cfg.n_heads * cfg.head_dim)
        x = x + attn @ w[p + "attn_output.weight"].T + w[p + "attn_output.bias"]
        h = rms_norm(x, w[p + "attn_post_norm.weight"], cfg.rms_eps)
        x = x + experts(w, cfg, p, h)
    x = rms_norm(x, w["output_norm.weight"], cfg.rms_eps)
    return (x @ w["output.weight"].T).astype(np.float32)


def greedy(w: dict, cfg: GptOssConfig, prompt: list[int], max_new: int) -> list[int]:
    cache = RefCache()
    logits = forward(w, cfg, prompt, cache)[-1]
    out: list[int] = []
    for _ in range(max_new):
        out.append(int(np.argmax(logits)))
        logits = forward(w, cfg, [out[-1]], cache)[-1]
    return out


def run_steps(w: dict, cfg: GptOssConfig, prompt: list[int], steps: list[list[int]]) -> list:
    cache = RefCache()
    return [forward(w, cfg, ids, cache)[-1] for ids in [prompt, *steps]]
