"""llama.cpp (llama-cpp-python) as a benchmark peer, run in a child process.

A crash of the native library (a build whose bindings do not match its library segfaults in
``llama_decode``) then costs one figure, not the whole benchmark: ``run_llama_cpp`` returns
the figures or a sentence saying why there are none.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, sys, time
import numpy as np
import llama_cpp
gguf, ids = sys.argv[1], json.loads(sys.argv[2])
decode, threads = int(sys.argv[3]), int(sys.argv[4])
n_ctx = len(ids) + decode + 8
llm = llama_cpp.Llama(gguf, n_ctx=n_ctx, n_batch=min(512, n_ctx), n_threads=threads,
                      n_threads_batch=threads, verbose=False)  # F16 KV: its default
llm.eval(ids[:8])  # first touch of the weights
llm.reset()
t0 = time.perf_counter()
llm.eval(ids)
tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
ttft = time.perf_counter() - t0
t1 = time.perf_counter()
for _ in range(decode):
    llm.eval([tok])
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
print(json.dumps([ttft * 1000, decode / (time.perf_counter() - t1)]))
"""


def available() -> bool:
    """Whether ``llama_cpp`` is installed (importable without loading it here)."""
    return importlib.util.find_spec("llama_cpp") is not None


def run_llama_cpp(gguf: Path, ids: list[int], decode: int,
                  threads: int) -> tuple[float, float] | str:
    """(TTFT ms for ``ids``, decode tok/s over ``decode`` greedy steps), or why not."""
    if not available():
        return "llama_cpp is not importable"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(gguf), json.dumps(ids), str(decode), str(threads)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        why = f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        tail = done.stderr.strip().splitlines()[-1:] or [""]
        return f"llama.cpp failed ({why}) {tail[0][:120]}".rstrip()
    ttft, rate = json.loads(done.stdout.strip().splitlines()[-1])
    return float(ttft), float(rate)
