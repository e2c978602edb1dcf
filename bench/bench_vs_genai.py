"""Decode speed against onnxruntime-genai on the same model folder, measured two ways.

    python bench/bench_vs_genai.py MODEL_DIR [--threads 2] [--prompt 32] [--decode 128]
                                   [--rounds 12] [--paired 4] [--blocks 6]
                                   [--huge-pages product|both|neither]

On a shared machine the speed drifts by ±10 % within a minute, more than the difference being
measured, so one run of each side tells little. This script prints:

- **separate processes** (``--rounds``; decode tokens/s and TTFT): each round starts a fresh
  process for Hearth and one for onnxruntime-genai, in alternating order; each loads only its
  own engine, warms up with one decode and then decodes ``--reps`` times. The ratio is taken
  per round, then the median over rounds.
- **one process, interleaved** (``--paired``): each process loads both (creation order
  alternating between processes) and decodes in alternating blocks, so each Hearth block has a
  genai block seconds away from it. Drift cancels out; what differs between the two sides is
  only the engine (note that onnxruntime-genai runs ORT's shared library, the Python package
  its own statically linked copy).

``--huge-pages`` (Linux): ``product`` compares what ships: Hearth's ``Engine.load`` moves the
weights onto transparent huge pages, onnxruntime-genai leaves them on 4 KiB pages. ``both`` gives
the genai process the same treatment after it loads, ``neither`` turns it off for Hearth: these
two compare the engines on equal memory. In the interleaved mode both engines share one
process, and whichever loads second has its weights collapsed by Hearth's load only if it came
first, so read that mode with ``both`` or ``neither``.

Greedy, the same prompt ids, ``intra_op_num_threads`` equal (written into a temporary
genai_config.json for onnxruntime-genai). Hearth runs its full product path (``Engine.generate``:
sampler, streaming detokenizer, stop checks, chunks). Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.genai_peer import genai_model


def prompt_ids(length: int) -> list[int]:
    """Token ids that exist in any vocabulary of ≥ 40k entries, the same for both sides."""
    return [(i * 7919) % 40000 + 100 for i in range(length)]


class HearthSide:
    def __init__(self, model_dir: Path, threads: int, prompt: int, decode: int,
                 huge_pages: bool = True) -> None:
        from app.engine.engine import Engine
        from app.engine.types import GenerationSettings, SamplingSettings

        self.engine = Engine.load(model_dir, threads=threads, huge_pages=huge_pages)
        self.ids = prompt_ids(prompt)
        self.settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0),
                                           max_new_tokens=decode, stop_strings=())

    def measure(self) -> tuple[float, float]:
        """(decode tokens/s, TTFT ms) of one greedy generation from an empty cache."""
        *_, last = self.engine.generate(self.ids, self.settings, reuse=False)  # empty cache
        return last.stats.decode_tok_s, last.stats.ttft_ms


class GenaiSide:
    def __init__(self, model, prompt: int, decode: int, huge_pages: bool = False) -> None:
        self.model, self.ids, self.decode = model, prompt_ids(prompt), decode
        if huge_pages:  # the same treatment Engine.load gives Hearth's weights
            from app.engine.huge_pages import back_with_huge_pages

            back_with_huge_pages()

    def measure(self) -> tuple[float, float]:
        """(decode tokens/s, TTFT ms); TTFT includes the generator's KV allocation, as
        Hearth's includes its cache growth."""
        import onnxruntime_genai as og

        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=len(self.ids) + self.decode, do_sample=False)
        begin = time.perf_counter()
        generator = og.Generator(self.model, params)
        generator.append_tokens(self.ids)
        generator.generate_next_token()
        start, count = time.perf_counter(), 1
        ttft_ms = (start - begin) * 1000
        while count < self.decode and not generator.is_done():
            generator.generate_next_token()
            count += 1
        return (count - 1) / (time.perf_counter() - start), ttft_ms


def child(args: argparse.Namespace) -> dict:
    """One process: ``--child hearth|genai|paired-hearth-first|paired-genai-first``.

    A ``hearth`` process never loads onnxruntime-genai and a ``genai`` one never loads Hearth."""
    hearth_pages, genai_pages = args.huge_pages != "neither", args.huge_pages == "both"
    if args.child == "hearth":
        return warm_rates(HearthSide(args.model_dir, args.threads, args.prompt, args.decode,
                                     hearth_pages), args.reps)
    with genai_model(args.model_dir, args.threads) as model:
        if model is None:
            return {"error": "onnxruntime-genai is not installed or the folder has no "
                             "genai_config.json"}
        if args.child == "genai":
            return warm_rates(GenaiSide(model, args.prompt, args.decode, genai_pages), args.reps)
        order = ("hearth", "genai") if args.child == "paired-hearth-first" else ("genai", "hearth")
        sides = {}
        for name in order:
            sides[name] = (
                HearthSide(args.model_dir, args.threads, args.prompt, args.decode, hearth_pages)
                if name == "hearth" else GenaiSide(model, args.prompt, args.decode, genai_pages)
            )
        for side in sides.values():
            side.measure()  # warm-up
        pairs = []
        for block in range(args.blocks):
            names = order if block % 2 == 0 else order[::-1]
            rates = {name: sides[name].measure()[0] for name in names}
            pairs.append([rates["hearth"], rates["genai"]])
        return {"pairs": pairs}


