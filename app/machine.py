"""What this machine can run: the one owner of the machine facts.

- :data:`PROVIDERS`: the execution providers Hearth knows (its short names), and
  :data:`ORT_NAMES` / :data:`SHORT_NAMES`: ONNX Runtime's names for them;
- :func:`unavailable_reason` / :func:`provider_choices`: why a provider cannot run here (the
  wheel lacks it, wrong OS, no CUDA device), or None where it can;
- :func:`cuda_device_count`: CUDA devices the NVIDIA driver reports;
- :func:`machine_provider`: the provider to choose model builds for when the user chose none;
- :func:`chosen_provider`: the provider for the user's "Run on" choice (the ``provider``
  setting: ``auto`` is :func:`machine_provider`), for the build downloaded and the one loaded;
- :func:`physical_cores`: physical CPU cores this process may use.

A leaf below the engine and the model library alike (both ask it; it imports neither).
onnxruntime is imported only when the wheel is asked what it has (``available_providers``), so
the catalog and the settings window can import this module without it.
"""

from __future__ import annotations

import ctypes
import math
import os
import platform
import subprocess
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from app.errors import ProviderError

PROVIDERS: tuple[str, ...] = ("cpu", "dml", "cuda", "coreml")
ORT_NAMES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "dml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
}
SHORT_NAMES = {v: k for k, v in ORT_NAMES.items()}


def available_providers() -> list[str]:
    """ONNX Runtime's names of the providers the installed wheel was built with."""
    import onnxruntime  # the wheel is asked only here

    return list(onnxruntime.get_available_providers())


def physical_cores() -> int:
    """Physical CPU cores this process may use (at least 1).

    Linux: the distinct (package, core) pairs of the CPUs in the process's affinity mask,
    capped by a cgroup CPU quota. macOS: performance cores (``hw.perflevel0.physicalcpu``).
    Elsewhere psutil's physical count, else the logical count.
    """
    count = None
    if hasattr(os, "sched_getaffinity"):
        cpus = os.sched_getaffinity(0)
        count = _linux_physical_cores(cpus) or len(cpus)
        quota = _cgroup_cpu_quota()
        if quota:
            count = min(count, quota)
    elif platform.system() == "Darwin":
        count = _sysctl_int("hw.perflevel0.physicalcpu") or _sysctl_int("hw.physicalcpu")
    if not count:
        try:
            import psutil  # the only portable physical-core count on Windows

            count = psutil.cpu_count(logical=False)
        except ImportError:
            count = None
    return max(1, count or os.cpu_count() or 1)


def _linux_physical_cores(cpus: Iterable[int]) -> int | None:
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            core = (topology / "core_id").read_text().strip()
            package = (topology / "physical_package_id").read_text().strip()
        except OSError:
            return None
        cores.add((package, core))
    return len(cores) or None


def _cgroup_cpu_quota() -> int | None:
    """CPUs allowed by a cgroup v2 / v1 quota (containers), rounded up; None when unlimited."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def _sysctl_int(name: str) -> int | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
        return int(out.stdout.strip()) if out.returncode == 0 else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


@lru_cache(maxsize=1)
def cuda_device_count() -> int:
    """CUDA devices the NVIDIA driver reports (0 when there is no driver or no device)."""
    names = ("nvcuda.dll",) if platform.system() == "Windows" else ("libcuda.so.1", "libcuda.so")
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    return 0




def unavailable_reason(
    provider: str, *, system: str, available: Iterable[str], cuda_devices: int
) -> str | None:
    """Why ``provider`` cannot run on this machine at all, or None when it can."""
    available = set(available)
    if provider == "cpu":
        return None
    if provider == "dml":
        if system != "Windows":
            return "DirectML runs on Windows only"
        if ORT_NAMES["dml"] not in available:
            return "not built into this onnxruntime wheel (DirectML needs onnxruntime-directml)"
        return None
    if provider == "coreml":
        if system != "Darwin":
            return "CoreML runs on macOS only"
        if ORT_NAMES["coreml"] not in available:
            return "not built into this onnxruntime wheel"
        return None
    if provider == "cuda":
        if ORT_NAMES["cuda"] not in available:
            return "not built into this onnxruntime wheel (CUDA needs onnxruntime-gpu)"
        if cuda_devices <= 0:
            return "no CUDA device found (no NVIDIA GPU or driver)"
        return None
    raise ProviderError(
        f"Unknown execution provider '{provider}'.", hint=f"Choose one of: {', '.join(PROVIDERS)}."
    )


def provider_choices(
    *,
    available: Iterable[str] | None = None,
    cuda_devices: int | None = None,
    system: str | None = None,
) -> dict[str, str | None]:
    """Each execution provider → why it cannot run on this machine, or None where it can
    (for the settings window: only usable ones are offered, the others say why). The keyword
    arguments replace what would be asked of onnxruntime, the driver and the OS."""
    available = set(available_providers() if available is None else available)
    if cuda_devices is None:
        cuda_devices = cuda_device_count() if ORT_NAMES["cuda"] in available else 0
    system = system or platform.system()
    return {
        name: unavailable_reason(name, system=system, available=available,
                                 cuda_devices=cuda_devices)
        for name in PROVIDERS
    }


def machine_provider(
    *,
    available: Iterable[str] | None = None,
    cuda_devices: int | None = None,
    system: str | None = None,
) -> str:
    """The provider to choose model builds for when the user chose none.

    DirectML or CUDA where usable (the wheel has it and, for CUDA, the driver reports a
    device), else "cpu". CoreML is left to the engine's session creation, which takes it only
    for graphs it fully covers; LLM exports rarely are, so on a Mac builds are picked for the
    CPU. The keyword arguments replace what would be asked of onnxruntime and the driver.
    """
    try:
        reasons = provider_choices(available=available, cuda_devices=cuda_devices, system=system)
    except Exception:  # a broken ORT install must not break the catalog view
        return "cpu"
    return next((p for p in ("dml", "cuda") if reasons[p] is None), "cpu")


def chosen_provider(choice: str | None = None) -> str:
    """The provider for the user's "Run on" choice: ``choice`` itself (the ``provider``
    setting, or a ``--provider`` flag), or :func:`machine_provider` for ``"auto"`` / None.

    The one answer both the download (which variant to fetch: ``ModelLibrary.provider``) and
    the load (which graph to read and where to run it: ``Engine.load``) ask, so what is
    downloaded is what the setting loads."""
    return machine_provider() if choice in (None, "", "auto") else choice
