"""Micro-benchmark: microseconds per sampled token for 49k and 152k vocabularies.

Prints figures only (never asserts on time). Run: ``python bench/bench_sampling.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.sampling import make_sampler
from app.engine.types import SamplingSettings

VOCABS = (49_152, 151_936)
CASES = {
    "greedy": SamplingSettings(temperature=0.0),
    "temperature only": SamplingSettings(temperature=0.7),
    "top_k=40": SamplingSettings(temperature=0.7, top_k=40),
    "top_p=0.9": SamplingSettings(temperature=0.7, top_p=0.9),
    "min_p=0.05": SamplingSettings(temperature=0.7, min_p=0.05),
    "top_k=40 top_p=0.9 min_p=0.05": SamplingSettings(temperature=0.7, top_k=40, top_p=0.9,
                                                       min_p=0.05),
    "top_k=40 top_p=0.9 + penalties": SamplingSettings(
        temperature=0.7, top_k=40, top_p=0.9, repetition_penalty=1.1, presence_penalty=0.3,
        frequency_penalty=0.2),
}
ROWS = 64
STEPS = 400


def bench(vocab: int, settings: SamplingSettings, peak: float = 14.0) -> float:
    rng = np.random.default_rng(0)
    # A chat model's logits: a long tail of unlikely tokens and a few strong candidates
    # (peak=14 puts ~60-90 % of the mass on them). peak=8 is a much flatter distribution,
    # where the top-p nucleus spans most of the vocabulary.
    rows = (rng.standard_normal((ROWS, vocab)) * 2.0).astype(np.float32)
    rows[:, rng.integers(0, vocab, 20)] += peak
    sampler = make_sampler(settings)
    history = rng.integers(0, vocab, 500).tolist()  # a prompt the penalties look at
    for i in range(20):  # warm up
        history.append(sampler(rows[i % ROWS], history))
    start = time.perf_counter()
    for i in range(STEPS):
        history.append(sampler(rows[i % ROWS], history))
    return (time.perf_counter() - start) / STEPS * 1e6


def main() -> None:
    width = max(len(name) for name in CASES)
    print(f"{'settings':<{width}}  " + "  ".join(f"{v:>10,}" for v in VOCABS))
    for name, settings in CASES.items():
        figures = "  ".join(f"{bench(v, settings):8.0f}us" for v in VOCABS)
        print(f"{name:<{width}}  {figures}")
    flat = SamplingSettings(temperature=0.7, top_p=0.9)
    figures = "  ".join(f"{bench(v, flat, peak=8.0):8.0f}us" for v in VOCABS)
    print(f"{'top_p=0.9, flat logits (worst)':<{width}}  {figures}")


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    main()
