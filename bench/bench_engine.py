"""Engine benchmark: TTFT, decode speed, host overhead and peak memory for one model folder.

    python bench/bench_engine.py MODEL_DIR [--threads N] [--runs 3] [--decode 128]

Prints TTFT for prompts of about 32 / 256 / 1024 tokens, decode tokens/s over 128 greedy
tokens (median of the runs), the per-token time spent outside ``session.run`` (host overhead)
as a share of the step, and peak RSS. When onnxruntime-genai is installed and the folder has a
genai_config.json, runs it on the same prompts with the same thread count (written into a
temporary copy of genai_config.json), in a process of its own, and prints our/its ratios.
Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.engine import Engine
from app.engine.types import GenerationSettings, SamplingSettings
from bench.genai_peer import genai_model

TEXT = (
    "The history of the lighthouse is a story of fire, glass and patience. Keepers trimmed "
    "wicks through long winter nights, polished lenses and logged every passing ship. "
)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class TimedSession:
    """Wraps an InferenceSession to add up the time spent inside run_with_iobinding."""

    def __init__(self, session) -> None:
        self._session = session
        self.durations: list[float] = []

    def run_with_iobinding(self, io, *args):
        start = time.perf_counter()
        self._session.run_with_iobinding(io, *args)
        self.durations.append(time.perf_counter() - start)

    def __getattr__(self, name):
        return getattr(self._session, name)


def prompt_ids(engine: Engine, length: int) -> list[int]:
    ids: list[int] = []
    while len(ids) < length:
        ids += engine.tokenizer.encode(TEXT)
    return ids[:length]


def bench_hearth(engine: Engine, lengths, runs: int, decode: int) -> dict:
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0),
                                  max_new_tokens=decode, stop_strings=())
    timed = TimedSession(engine.decoder.session)
    engine.decoder.session = timed
    results = {}
    for length in lengths:
        ids = prompt_ids(engine, length)
        ttfts, rates, overheads = [], [], []
        for _ in range(runs):
            timed.durations.clear()
            chunks = list(engine.generate(ids, settings, reuse=False))  # from an empty cache
            stats = chunks[-1].stats
            ttfts.append(stats.ttft_ms)
            rates.append(stats.decode_tok_s)
            # Decode phase: from the first token to the end; its session.run calls are the
            # ones after the prefill chunks.
            decode_wall = (stats.total_ms - stats.ttft_ms) / 1000
            prefill_runs = -(-length // engine.decoder.prefill_chunk)
            in_run = sum(timed.durations[prefill_runs:])
            if decode_wall > 0 and len(timed.durations) > prefill_runs:
                overheads.append(max(0.0, 1 - in_run / decode_wall))
        results[length] = {
            "ttft_ms": statistics.median(ttfts),
            "decode_tok_s": statistics.median(rates),
            "host_overhead": statistics.median(overheads) if overheads else float("nan"),
        }
    engine.decoder.session = timed._session
    return results


def bench_genai(model_dir: Path, prompts: dict[int, list[int]], runs: int, decode: int,
                threads: int) -> dict | None:
    with genai_model(model_dir, threads) as model:
        if model is None:
            return None
        import onnxruntime_genai as og

        results = {}
        for length, ids in prompts.items():
            ttfts, rates = [], []
            for _ in range(runs):
                params = og.GeneratorParams(model)
                params.set_search_options(max_length=length + decode, do_sample=False)
                generator = og.Generator(model, params)
                start = time.perf_counter()
                generator.append_tokens(ids)
                generator.generate_next_token()
                first = time.perf_counter()
                count = 1
                while count < decode and not generator.is_done():
                    generator.generate_next_token()
                    count += 1
                end = time.perf_counter()
                ttfts.append((first - start) * 1000)
                rates.append((count - 1) / (end - first))
                del generator
            results[length] = {"ttft_ms": statistics.median(ttfts),
                               "decode_tok_s": statistics.median(rates)}
        return results


def genai_in_own_process(args: argparse.Namespace, prompts: dict[int, list[int]],
                         threads: int) -> dict | None:
    """Run the onnxruntime-genai side in a process of its own: two sessions in one process
    do not run at the same speed (the one created first was measurably slower here)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(prompts, handle)
    try:
        out = subprocess.run(
            [sys.executable, __file__, str(args.model_dir), "--genai-only", handle.name,
             "--runs", str(args.runs), "--decode", str(args.decode), "--threads", str(threads)],
            capture_output=True, text=True, check=False,
        )
    finally:
        os.unlink(handle.name)
    if out.returncode != 0:
        print(f"(onnxruntime-genai run failed: {out.stderr.strip()[-300:]})")
        return None
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {int(k): v for k, v in result.items()} if result else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--lengths", default="32,256,1024")
    parser.add_argument("--provider", default=None)
    parser.add_argument("--genai-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.genai_only:  # child process: onnxruntime-genai alone, prompts from a file
        prompts = {int(k): v for k, v in json.loads(args.genai_only.read_text()).items()}
        result = bench_genai(args.model_dir, prompts, args.runs, args.decode, args.threads)
        print(json.dumps(result))
        return 0

    before = peak_rss_mb()
    start = time.perf_counter()
    engine = Engine.load(args.model_dir, provider=args.provider, threads=args.threads)
    load_s = time.perf_counter() - start
    threads = args.threads or len(os.sched_getaffinity(0))
    print(f"model {engine.spec.name}  path {engine.decode_path}  provider "
          f"{engine.provider_report.summary()}  threads {threads}  load {load_s:.2f}s  "
          f"RSS after load {peak_rss_mb():.0f} MB (before {before:.0f} MB)  "
          f"{engine.huge_pages.summary()}")
    ours = bench_hearth(engine, lengths, args.runs, args.decode)
    print(f"peak RSS {peak_rss_mb():.0f} MB")
    theirs = genai_in_own_process(args, {n: prompt_ids(engine, n) for n in lengths}, threads)
    header = f"{'prompt':>7} {'TTFT ms':>9} {'decode tok/s':>13} {'host overhead':>14}"
    if theirs:
        header += f" {'genai TTFT':>11} {'genai tok/s':>12} {'TTFT ratio':>11} {'tok/s ratio':>12}"
    print(header)
    for length in lengths:
        row = ours[length]
        line = (f"{length:>7} {row['ttft_ms']:>9.1f} {row['decode_tok_s']:>13.1f} "
                f"{row['host_overhead'] * 100:>13.1f}%")
        if theirs:
            other = theirs[length]
            line += (f" {other['ttft_ms']:>11.1f} {other['decode_tok_s']:>12.1f}"
                     f" {row['ttft_ms'] / other['ttft_ms']:>11.2f}"
                     f" {row['decode_tok_s'] / other['decode_tok_s']:>12.2f}")
        print(line)
    if theirs is None:
        print("(onnxruntime-genai not installed or not a genai layout: no comparison)")
    else:
        print("(one pass each, Hearth first: the machine's drift between the passes lands in "
              "the ratios; bench/bench_vs_genai.py alternates and interleaves the two)")
    return 0


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    sys.exit(main())
