"""llama.cpp (llama-cpp-python) as a benchmark peer, run in a child process.

A crash of the native library costs one figure, not the whole benchmark: each call returns
the figures or a sentence saying why there are none. The child runs on the interpreter named
by ``HEARTH_LLAMA_PYTHON`` (a separate venv holding llama-cpp-python, so that its build never
touches the app's environment), else on this one.

On this project's AMX Xeon a native build of llama-cpp-python 0.3.36 segfaults in
``ggml_backend_amx_mul_mat`` on its first ``llama_decode`` (llama.cpp issue #20824, closed
stale without a fix); the README's bench section says how the peer venv is built without the
AMX kernels.

Logits are read with ``llama_get_logits_ith(ctx, -1)``: since 0.3.x ``Llama.scores`` is filled
only with ``logits_all=True`` (it stays zero otherwise, and an argmax of it is token 0).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ENV = "HEARTH_LLAMA_PYTHON"
EXTRA_BUFTS_ENV = "HEARTH_LLAMA_EXTRA_BUFTS"  # "0": llama.cpp without extra buffer types

CHILD = r"""
import json, sys, time
import numpy as np
import llama_cpp
import llama_cpp.llama_cpp as bindings
job = json.loads(sys.argv[1])
if not job["extra_bufts"]:  # no repacked (AMX, CPU_REPACK) weight buffers
    default_params = bindings.llama_model_default_params
    def no_extra_bufts():
        params = default_params()
        params.use_extra_bufts = False
        return params
    bindings.llama_model_default_params = no_extra_bufts
ids, decode, threads = job["ids"], job["decode"], job["threads"]
n_ctx = len(ids) + decode + 8
llm = llama_cpp.Llama(job["gguf"], n_ctx=n_ctx, n_batch=min(512, n_ctx), n_threads=threads,
                      n_threads_batch=threads, logits_all=job["logits"] is not None,
                      verbose=False)  # F16 KV: its default
vocab = llm.n_vocab()
info = {"version": llama_cpp.__version__,
        "system": llama_cpp.llama_print_system_info().decode(errors="replace").strip()}

def last():
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(vocab,))

if job["logits"] is not None:
    out = {}
    llm.eval(ids)  # the whole sequence as one prompt: every position's logits
    out["prefill"] = np.array(llm.scores[: len(ids)], dtype=np.float32)
    llm.reset()
    rows = []
    for t in ids:  # one token per step, as decoding runs
        llm.eval([t])
        rows.append(last().copy())
    out["steps"] = np.stack(rows).astype(np.float32)
    np.savez(job["logits"], **out)
    print(json.dumps(info))
    raise SystemExit(0)
llm.eval(ids[:8])  # first touch of the weights
llm.reset()
passes = []
for _ in range(job["passes"]):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    tok = int(np.argmax(last()))
    ttft = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(decode):
        llm.eval([tok])
        tok = int(np.argmax(last()))
    passes.append([ttft * 1000, decode / (time.perf_counter() - t1)])
info["passes"] = passes
print(json.dumps(info))
"""


def interpreter() -> str:
    """The Python that runs llama.cpp: ``HEARTH_LLAMA_PYTHON``, else this one."""
    return os.environ.get(ENV) or sys.executable


@functools.cache
def _importable(python: str) -> bool:
    if python == sys.executable:
        return importlib.util.find_spec("llama_cpp") is not None
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('llama_cpp') is None)"
    try:
        return subprocess.run([python, "-c", probe], capture_output=True,
                              check=False, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def available() -> bool:
    """Whether ``llama_cpp`` is importable by the peer's interpreter (without loading it
    here)."""
    return _importable(interpreter())


def describe() -> str:
    """Which interpreter runs the peer, for a bench's header line."""
    python = interpreter()
    where = f"{ENV}={python}" if os.environ.get(ENV) else f"this interpreter ({python})"
    bufts = "" if extra_bufts() else f", {EXTRA_BUFTS_ENV}=0 (no AMX / repacked weights)"
    return (f"llama.cpp peer: {where}{bufts}"
            + ("" if available() else ", llama_cpp not importable"))


def extra_bufts() -> bool:
    """Whether llama.cpp may repack weights into its extra buffer types (AMX, CPU_REPACK;
    its default): ``HEARTH_LLAMA_EXTRA_BUFTS=0`` turns them off, which keeps a native build
    off its crashing AMX kernels without a rebuild (and off the Q4_0/IQ4_NL repacking too)."""
    return os.environ.get(EXTRA_BUFTS_ENV, "1") != "0"


def _run(job: dict) -> dict | str:
    job = {**job, "extra_bufts": extra_bufts()}
    if not available():
        return f"llama_cpp is not importable by {interpreter()} (set {ENV})"
    done = subprocess.run([interpreter(), "-c", CHILD, json.dumps(job)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        why = f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        tail = done.stderr.strip().splitlines()[-1:] or [""]
        return f"llama.cpp failed ({why}) {tail[0][:120]}".rstrip()
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_llama_cpp_passes(gguf: Path, ids: list[int], decode: int, threads: int,
                         passes: int = 1) -> list[tuple[float, float]] | str:
    """[(TTFT ms for ``ids``, decode tok/s over ``decode`` greedy steps)] per pass, one
    loaded model (a warm-up eval first), or why not."""
    got = _run({"gguf": str(gguf), "ids": ids, "decode": decode, "threads": threads,
                "passes": passes, "logits": None})
    if isinstance(got, str):
        return got
    return [(float(t), float(r)) for t, r in got["passes"]]


def run_llama_cpp(gguf: Path, ids: list[int], decode: int,
                  threads: int) -> tuple[float, float] | str:
    """(TTFT ms for ``ids``, decode tok/s over ``decode`` greedy steps), or why not."""
    got = run_llama_cpp_passes(gguf, ids, decode, threads)
    return got if isinstance(got, str) else got[0]


def llama_cpp_logits(gguf: Path, ids: list[int],
                     threads: int) -> tuple[dict[str, np.ndarray], dict] | str:
    """Every position's logits over ``ids``: ``{"prefill": [n, vocab] (one batch),
    "steps": [n, vocab] (one token per eval)}`` and the child's version/system info, or why
    not."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "logits.npz"
        got = _run({"gguf": str(gguf), "ids": ids, "decode": 0, "threads": threads,
                    "passes": 0, "logits": str(path)})
        if isinstance(got, str):
            return got
        with np.load(path) as data:
            return {k: data[k] for k in data.files}, got
