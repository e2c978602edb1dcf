"""Decode steps on an ORT profiling session: the events both profiling benches read.

bench_long_context.py groups them by operator, bench_sizes.py by weight matrix."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from app.engine.decoder import Decoder
from app.engine.engine import Engine
from app.engine.providers import session_options


def profile_decode_steps(engine: Engine, ids: list[int], decode: int, threads: int,
                         prefix: str) -> tuple[float, list[dict], list[tuple[int, int]]]:
    """``decode`` greedy steps after ``ids`` on a profiling session over ``engine``'s graph,
    calibrated as the engine's decoder: (wall ms per step, the profile's events, the decode
    steps' model runs as (start µs, duration µs))."""
    opts = session_options(engine.spec, "cpu", threads)
    opts.enable_profiling = True
    opts.profile_file_prefix = str(Path(tempfile.gettempdir()) / prefix)
    session = ort.InferenceSession(str(engine.spec.model_path), opts,
                                   providers=["CPUExecutionProvider"])
    decoder = Decoder(session, engine.graph, context_length=engine.spec.context_length,
                      exact=engine.decoder.exact)
    decoder.adopt_calibration(engine.decoder)  # the load's calibration
    decoder.choose_rows(pairs=False)
    cache = decoder.new_cache()
    tok = int(np.argmax(decoder.feed(cache, ids)))
    t = time.perf_counter()
    for _ in range(decode):
        tok = int(np.argmax(decoder.step(cache, tok)))
    wall = (time.perf_counter() - t) * 1000 / decode
    path = Path(session.end_profiling())
    events = json.loads(path.read_text())
    path.unlink()
    runs = sorted((e["ts"], e["dur"]) for e in events if e.get("name") == "model_run")
    return wall, events, runs[-decode:]  # the decode steps' runs: the last ``decode``
