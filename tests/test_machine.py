"""The machine facts (app/machine.py): the provider this machine uses and why others cannot run."""

from __future__ import annotations

import platform

import onnxruntime as ort

from app import machine
from app.machine import machine_provider, provider_choices

CUDA_WHEEL = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_machine_provider_matches_what_this_machine_can_run():
    available = ort.get_available_providers()
    cuda = machine.cuda_device_count() if "CUDAExecutionProvider" in available else 0
    expected = next(
        (
            p
            for p in ("dml", "cuda")
            if machine.unavailable_reason(
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
    monkeypatch.setattr(machine, "cuda_device_count", lambda: asked.append(1) or 0)
    assert machine_provider() == "cpu" and asked == [1]
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    assert machine_provider() == "cpu" and asked == [1]


def test_provider_choices_say_why_a_provider_cannot_run_here():
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
