"""Execution provider choice and session creation, checked against the real ORT on this machine."""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from app.engine.onnx_file import inspect_onnx
from app.engine.package import read_model_folder
from app.engine.providers import (
    COREML_OPS,
    choose_provider,
    coreml_uncovered_ops,
    create_session,
    provider_options,
    session_options,
)
from app.errors import ModelLoadError, ProviderError
from app.machine import SHORT_NAMES, cuda_device_count, physical_cores, unavailable_reason

MACHINE = {"system": platform.system(), "available": ort.get_available_providers()}


def _machine_reason(provider: str) -> str | None:
    cuda = cuda_device_count() if "CUDAExecutionProvider" in MACHINE["available"] else 0
    return unavailable_reason(provider, cuda_devices=cuda, **MACHINE)


def test_cpu_session_report(plain_model_dir):
    spec = read_model_folder(plain_model_dir)
    session, report = create_session(spec, provider="cpu")
    assert report.chosen == "cpu"
    assert report.ort_providers[0] == "CPUExecutionProvider"
    assert session.get_providers()[0] == "CPUExecutionProvider"
    assert report.requested == "cpu"
    assert not report.fell_back
    assert set(report.reasons) == {"dml", "cuda", "coreml"}
    assert all(isinstance(r, str) and r for r in report.reasons.values())
    assert report.summary() == "CPU"
    # ORT >= 1.24 records node placement: every node of a CPU session is on the CPU.
    assert report.nodes_total and report.nodes_total > 0
    assert report.nodes_on_chosen == report.nodes_total
    # The session is real: it runs the graph.
    names = {i.name for i in session.get_inputs()}
    assert {"input_ids", "attention_mask", "position_ids"} <= names


def test_automatic_choice_on_this_machine(gqa_model_dir):
    spec = read_model_folder(gqa_model_dir)
    session, report = create_session(spec)
    assert report.chosen == SHORT_NAMES[session.get_providers()[0]]
    assert report.ort_providers == tuple(session.get_providers())
    assert report.requested is None or report.fell_back
    assert report.chosen not in report.reasons
    if MACHINE["system"] == "Linux":
        assert report.reasons["dml"] == "DirectML runs on Windows only"
        assert report.reasons["coreml"] == "CoreML runs on macOS only"


@pytest.mark.parametrize("provider", ["cuda", "dml", "coreml"])
def test_unavailable_request_falls_back_to_cpu_with_reason(plain_model_dir, provider):
    reason = _machine_reason(provider)
    if reason is None:
        pytest.skip(f"{provider} is usable on this machine")
    spec = read_model_folder(plain_model_dir)
    session, report = create_session(spec, provider=provider)
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert report.chosen == "cpu"
    assert report.requested == provider
    assert report.fell_back
    assert report.reasons[provider] == reason
    assert "cpu" not in report.reasons
    assert report.summary() == f"CPU (fell back from {provider})"


def test_unknown_provider_is_an_error(plain_model_dir):
    spec = read_model_folder(plain_model_dir)
    with pytest.raises(ProviderError, match="Choose one of"):
        create_session(spec, provider="tpu")


# ---------------------------------------------------------------- threads and options


def test_threads_default_to_physical_cores(plain_model_dir):
    session, _ = create_session(read_model_folder(plain_model_dir))
    assert session.get_session_options().intra_op_num_threads == physical_cores()
    assert (
        session.get_session_options().graph_optimization_level
        == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    )


def test_threads_argument_and_genai_config(gqa_model_dir):
    spec = read_model_folder(gqa_model_dir)
    session, _ = create_session(spec, threads=1)
    assert session.get_session_options().intra_op_num_threads == 1

    configured = dataclasses.replace(
        spec,
        session_options={
            "intra_op_num_threads": 3,
            "graph_optimization_level": "ORT_ENABLE_BASIC",
            "enable_cpu_mem_arena": False,
            "config_entries": {"session.disable_prepacking": "1"},
        },
    )
    session, _ = create_session(configured)
    options = session.get_session_options()
    assert options.intra_op_num_threads == 3
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert options.enable_cpu_mem_arena is False
    assert options.get_session_config_entry("session.disable_prepacking") == "1"

    session, _ = create_session(configured, threads=2)  # the caller wins over genai_config
    assert session.get_session_options().intra_op_num_threads == 2


def test_physical_cores_follow_the_affinity_mask():
    assert 1 <= physical_cores() <= (os.cpu_count() or 1)
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity API on this OS")
    cpu = min(os.sched_getaffinity(0))
    code = (
        f"import os; os.sched_setaffinity(0, {{{cpu}}}); "
        "from app.machine import physical_cores; print(physical_cores())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=os.getcwd()
    )
    assert out.stdout.strip() == "1"


def test_directml_session_options_and_genai_provider_options(gqa_model_dir):
    spec = dataclasses.replace(
        read_model_folder(gqa_model_dir),
        provider_options=(
            {"dml": {"device_id": "1"}},
            {"cuda": {"enable_cuda_graph": "1"}},
            {"dml": {"performance_preference": "high_performance"}},
        ),
    )
    options = session_options(spec, "dml")
    assert options.enable_mem_pattern is False
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert provider_options(spec, "dml") == {
        "device_id": "1",
        "performance_preference": "high_performance",
    }
    assert provider_options(spec, "cuda") == {"enable_cuda_graph": "1"}
    assert provider_options(spec, "cpu") == {}
    assert session_options(spec, "cpu").execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL


