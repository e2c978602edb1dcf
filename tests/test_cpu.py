"""The CPU kind benchmarks print and per-machine choices key on."""

from __future__ import annotations

import pytest

from app.cpu import KINDS, cpu_kind, describe_machine, kind_from_flags


@pytest.mark.parametrize(("flags", "machine", "kind"), [
    ({"avx2", "avx512f", "avx512_vnni", "amx_int8", "amx_tile"}, "x86_64", "amx"),
    ({"avx2", "avx512f", "avx512_vnni"}, "x86_64", "avx512_vnni"),  # AMD EPYC Zen 4
    ({"avx2", "avx512f", "avx512vnni"}, "AMD64", "avx512_vnni"),  # numpy's spelling
    ({"avx2", "avx512f"}, "x86_64", "avx512"),
    ({"avx2", "fma", "avx_vnni"}, "x86_64", "avx_vnni"),  # Intel Alder Lake and later
    ({"avx2", "fma"}, "x86_64", "avx2"),  # AMD EPYC Zen 2/3
    ({"sse4_2"}, "x86_64", "x86"),
    ({"asimd", "asimddp"}, "aarch64", "neon"),  # Snapdragon X, Graviton
    (set(), "arm64", "neon"),  # Apple M-series
    (set(), "riscv64", "other"),
])
def test_the_kind_follows_the_instruction_sets(flags, machine, kind):
    assert kind_from_flags(flags, machine) == kind


def test_this_machine_has_a_kind_and_benchmarks_print_it():
    assert cpu_kind() in KINDS
    assert describe_machine().startswith(f"CPU: {cpu_kind()} (")
