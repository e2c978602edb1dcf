"""An independent numpy BERT sentence encoder (the reference for the ONNX graph): read the
safetensors with numpy, run embeddings → 6 × (attention, FFN) → mean pooling → L2 norm in
float64, written from the BERT paper's equations, not from app/documents/bert_graph.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def load(folder: Path) -> tuple[dict, dict[str, np.ndarray]]:
    data = (folder / "model.safetensors").read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    kinds = {"F32": np.float32, "I64": np.int64}
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], kinds[info["dtype"]]).reshape(
            info["shape"]).astype(np.float64)
    return json.loads((folder / "config.json").read_text()), tensors


def _layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def encode(cfg: dict, t: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """One text's sentence embedding ([hidden], unit length)."""
    eps = cfg["layer_norm_eps"]
    heads = cfg["num_attention_heads"]
    n = len(ids)
    x = (t["embeddings.word_embeddings.weight"][ids]
         + t["embeddings.position_embeddings.weight"][:n]
         + t["embeddings.token_type_embeddings.weight"][0])
    x = _layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
    d = x.shape[1] // heads
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def lin(v, name, p=p):
            return v @ t[p + name + ".weight"].T + t[p + name + ".bias"]

        q, k, v = (lin(x, f"attention.self.{m}").reshape(n, heads, d).transpose(1, 0, 2)
                   for m in ("query", "key", "value"))
        a = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        ctx = (a @ v).transpose(1, 0, 2).reshape(n, heads * d)
        x = _layer_norm(x + lin(ctx, "attention.output.dense"),
                        t[p + "attention.output.LayerNorm.weight"],
                        t[p + "attention.output.LayerNorm.bias"], eps)
        h = _gelu(lin(x, "intermediate.dense"))
        x = _layer_norm(x + lin(h, "output.dense"), t[p + "output.LayerNorm.weight"],
                        t[p + "output.LayerNorm.bias"], eps)
    mean = x.mean(0)
    return mean / np.linalg.norm(mean)