# ---------------------------------------------------------------- choice rules


def test_preference_order_per_machine():
    contrib = {("com.microsoft", "MatMulNBits"), ("", "Add")}
    choice, reasons = choose_provider(
        None,
        system="Windows",
        available=["DmlExecutionProvider", "CPUExecutionProvider"],
        cuda_devices=0,
        op_types=contrib,
    )
    assert choice == "dml"
    assert reasons["cpu"] == "DML is available and faster"
    assert "onnxruntime-gpu" in reasons["cuda"]
    assert reasons["coreml"] == "CoreML runs on macOS only"

    linux_gpu = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert (
        choose_provider(None, system="Linux", available=linux_gpu, cuda_devices=1, op_types=None)[0]
        == "cuda"
    )
    choice, reasons = choose_provider(
        None, system="Linux", available=linux_gpu, cuda_devices=0, op_types=None
    )
    assert choice == "cpu"
    assert reasons["cuda"] == "no CUDA device found (no NVIDIA GPU or driver)"


def test_coreml_only_when_the_graph_is_covered(gqa_model_dir, plain_model_dir):
    mac = {
        "system": "Darwin",
        "available": ["CoreMLExecutionProvider", "CPUExecutionProvider"],
        "cuda_devices": 0,
    }
    gqa_ops = inspect_onnx(read_model_folder(gqa_model_dir).model_path).op_types
    choice, reasons = choose_provider(None, op_types=gqa_ops, **mac)
    assert choice == "cpu"
    assert "GroupQueryAttention" in reasons["coreml"]
    assert "CoreML cannot run" in reasons["coreml"]
    assert reasons["dml"] == "DirectML runs on Windows only"
    # An explicit request is honoured: ORT places what CoreML cannot run on the CPU.
    assert choose_provider("coreml", op_types=gqa_ops, **mac)[0] == "coreml"

    standard = {("", "MatMul"), ("", "Add"), ("", "Softmax"), ("", "Gather")}
    assert choose_provider(None, op_types=standard, **mac)[0] == "coreml"
    plain_ops = inspect_onnx(read_model_folder(plain_model_dir).model_path).op_types
    assert coreml_uncovered_ops(plain_ops) == sorted(
        op for domain, op in plain_ops if op not in COREML_OPS or domain
    )


def test_uncovered_ops_name_contrib_ops_first():
    ops = {
        ("", "Where"),
        ("com.microsoft", "MatMulNBits"),
        ("", "MatMul"),
        ("com.microsoft", "RotaryEmbedding"),
    }
    assert coreml_uncovered_ops(ops) == ["MatMulNBits", "RotaryEmbedding", "Where"]


def test_explicit_request_for_unusable_provider_picks_cpu():
    choice, reasons = choose_provider(
        "dml", system="Linux", available=["CPUExecutionProvider"], cuda_devices=0, op_types=None
    )
    assert choice == "cpu"
    assert reasons["dml"] == "DirectML runs on Windows only"


def test_cuda_device_count_is_safe_without_a_driver():
    assert cuda_device_count() >= 0


# ---------------------------------------------------------------- models ORT refuses


def _save(model: onnx.ModelProto, path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())


def test_unsupported_operator_is_a_model_load_error(plain_model_dir, tmp_path):
    spec = read_model_folder(plain_model_dir)
    graph = helper.make_graph(
        [helper.make_node("FancyAttention", ["x"], ["y"], domain="com.example")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    model.ir_version = 10
    bad = tmp_path / "onnx" / "model.onnx"
    _save(model, bad)
    with pytest.raises(ModelLoadError) as err:
        create_session(dataclasses.replace(spec, model_path=bad))
    text = str(err.value)
    assert text.startswith(f"ONNX Runtime cannot load {bad}: ")
    assert "FancyAttention" in text
    assert "operator this onnxruntime version does not have" in text
    assert "[ONNXRuntimeError]" not in text
    assert "Load model from" not in text  # the path is said once
    assert "\n" not in text


def test_model_too_new_for_this_runtime(plain_model_dir, tmp_path):
    spec = read_model_folder(plain_model_dir)
    model = onnx.load(spec.model_path)
    model.ir_version = 99
    bad = tmp_path / "model.onnx"
    _save(model, bad)
    with pytest.raises(ModelLoadError, match="newer ONNX Runtime; update Hearth") as err:
        create_session(dataclasses.replace(spec, model_path=bad))
    assert "Unsupported model IR version: 99" in str(err.value)
    assert ".cc:" not in str(err.value)  # no C++ source location


def test_session_runs_a_step(plain_model_dir):
    """The session create_session returns computes: one prefill step gives finite logits."""
    spec = read_model_folder(plain_model_dir)
    session, _ = create_session(spec)
    feeds = {
        "input_ids": np.array([[1, 5, 9]], dtype=np.int64),
        "attention_mask": np.ones((1, 3), dtype=np.int64),
        "position_ids": np.arange(3, dtype=np.int64)[None],
    }
    for item in session.get_inputs():
        if item.name.startswith("past_key_values"):
            feeds[item.name] = np.zeros((1, 2, 0, 16), dtype=np.float32)
    logits = session.run(["logits"], feeds)[0]
    assert logits.shape[:2] == (1, 3)
    assert np.isfinite(logits).all()
