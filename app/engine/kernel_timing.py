"""Which kernels read a 4-bit model's prompts faster on this machine: measured, then kept.

The fp32 prompt session (app/engine/prompt_session.py) pays where ORT's fp32 kernels
(block dequantization + SGEMM) beat its int8 ones on prompt chunks. That depends on the CPU
(AVX-512 VNNI's integer dot products win outright) and on the model: on a 2-core AVX2 EPYC
the starter's matmuls ran 4-11% faster on fp32 kernels, a 0.5B-shape model's 2-7% and a
1.5B-shape model's 6% slower (the large feed-forward matrices; whole prompts agreed: 256
tokens on the prompt session took 0.97x / 1.12x / 1.05x as long). Neither the CPU kind nor
the architecture tells, so :func:`prompt_kernel_timing` measures it: each of the model's own
4-bit matmul shapes (as the folder check read them, ``ModelSpec.matmul_nbits_shapes``) as a
one-node graph of random weights, on both kernel families in turn, a :data:`ROWS`-row chunk
each, on the session options the model's sessions get, weighted by how many of the model's
nodes have that shape. ~0.15 s for the starter, ~0.5 s for a 0.5B model, ~1.5 s for a
1.5B one on 2 cores, once: the figures are kept per machine (CPU name and kind, logical
cores, ORT version, threads) and model shapes in :func:`record_path`, and only the inexact
mode (``exact=False``) ever asks (exact replies never open the session). A measurement
taken while something else was busy (its rounds more than :data:`MAX_SPREAD` apart) is
neither chosen by nor kept: it would fix a busy minute's verdict for good.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from app.cpu import cpu_kind, cpu_name
from app.engine.prompt_session import ELIGIBLE_NBITS, prompt_session_options
from app.engine.providers import session_options
from app.engine.types import KernelTiming, ModelSpec
from app.fileio import read_json, write_json_atomic
from app.paths import cache_dir

#: rows of the chunk each kernel reads (prompts are read in chunks of up to 512 rows, and
#: the fp32 kernels gain more from 128 rows to 256 than from 256 to 512)
ROWS = 256
#: timed runs per shape and kernel family (the best counts), after one warm-up run each
REPEATS = 3
#: at most this many distinct shapes are measured, the most weights first
MAX_SHAPES = 6
#: a shape with more weights than this is left out (a hostile K × N would allocate it all)
MAX_WEIGHTS = 1 << 27
#: the record keeps this many machines × models, the newest
MAX_RECORDS = 64
#: a record file larger than this is not read (it is Hearth's own small JSON)
MAX_RECORD_BYTES = 1 << 20
#: a measurement whose timed rounds (every shape, weighted) differ more than this within
#: one family is unsteady: not chosen by, not kept, taken again at the next load. On a
#: 2-core AVX2 EPYC shared with other machines, quiet measurements' rounds lay 4-14% apart
#: (one of ten: 28%) and all ten taken beside a busy core 22-66%
MAX_SPREAD = 0.15
#: bump when the measurement changes: older figures are measured again
MEASUREMENT = 2


def record_path() -> Path:
    """Where the figures are kept (a cache: deleting it only costs a measurement)."""
    return cache_dir() / "kernel_timings.json"


def measured_shapes(spec: ModelSpec) -> dict[tuple[int, int], int]:
    """The (K, N) shapes of ``spec``'s nodes the prompt session would move, by count: those
    with :data:`ELIGIBLE_NBITS`, appearing at least twice (a lone output layer reads one row
    per prompt chunk), each within :data:`MAX_WEIGHTS`, the :data:`MAX_SHAPES` with the most
    weights in all."""
    block = ELIGIBLE_NBITS[1]
    shapes: dict[tuple[int, int], int] = {}
    for key, count in spec.matmul_nbits_shapes.items():
        bits, block_size, level, k, n = key
        if ((bits, block_size, level) != ELIGIBLE_NBITS or count < 2 or k <= 0 or n <= 0
                or k % block or k * n > MAX_WEIGHTS):
            continue
        shapes[(k, n)] = shapes.get((k, n), 0) + count
    ranked = sorted(shapes.items(), key=lambda item: item[0][0] * item[0][1] * item[1],
                    reverse=True)
    return dict(ranked[:MAX_SHAPES])


def prompt_kernel_timing(spec: ModelSpec, *, threads: int | None = None,
                         record: Path | None = None) -> KernelTiming | None:
    """How long ``spec``'s 4-bit matmuls take on a :data:`ROWS`-row chunk on each kernel
    family on this machine: from ``record`` (default :func:`record_path`) when measured
    before here, else measured now and kept. None when the model has no such shapes or ORT
    fails on the measurement's graphs (the plan then opens no prompt session)."""
    shapes = measured_shapes(spec)
    if not shapes:
        return None
    options = session_options(spec, "cpu", threads)
    key = machine_key(shapes, options.intra_op_num_threads)
    path = record if record is not None else record_path()
    records = _read_records(path)
    kept = records.get(key)
    if kept is not None:
        return KernelTiming(kept["int8_ms"], kept["fp32_ms"], ROWS, measured_now=False)
    try:
        int8_ms, fp32_ms, spread = _measure(shapes, spec, threads)
    except Exception:  # ORT raises its own Exception subclasses (as on a model's sessions)
        return None
    if spread > MAX_SPREAD:
        return KernelTiming(int8_ms, fp32_ms, ROWS, measured_now=True, spread=spread,
                            steady=False)
    records.pop(key, None)
    records[key] = {"int8_ms": round(int8_ms, 4), "fp32_ms": round(fp32_ms, 4),
                    "measured": time.strftime("%Y-%m-%d")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"records": dict(list(records.items())[-MAX_RECORDS:])})
    except OSError:
        pass  # measured again next time
    return KernelTiming(int8_ms, fp32_ms, ROWS, measured_now=True, spread=spread)


