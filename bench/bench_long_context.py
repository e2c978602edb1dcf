"""Long-context decode and prefill through Hearth's own decoder (the app's exact path).

    HEARTH_HOME=/tmp/h .venv/bin/python -m app setup-starter      # converts the starter once
    .venv/bin/python bench/bench_long_context.py [MODEL_DIR]
        [--contexts 1024,2048,4096,8192] [--decode 64] [--threads 2] [--profile] [--gguf FILE]
        [--attention] [--by-node N]

The model is loaded as the app loads it: exact by default, with the prompt session the app
would open (``Engine.load``'s own choice, ``plan_prompt_session``; printed with its reason).
For each context length: a fresh cache, the prompt fed as the app feeds it (``Decoder.feed``,
512-token chunks; TTFT = that time, calibration excluded — it ran at load), then ``--decode``
greedy one-token steps (``Decoder.step`` with the rows ``choose_rows`` picks, as every reply
does). llama.cpp runs the same prompt ids on the GGUF the folder came from when ``llama_cpp``
is importable (F16 KV, its default; in a child process, bench/llama_peer.py). ``--profile``
adds the share of decode-step kernel time per operator type at each length (ORT profiling on
a second session; prefill excluded); ``--by-node N`` adds its N costliest nodes, summed over
the layers, with their input shapes (which Reshape, which MatMul reads how much).
``--attention`` runs instead the one-layer attention micro-benchmark
(bench/attention_layouts.py: GroupQueryAttention over a shared buffer against grouped
formulations, at these past lengths, for the starter's shape and a 7B-like one).

Prints the load average beside each figure: the machine may be shared. Never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.decoder import Decoder
from app.engine.engine import Engine
from bench.decode_profile import profile_decode_steps
from bench.llama_peer import available, describe, run_llama_cpp

TEXT = (
    "The history of bread is the history of people settling down, trading grain and "
    "learning to bake. Every village kept its own recipes, and travellers carried them on. "
)


def load_average() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def prompt_ids(engine: Engine, n: int) -> list[int]:
    ids = engine.tokenizer.encode(TEXT * (n // 20 + 2))
    while len(ids) < n:
        ids = ids + ids
    return list(ids[:n])


def run_hearth(decoder: Decoder, ids: list[int], decode: int) -> tuple[float, float]:
    """(TTFT ms, decode tok/s) for ``ids`` then ``decode`` greedy steps on a fresh cache."""
    cache = decoder.new_cache()
    decoder.choose_rows(pairs=False)
    t0 = time.perf_counter()
    tok = int(np.argmax(decoder.feed(cache, ids)))
    ttft = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(decode):
        tok = int(np.argmax(decoder.step(cache, tok)))
    return ttft * 1000, decode / (time.perf_counter() - t1)


def profile_shares(engine: Engine, threads: int, ids: list[int], decode: int):
    """For decode steps after ``ids``: [(op type, share of decode kernel time, ms per
    step)], (ms per step: wall clock, ORT's model_run, the kernels' sum), and [(op type,
    node name with ``layers.N`` for every layer, ms per step, input shapes)], costliest
    first."""
    wall, events, runs = profile_decode_steps(engine, ids, decode, threads,
                                              "hearth-long-context")
    cut = runs[0][0]
    run_ms = sum(d for _, d in runs) / 1000 / decode
    totals: dict[str, float] = {}
    nodes: dict[tuple[str, str], list] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= cut:
            op = e["args"]["op_name"]
            if op == "MatMulNBits" and "lm_head" in e["name"]:
                op = "MatMulNBits (lm_head)"
            totals[op] = totals.get(op, 0.0) + e["dur"]
            node = re.sub(r"layers\.\d+", "layers.N", e["name"].removesuffix("_kernel_time"))
            shapes = [next(iter(t.values())) for t in e["args"].get("input_type_shape", [])]
            nodes.setdefault((op, node), [0.0, shapes])[0] += e["dur"]
    whole = sum(totals.values())
    shares = sorted(((op, d / whole, d / 1000 / decode) for op, d in totals.items()),
                    key=lambda x: -x[1])
    by_node = sorted(((op, node, d / 1000 / decode, shapes)
                      for (op, node), (d, shapes) in nodes.items()), key=lambda x: -x[2])
    return shares, (wall, run_ms, whole / 1000 / decode), by_node


def main() -> int:
    parser = argparse.ArgumentParser()
    home = Path(os.environ.get("HEARTH_HOME", Path.home() / ".hearth"))
    parser.add_argument("model", nargs="?",
                        default=str(home / "models" / "smollm2-135m-instruct-starter"))
    parser.add_argument("--contexts", default="1024,2048,4096,8192")
    parser.add_argument("--decode", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--gguf", default=None, help="the GGUF for llama.cpp (default: the "
                        "folder's manifest source)")
    parser.add_argument("--inexact", action="store_true", help="Decoder(exact=False)")
    parser.add_argument("--by-node", type=int, default=0, metavar="N",
                        help="with --profile: the N costliest nodes (layers summed)")
    parser.add_argument("--attention", action="store_true",
                        help="the one-layer attention micro-benchmark instead")
    args = parser.parse_args()
    if args.attention:
        from bench.attention_layouts import main as attention_main

        return attention_main([int(x) for x in args.contexts.split(",")], args.threads)
    folder = Path(args.model)
    engine = Engine.load(folder, threads=args.threads, exact=not args.inexact)  # as the app
    decoder = engine.decoder
    decoder.choose_rows(pairs=False)
    kv = engine.graph.kv_layers[0].dtype
    print(f"model {folder.name}: KV {kv}, context {engine.spec.context_length}, "
          f"{'exact' if decoder.exact else 'inexact'}, one-token steps as {decoder.step_rows} "
          f"row(s) (calibrated at load: one-row agrees {decoder.one_row_agrees})")
    print(f"prompt session: {'attached' if decoder.has_prompt_session else 'none'} "
          f"({engine.prompt_plan.note})")
    gguf = Path(args.gguf) if args.gguf else None
    if gguf is None:
        manifest = folder / "hearth-manifest.json"
        if manifest.is_file():
            src = json.loads(manifest.read_text()).get("source", {}).get("path")
            gguf = Path(src) if src else None
    peer = available() and gguf is not None and gguf.is_file()
    print(describe() + ("" if available() else ": Hearth's figures only"))
    print(f"\n{'engine':10s} {'context':>7s} {'TTFT ms':>9s} {'decode tok/s':>13s}")
    limit = engine.spec.context_length - args.decode - 4
    for n in (int(x) for x in args.contexts.split(",")):
        ids = prompt_ids(engine, min(n, limit))
        ttft, rate = run_hearth(decoder, ids, args.decode)
        print(f"{'hearth':10s} {len(ids):7d} {ttft:9.0f} {rate:13.1f}   ({load_average()})",
              flush=True)
        got = run_llama_cpp(gguf, ids, args.decode, args.threads) if peer else None
        if isinstance(got, str):
            print(f"{'llama.cpp':10s} no figures: {got}")
        elif got is not None:
            print(f"{'llama.cpp':10s} {len(ids):7d} {got[0]:9.0f} {got[1]:13.1f}   "
                  f"({load_average()})", flush=True)
        if args.profile:
            shares, (wall, run, kernels), by_node = profile_shares(
                engine, args.threads, ids, min(args.decode, 32))
            print(f"   per step (profiled): {wall:.1f} ms wall, {run:.1f} ms in ORT's run, "
                  f"{kernels:.1f} ms in kernels")
            print("   decode kernel time: " + ", ".join(
                f"{op} {share:.0%} ({ms:.2f} ms/step)" for op, share, ms in shares
                if share >= 0.01), flush=True)
            for op, node, ms, shapes in by_node[: args.by_node]:
                print(f"     {ms:6.3f} ms/step  {op:14s} {node}  {shapes}")
    return 0


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    raise SystemExit(main())