def warm_rates(side: HearthSide | GenaiSide, reps: int) -> dict[str, list[float]]:
    side.measure()  # warm-up: first-run allocations, page faults
    runs = [side.measure() for _ in range(reps)]
    return {"rates": [rate for rate, _ in runs], "ttfts": [ttft for _, ttft in runs]}


def run_child(args: argparse.Namespace, role: str) -> dict:
    command = [sys.executable, __file__, str(args.model_dir), "--child", role,
               "--threads", str(args.threads), "--prompt", str(args.prompt),
               "--decode", str(args.decode), "--reps", str(args.reps),
               "--blocks", str(args.blocks), "--huge-pages", args.huge_pages]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{role} process failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if "error" in result:
        raise SystemExit(result["error"])
    return result


def summary(label: str, hearth: list[float], genai: list[float]) -> None:
    ratios = [h / g for h, g in zip(hearth, genai, strict=True)]
    print(f"{label}: Hearth {statistics.median(hearth):.1f} tok/s, onnxruntime-genai "
          f"{statistics.median(genai):.1f} tok/s; ratio median {statistics.median(ratios):.3f}, "
          f"mean {statistics.mean(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}, "
          f"Hearth ahead in {sum(r >= 1 for r in ratios)}/{len(ratios)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3, help="decodes per separate process")
    parser.add_argument("--rounds", type=int, default=12, help="separate-process rounds")
    parser.add_argument("--paired", type=int, default=4, help="processes running both")
    parser.add_argument("--blocks", type=int, default=6, help="interleaved blocks per process")
    parser.add_argument("--huge-pages", choices=("product", "both", "neither"),
                        default="product",
                        help="product: as shipped (Hearth moves its weights onto huge pages, "
                             "onnxruntime-genai does not); both / neither: equal memory")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0

    print(f"model {args.model_dir.name}, {args.threads} threads, prompt {args.prompt} tokens, "
          f"{args.decode} greedy tokens, huge pages: {args.huge_pages}")
    hearth, genai, hearth_ttft, genai_ttft = [], [], [], []
    for round_ in range(args.rounds):
        order = ("hearth", "genai") if round_ % 2 == 0 else ("genai", "hearth")
        got = {role: run_child(args, role) for role in order}
        rates = {role: statistics.median(result["rates"]) for role, result in got.items()}
        ttfts = {role: statistics.median(result["ttfts"]) for role, result in got.items()}
        hearth.append(rates["hearth"])
        genai.append(rates["genai"])
        hearth_ttft.append(ttfts["hearth"])
        genai_ttft.append(ttfts["genai"])
        print(f"  round {round_ + 1}: Hearth {rates['hearth']:.1f}, genai {rates['genai']:.1f}, "
              f"ratio {rates['hearth'] / rates['genai']:.3f}; TTFT {ttfts['hearth']:.1f} / "
              f"{ttfts['genai']:.1f} ms", flush=True)
    if args.rounds:
        summary("separate processes", hearth, genai)
        ratios = [h / g for h, g in zip(hearth_ttft, genai_ttft, strict=True)]
        print(f"TTFT, separate processes: Hearth {statistics.median(hearth_ttft):.1f} ms, "
              f"onnxruntime-genai {statistics.median(genai_ttft):.1f} ms; ratio median "
              f"{statistics.median(ratios):.3f} (lower is better), Hearth faster in "
              f"{sum(r <= 1 for r in ratios)}/{len(ratios)}")
    pairs: list[list[float]] = []
    for process in range(args.paired):
        role = "paired-hearth-first" if process % 2 == 0 else "paired-genai-first"
        got = run_child(args, role)["pairs"]
        pairs += got
        ratios = " ".join(f"{h / g:.3f}" for h, g in got)
        print(f"  process {process + 1} ({role[7:]}): ratios {ratios}", flush=True)
    if pairs:
        summary("one process, interleaved", [h for h, _ in pairs], [g for _, g in pairs])
    return 0


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    sys.exit(main())
