"""The one provider policy: the provider for this machine and the build order per provider."""

from __future__ import annotations

import platform

import onnxruntime as ort
import pytest

from app.engine import providers
from app.models import policy
from app.models.policy import best_genai_folder, best_graph, graph_precision, machine_provider

CUDA_WHEEL = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_machine_provider_matches_what_this_machine_can_run():
    available = ort.get_available_providers()
    cuda = providers.cuda_device_count() if "CUDAExecutionProvider" in available else 0
    expected = next(
        (
            p
            for p in ("dml", "cuda")
            if providers.unavailable_reason(
                p, system=platform.system(), available=available, cuda_devices=cuda
            )
            is None
        ),
        "cpu",
    )
    assert machine_provider() == expected


def test_a_cuda_wheel_without_a_cuda_device_means_cpu():
    assert machine_provider(available=CUDA_WHEEL, cuda_devices=0, system="Linux") == "cpu"
    assert machine_provider(available=CUDA_WHEEL, cuda_devices=1, system="Linux") == "cuda"
    dml = ["DmlExecutionProvider", "CPUExecutionProvider"]
    assert machine_provider(available=dml, cuda_devices=0, system="Windows") == "dml"
    assert machine_provider(available=dml, cuda_devices=0, system="Linux") == "cpu"


def test_the_device_is_asked_only_when_the_wheel_has_cuda(monkeypatch):
    asked = []
    monkeypatch.setattr(ort, "get_available_providers", lambda: list(CUDA_WHEEL))
    monkeypatch.setattr(providers, "cuda_device_count", lambda: asked.append(1) or 0)
    assert machine_provider() == "cpu" and asked == [1]
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    assert machine_provider() == "cpu" and asked == [1]


@pytest.mark.parametrize(
    ("provider", "expected"),
    [("cpu", "model_q4"), ("cuda", "model_q4f16"), ("dml", "model_q4f16"), ("coreml", "model")],
)
def test_graph_order_per_provider(provider, expected):
    stems = ["model", "model_fp16", "model_q4", "model_q4f16", "model_int8", "model_quantized"]
    assert best_graph(stems, provider) == expected


def test_graph_precision_and_unknown_names_rank_last():
    assert graph_precision("model") == "fp32" and graph_precision("model_Q4") == "q4"
    assert graph_precision("decoder_model_merged_int8") == "int8"
    assert best_graph(["weird", "model_fp16"], "cpu") == "model_fp16"
    assert best_graph(["decoder_model_merged", "model"], "cpu") == "model"
    assert set(policy.PRECISION_ORDER) == {"cpu", "cuda", "dml", "coreml"}


def test_genai_folder_per_provider():
    folders = ["cpu_and_mobile/cpu-int4", "cuda/cuda-int4", "directml/directml-int4"]
    assert best_genai_folder(folders, "cpu") == "cpu_and_mobile/cpu-int4"
    assert best_genai_folder(folders, "cuda") == "cuda/cuda-int4"
    assert best_genai_folder(folders, "dml") == "directml/directml-int4"
    assert best_genai_folder(["gpu/gpu-int4", "cpu/cpu-int4"], "cuda") == "gpu/gpu-int4"
    assert best_genai_folder(["only"], "cuda") == "only"


def test_provider_choices_say_why_a_provider_cannot_run_here():
    from app.models.policy import provider_choices

    linux_cpu = provider_choices(available=["CPUExecutionProvider"], cuda_devices=0,
                                 system="Linux")
    assert linux_cpu["cpu"] is None
    assert "Windows only" in linux_cpu["dml"]
    assert "onnxruntime-gpu" in linux_cpu["cuda"]
    assert "macOS only" in linux_cpu["coreml"]
    gpu_wheel_no_gpu = provider_choices(
        available=["CUDAExecutionProvider", "CPUExecutionProvider"], cuda_devices=0,
        system="Linux",
    )
    assert "no CUDA device" in gpu_wheel_no_gpu["cuda"]
    with_gpu = provider_choices(
        available=["CUDAExecutionProvider", "CPUExecutionProvider"], cuda_devices=1,
        system="Linux",
    )
    assert with_gpu["cuda"] is None


def test_package_variant_per_provider():
    variants = [
        ("npu", "QNNExecutionProvider", "npu"),
        ("gpu", "CUDAExecutionProvider", "gpu"),
        ("dml", "DmlExecutionProvider", "gpu"),
        ("cpu", "CPUExecutionProvider", "cpu"),
    ]
    assert policy.best_package_variant(variants, "cpu") == "cpu"
    assert policy.best_package_variant(variants, "cuda") == "gpu"
    assert policy.best_package_variant(variants, "dml") == "dml"
    assert policy.best_package_variant(variants, "coreml") == "cpu"
    assert policy.best_package_variant(variants[:2], "dml") is None  # QNN / CUDA only
    base = [("ov", "OpenVINOExecutionProvider", None), ("base", None, None)]
    assert policy.best_package_variant(base, "cuda") == "base"  # a base model runs anywhere
    assert policy.package_variant_provider(None, "gpu") is None
    assert policy.package_variant_provider("cuda", None) == "cuda"
