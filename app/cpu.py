"""What kind of CPU this is, as far as ONNX Runtime's kernels care.

MLAS (ORT's CPU kernels) picks its MatMulNBits and SGEMM kernels by instruction set, and each
family rounds in its own way: on AVX2 a one-row int8 step rounds differently from a several-row
one, on AVX-512 VNNI it does not; Apple M-series and Snapdragon X run NEON (KleidiAI) kernels.
Benchmarks print :func:`cpu_kind` beside their figures, and per-machine choices key on it.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from pathlib import Path

#: From the most to the least capable; ``cpu_kind`` returns the first that applies.
#: ``avx_vnni``: AVX2 with the 256-bit VNNI dot products (Intel Alder Lake and later client
#: chips, AMD Zen 5 without AVX-512 enabled), for which MLAS has its own int8 kernels; only
#: Linux's flags name it (numpy's dispatch list does not), elsewhere such a CPU reads "avx2".
KINDS = ("amx", "avx512_vnni", "avx512", "avx_vnni", "avx2", "x86", "neon", "other")


def _linux_flags(cpuinfo: str) -> set[str]:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def _numpy_features() -> set[str]:
    """The instruction sets numpy's runtime dispatch found (every OS; no AMX there)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # numpy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_features__
        except ImportError:
            return set()
    return {name.lower() for name, present in __cpu_features__.items() if present}


def kind_from_flags(flags: set[str], machine: str) -> str:
    """The kind for a set of lower-case feature names (Linux ``/proc/cpuinfo`` flags or
    numpy's names) on an architecture named by ``platform.machine()``."""
    machine = machine.lower()
    if machine in ("arm64", "aarch64") or machine.startswith("armv8"):
        return "neon"
    if machine not in ("x86_64", "amd64", "x86", "i686", "i386"):
        return "other"
    if "amx_int8" in flags:
        return "amx"
    if "avx512_vnni" in flags or "avx512vnni" in flags:
        return "avx512_vnni"
    if "avx512f" in flags:
        return "avx512"
    if "avx_vnni" in flags and "avx2" in flags:
        return "avx_vnni"
    if "avx2" in flags:
        return "avx2"
    return "x86"


@functools.lru_cache(maxsize=1)
def cpu_kind() -> str:
    """One of :data:`KINDS`: ``amx`` / ``avx512_vnni`` / ``avx512`` / ``avx_vnni`` / ``avx2`` /
    ``x86`` / ``neon`` / ``other``."""
    flags: set[str] = set()
    if sys.platform.startswith("linux"):
        try:
            flags = _linux_flags(Path("/proc/cpuinfo").read_text(errors="replace"))
        except OSError:
            flags = set()
    if not flags:
        flags = _numpy_features()
    return kind_from_flags(flags, platform.machine())


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    """The processor's marketing name where the OS tells it, else the architecture."""
    if sys.platform.startswith("linux"):
        try:
            for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
        except OSError:
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def describe_machine() -> str:
    """One line for a benchmark's header: CPU kind, name and core count."""
    return f"CPU: {cpu_kind()} ({cpu_name()}, {os.cpu_count() or '?'} logical cores)"
