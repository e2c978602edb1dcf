"""Memory figures: psutil's where it is, /proc/meminfo and sysconf where it is not."""

from __future__ import annotations

import sys

import pytest

from app import memory


def test_available_memory_is_positive_and_below_the_total():
    total, available = memory.total_ram_bytes(), memory.available_ram_bytes()
    assert total is not None and available is not None
    assert 0 < available <= total


def test_without_psutil_linux_reads_mem_available(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil raises ImportError
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\n"
                       "MemAvailable:   20000000 kB\n", encoding="ascii")
    monkeypatch.setattr(memory, "_MEMINFO", meminfo)
    assert memory.available_ram_bytes() == 20_000_000 * 1024
    meminfo.write_text("MemTotal: 24000000 kB\n", encoding="ascii")  # a kernel without it
    assert memory.available_ram_bytes() is None
    monkeypatch.setattr(memory, "_MEMINFO", tmp_path / "missing")
    assert memory.available_ram_bytes() is None


@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no sysconf")
def test_without_psutil_the_total_comes_from_sysconf(monkeypatch):
    import os

    monkeypatch.setitem(sys.modules, "psutil", None)
    assert memory.total_ram_bytes() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