def machine_key(shapes: dict[tuple[int, int], int], threads: int) -> str:
    """What the figures depend on: the CPU, the ORT build, the thread count, the shapes."""
    what = json.dumps([MEASUREMENT, cpu_name(), cpu_kind(), os.cpu_count(), ort.__version__,
                       threads, ROWS, sorted([k, n, c] for (k, n), c in shapes.items())])
    return hashlib.sha256(what.encode()).hexdigest()[:32]


def _read_records(path: Path) -> dict[str, dict]:
    """The kept figures, every malformed entry left out."""
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            return {}
    except OSError:
        return {}
    raw = read_json(path).get("records")
    if not isinstance(raw, dict):
        return {}
    kept: dict[str, dict] = {}
    for key, entry in raw.items():
        if (isinstance(entry, dict) and all(
                isinstance(entry.get(name), (int, float)) and not isinstance(entry[name], bool)
                and 0 < entry[name] < 1e6 for name in ("int8_ms", "fp32_ms"))):
            kept[key] = entry
    return kept


def _measure(shapes: dict[tuple[int, int], int], spec: ModelSpec,
             threads: int | None) -> tuple[float, float, float]:
    """(int8, fp32) milliseconds for one chunk through every shape, weighted by count (each
    shape's quickest run), and how far apart one family's rounds lay (the widest gap between
    two rounds' weighted totals, as a share of the quicker). The two families' runs
    alternate, so a neighbour's load on a shared machine weighs on both."""
    int8_ms = fp32_ms = 0.0
    rounds = {"int8": [0.0] * REPEATS, "fp32": [0.0] * REPEATS}
    rng = np.random.default_rng(0)
    for (k, n), count in shapes.items():
        model = _one_matmul(k, n, rng)
        rows = rng.standard_normal((ROWS, k), dtype=np.float32)
        int8 = _session(model, session_options(spec, "cpu", threads))
        fp32 = _session(model, prompt_session_options(session_options(spec, "cpu", threads)))
        best_int8 = best_fp32 = float("inf")
        for repeat in range(REPEATS + 1):  # the first round warms buffers and thread pools
            int8_run, fp32_run = _timed_run(int8, rows), _timed_run(fp32, rows)
            if repeat:
                best_int8, best_fp32 = min(best_int8, int8_run), min(best_fp32, fp32_run)
                rounds["int8"][repeat - 1] += int8_run * count
                rounds["fp32"][repeat - 1] += fp32_run * count
        int8_ms += best_int8 * count
        fp32_ms += best_fp32 * count
    spread = max(max(totals) / min(totals) - 1.0 if min(totals) > 0 else float("inf")
                 for totals in rounds.values())
    return int8_ms, fp32_ms, spread


def _session(model: bytes, options: ort.SessionOptions) -> ort.InferenceSession:
    """A CPU session whose worker threads sleep between runs: spinning ones would take the
    cores from the other family's run right after (on 2 cores the figures then swung 30%
    either way)."""
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _timed_run(session: ort.InferenceSession, rows: np.ndarray) -> float:
    """Milliseconds ``session`` takes for ``rows``."""
    start = time.perf_counter()
    session.run(None, {"A": rows})
    return (time.perf_counter() - start) * 1000.0


def _one_matmul(k: int, n: int, rng: np.random.Generator) -> bytes:
    """A graph of one MatMulNBits node as Hearth's conversions write them (4-bit, blocks of
    32, int8 activations, uint8 zero points), random weights."""
    bits, block, level = ELIGIBLE_NBITS
    blocks = k // block
    weights = rng.integers(0, 256, size=(n, blocks, block * bits // 8), dtype=np.uint8)
    scales = (rng.random(n * blocks, dtype=np.float32) * 0.01 + 0.001).astype(np.float32)
    zero_points = rng.integers(0, 256, size=(n * ((blocks + 1) // 2),), dtype=np.uint8)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zero_points"], ["Y"],
                            domain="com.microsoft", K=k, N=n, bits=bits, block_size=block,
                            accuracy_level=level)
    graph = helper.make_graph(
        [node], "kernel_timing",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["rows", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["rows", n])],
        [numpy_helper.from_array(weights, "B"), numpy_helper.from_array(scales, "scales"),
         numpy_helper.from_array(zero_points, "zero_points")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model.SerializeToString()

