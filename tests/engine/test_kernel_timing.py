"""Which kernels read a 4-bit model's prompts faster here: measured on real ORT sessions of the
model's own matmul shapes, once per machine and model, kept in a record that hostile or stale
contents cannot mislead (app/engine/kernel_timing.py).

These tests check what is measured and kept, never which family wins: that is this CPU's
business (the plan's choice from the figures is tests/engine/test_prompt_session.py's).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import onnx
import onnxruntime as ort
import pytest

import app.engine.kernel_timing as kernel_timing
import app.engine.prompt_session as prompt_session
from app.engine.engine import Engine
from app.engine.kernel_timing import (
    MAX_SHAPES,
    MAX_SPREAD,
    MAX_WEIGHTS,
    REPEATS,
    ROWS,
    measured_shapes,
    prompt_kernel_timing,
    record_path,
)
from app.engine.onnx_file import inspect_onnx
from app.engine.package import read_model_folder
from app.engine.prompt_session import ELIGIBLE_NBITS, FORCE_FP32


def node_shapes(path) -> Counter:
    shapes = Counter()
    for node in onnx.load(path).graph.node:
        if node.op_type == "MatMulNBits":
            attrs = {a.name: a.i for a in node.attribute}
            shapes[(attrs["bits"], attrs["block_size"], attrs["accuracy_level"], attrs["K"],
                    attrs["N"])] += 1
    return shapes


def on_fp32(options: ort.SessionOptions) -> bool:
    """Whether ``options`` run 4-bit matmuls on the fp32 kernels (an unset entry raises)."""
    try:
        return options.get_session_config_entry(FORCE_FP32) == "1"
    except Exception:
        return False


@pytest.fixture(autouse=True)
def any_spread(monkeypatch):
    """The test graphs' matmuls run in microseconds, where one scheduler tick sets rounds far
    apart on any machine: these tests take every measurement as steady, except the ones on
    the steadiness rule itself (which set ``MAX_SPREAD`` back and time runs themselves)."""
    monkeypatch.setattr(kernel_timing, "MAX_SPREAD", float("inf"))


def rounds_timed(monkeypatch, int8: list[float], fp32: list[float]) -> None:
    """Each family's runs take these milliseconds in turn, the warm-up first (every shape the
    same), under the real steadiness rule."""
    monkeypatch.setattr(kernel_timing, "MAX_SPREAD", MAX_SPREAD)
    runs = {False: [], True: []}

    def timed_run(session, rows):
        family = on_fp32(session.get_session_options())
        times = fp32 if family else int8
        runs[family].append(None)
        return times[(len(runs[family]) - 1) % len(times)]

    monkeypatch.setattr(kernel_timing, "_timed_run", timed_run)


@pytest.fixture
def model(gqa_int4_model_dir):
    return read_model_folder(gqa_int4_model_dir)


@pytest.fixture
def sessions(monkeypatch):
    """Every ORT session the measurement opens: (K, N of its node, whether on fp32 kernels)."""
    opened = []
    real = ort.InferenceSession

    def spy(model, *args, **kwargs):
        if isinstance(model, bytes):  # the measurement's graphs (a model loads from its file)
            node = onnx.load_from_string(model).graph.node[0]
            attrs = {a.name: a.i for a in node.attribute}
            opened.append((attrs["K"], attrs["N"], on_fp32(args[0])))
        return real(model, *args, **kwargs)

    monkeypatch.setattr(kernel_timing.ort, "InferenceSession", spy)
    return opened


def test_the_file_summary_and_the_spec_record_every_matmul_shape(gqa_int4_model_dir, model):
    shapes = node_shapes(gqa_int4_model_dir / "model.onnx")
    assert len(shapes) >= 2 and all(key[:3] == ELIGIBLE_NBITS for key in shapes)
    assert inspect_onnx(gqa_int4_model_dir / "model.onnx").matmul_nbits_shapes == shapes
    assert model.matmul_nbits_shapes == shapes


def test_both_kernel_families_run_each_of_the_models_shapes_once_then_the_record_answers(
        model, sessions):
    shapes = measured_shapes(model)
    assert shapes == {(k, n): c for (*_, k, n), c in node_shapes(model.model_path).items()
                      if c >= 2}
    timing = prompt_kernel_timing(model, threads=1)
    assert timing.measured_now and timing.rows == ROWS
    assert timing.int8_ms > 0 and timing.fp32_ms > 0
    assert sorted(sessions) == sorted((k, n, fp32) for (k, n) in shapes for fp32 in (0, 1))

    records = json.loads(record_path().read_text())["records"]
    assert len(records) == 1
    sessions.clear()
    again = prompt_kernel_timing(model, threads=1)
    assert not again.measured_now and sessions == []  # nothing measured the second time
    assert (again.int8_ms, again.fp32_ms) == pytest.approx((timing.int8_ms, timing.fp32_ms),
                                                           abs=1e-4)


def test_the_figures_weigh_each_shape_by_how_many_nodes_have_it(model, monkeypatch):
    shapes = {(64, 96): 4, (32, 160): 2}
    monkeypatch.setattr(kernel_timing, "measured_shapes", lambda spec: shapes)

    def timed_run(session, rows):  # fp32: twice the time, so the two families differ
        return rows.shape[1] * (2.0 if on_fp32(session.get_session_options()) else 1.0)

    monkeypatch.setattr(kernel_timing, "_timed_run", timed_run)
    timing = prompt_kernel_timing(model, threads=1)
    assert (timing.int8_ms, timing.fp32_ms) == (64 * 4 + 32 * 2, 2 * (64 * 4 + 32 * 2))


def test_a_measurement_beside_a_busy_core_is_neither_kept_nor_chosen_by(gqa_int4_model_dir,
                                                                          model, monkeypatch):
    assert REPEATS == 3
    steady_fp32 = [9.0, 1.0, 1.0 + MAX_SPREAD - 0.01, 1.0]  # warm-up, then 3 timed rounds
    rounds_timed(monkeypatch, int8=[9.0, 2.0, 2.0, 2.0], fp32=[9.0, 1.0, 1.0 + MAX_SPREAD + 0.01,
                                                                1.0])
    busy = prompt_kernel_timing(model, threads=1)
    assert busy.measured_now and not busy.steady
    assert busy.spread == pytest.approx(MAX_SPREAD + 0.01)
    assert busy.fp32_ms < busy.int8_ms / 1.5  # fp32 far ahead, but not chosen by
    assert not record_path().exists()
    monkeypatch.setattr(prompt_session, "platform", SimpleNamespace(machine=lambda: "x86_64"))
    engine = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, exact=False)
    assert not engine.prompt_plan.use and not engine.decoder.has_prompt_session
    assert "too busy" in engine.prompt_plan.note and "measured again" in engine.prompt_plan.note
    assert not record_path().exists()

    rounds_timed(monkeypatch, int8=[9.0, 2.0, 2.0, 2.0], fp32=steady_fp32)
    steady = prompt_kernel_timing(model, threads=1)
    assert steady.measured_now and steady.steady  # the busy ones were not kept
    assert steady.spread == pytest.approx(MAX_SPREAD - 0.01)
    assert not prompt_kernel_timing(model, threads=1).measured_now  # this one was


def test_another_machine_or_thread_count_is_measured_again_and_the_record_stays_small(
        model, monkeypatch, sessions):
    prompt_kernel_timing(model, threads=1)
    assert prompt_kernel_timing(model, threads=2).measured_now  # other threads
    monkeypatch.setattr(kernel_timing, "cpu_name", lambda: "Another CPU")
    assert prompt_kernel_timing(model, threads=1).measured_now
    monkeypatch.setattr(kernel_timing.ort, "__version__", "1.99.0")
    assert prompt_kernel_timing(model, threads=1).measured_now
    assert len(json.loads(record_path().read_text())["records"]) == 4

    monkeypatch.setattr(kernel_timing, "MAX_RECORDS", 2)
    monkeypatch.setattr(kernel_timing, "cpu_name", lambda: "A third CPU")
    assert prompt_kernel_timing(model, threads=1).measured_now
    kept = json.loads(record_path().read_text())["records"]
    assert len(kept) == 2  # the newest two: the ORT 1.99 one and this one
    assert kernel_timing.machine_key(measured_shapes(model), 1) in kept
    assert not prompt_kernel_timing(model, threads=1).measured_now


@pytest.mark.parametrize("contents", [
    b"not json {",
    b"[1, 2, 3]",
    b'{"records": [1, 2]}',
    b'{"records": {"KEY": {"int8_ms": "fast", "fp32_ms": 1.0}}}',
    b'{"records": {"KEY": {"int8_ms": true, "fp32_ms": 1.0}}}',
    b'{"records": {"KEY": {"int8_ms": -1.0, "fp32_ms": 1.0}}}',
    b'{"records": {"KEY": {"int8_ms": NaN, "fp32_ms": 1.0}}}',
    b'{"records": {"KEY": {"int8_ms": 1e308, "fp32_ms": 1.0}}}',
    b'{"records": {"KEY": {"fp32_ms": 1.0}}}',
    b"[" * 100_000,
    b'{"records": {"KEY": {"int8_ms": 1.0, "fp32_ms": 1.0}}, "pad": "' + b"x" * (1 << 20)
    + b'"}',
], ids=["garbage", "a list", "records a list", "a string", "a bool", "negative", "nan",
        "huge", "missing", "nested", "too big"])
def test_a_hostile_or_broken_record_is_measured_again_and_rewritten(model, contents):
    key = kernel_timing.machine_key(measured_shapes(model), 1)
    record_path().write_bytes(contents.replace(b"KEY", key.encode()))
    timing = prompt_kernel_timing(model, threads=1)
    assert timing.measured_now and timing.int8_ms < 1e6
    kept = json.loads(record_path().read_text())["records"]
    assert kept[key]["int8_ms"] == pytest.approx(timing.int8_ms, abs=1e-4)


def test_a_record_that_cannot_be_written_only_costs_a_measurement_next_time(
        model, monkeypatch):
    record_path().mkdir()  # a folder where the file should be
    assert prompt_kernel_timing(model, threads=1).measured_now
    assert prompt_kernel_timing(model, threads=1).measured_now
    assert record_path().is_dir()


def test_only_shapes_the_prompt_session_moves_are_measured_the_largest_first_and_bounded(
        model):
    eligible = ELIGIBLE_NBITS
    shapes = {
        (*eligible, 64, 64): 30,
        (*eligible, 64, 49152): 1,  # a lone output layer: one row per chunk
        (4, 32, 0, 128, 128): 30,  # float activations: the option does not move it
        (4, 16, 4, 128, 128): 30,  # another block size: nor this
        (*eligible, 48, 64): 30,  # K not whole blocks
        (*eligible, 1 << 14, (MAX_WEIGHTS >> 14) + 32): 30,  # a hostile K × N
        (*eligible, 0, 64): 30,
    }
    shapes |= {(*eligible, 32 * (i + 1), 32): 2 for i in range(MAX_SHAPES + 3)}
    chosen = measured_shapes(replace(model, matmul_nbits_shapes=shapes))
    largest = [(32 * (i + 1), 32) for i in range(MAX_SHAPES + 3)][::-1]
    assert list(chosen) == [(64, 64), *largest[: MAX_SHAPES - 1]]
    assert chosen[(64, 64)] == 30
    assert measured_shapes(replace(model, matmul_nbits_shapes={})) == {}
    assert prompt_kernel_timing(replace(model, matmul_nbits_shapes={}), threads=1) is None


def test_ort_failing_on_the_measurement_opens_no_session(gqa_int4_model_dir, monkeypatch):
    monkeypatch.setattr(prompt_session, "platform", SimpleNamespace(machine=lambda: "x86_64"))
    monkeypatch.setattr(kernel_timing, "_one_matmul", lambda k, n, rng: b"not an onnx graph")
    engine = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, exact=False)
    assert not engine.prompt_plan.use and not engine.decoder.has_prompt_session
    assert "could not be measured" in engine.prompt_plan.note
    assert not record_path().exists()


def test_an_inexact_load_decides_from_the_measurement_taken_once(gqa_int4_model_dir,
                                                                 monkeypatch, sessions):
    monkeypatch.setattr(prompt_session, "platform", SimpleNamespace(machine=lambda: "x86_64"))
    exact = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1)
    assert sessions == [] and not record_path().exists()  # exact replies never measure

    first = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, exact=False)
    assert sessions and record_path().is_file()
    plan = first.prompt_plan
    assert f"for a {ROWS}-token chunk of this model's matmuls on this CPU" in plan.note
    assert first.decoder.has_prompt_session == plan.use
    sessions.clear()
    second = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, exact=False)
    assert sessions == [] and second.prompt_plan == plan
    assert exact.decoder.has_prompt_session is False
