"""Huge pages for the weights: which mappings qualify, and the kernel really backs them."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest

from app.engine import huge_pages
from app.engine.engine import Engine
from app.engine.huge_pages import (
    HUGE_PAGE,
    parse_smaps,
    thp_unavailable,
    worth_huge_pages,
)

SMAPS = """\
55d0a0000000-55d0a0c00000 rw-p 00000000 00:00 0                          [heap]
Size:              12288 kB
Rss:                1024 kB
7f0000000000-7f0004000000 rw-p 00000000 00:00 0
Size:              65536 kB
Rss:               50000 kB
AnonHugePages:         0 kB
7f1000000000-7f1000800000 rw-p 00000000 00:00 0
Size:               8192 kB
Rss:                  32 kB
7f2000000000-7f2001c00000 rw-p 00000000 08:01 1234    /models/model.onnx.data
Size:              28672 kB
Rss:               28672 kB
7f3000000000-7f3000100000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                1024 kB
7f4000000000-7f4004000000 r--p 00000000 00:00 0
Size:              65536 kB
Rss:               65536 kB
7ffd00000000-7ffd00800000 rw-p 00000000 00:00 0                          [stack]
Size:               8192 kB
Rss:                8192 kB
"""


def test_smaps_parsing_keeps_addresses_paths_and_resident_sizes():
    mappings = list(parse_smaps(SMAPS.splitlines(keepends=True)))
    assert [m.path for m in mappings] == [
        "[heap]", "", "", "/models/model.onnx.data", "", "", "[stack]"]
    assert mappings[1].size == 64 << 20 and mappings[1].rss == 50000 * 1024
    assert mappings[3].inode == 1234


def test_only_populated_anonymous_memory_and_the_heap_qualify():
    chosen = [m for m in parse_smaps(SMAPS.splitlines()) if worth_huge_pages(m)]
    # the heap (grows), the 64 MiB mostly-resident chunk (weights); not a sparse reservation
    # (a thread stack), a file mapping, a mapping smaller than one huge page, read-only
    # memory or the main stack
    assert [(m.path, m.size >> 20) for m in chosen] == [("[heap]", 12), ("", 64)]


def test_a_sparse_heap_is_advised_but_not_collapsed(monkeypatch):
    calls = []
    heap = "00600000-01600000 rw-p 00000000 00:00 0    [heap]\nRss:  1024 kB\n"
    monkeypatch.setattr(huge_pages, "thp_unavailable", lambda: "")
    monkeypatch.setattr(huge_pages, "_madvise",
                        lambda: lambda start, size, advice: calls.append(advice) or 0)
    monkeypatch.setattr(huge_pages, "open", lambda *a, **k: io.StringIO(heap), raising=False)

    report = huge_pages.back_with_huge_pages()

    assert calls == [huge_pages.MADV_HUGEPAGE]  # no MADV_COLLAPSE: it would fill 15 MiB
    assert report.advised_bytes == 16 << 20 and report.collapsed_bytes == 0


def test_huge_page_span_covers_only_whole_aligned_pages():
    heap = next(parse_smaps(SMAPS.splitlines()))
    start, end = heap.huge_page_span()
    assert start % HUGE_PAGE == 0 and end % HUGE_PAGE == 0
    assert heap.start <= start < end <= heap.end


def _anon_huge_bytes(address: int) -> int:
    """AnonHugePages of the mapping that holds ``address``, from this process's smaps."""
    current = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            current = lo <= address < hi
        elif current and line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    return 0


def _kernel_collapses() -> bool:
    """MADV_COLLAPSE exists from Linux 6.1."""
    numbers = re.match(r"(\d+)\.(\d+)", os.uname().release) if hasattr(os, "uname") else None
    return bool(numbers) and (int(numbers[1]), int(numbers[2])) >= (6, 1)


_COLLAPSE_CHILD = r"""
import ctypes, json, sys
import numpy as np
from app.engine.huge_pages import HUGE_PAGE, back_with_huge_pages
from tests.engine.test_huge_pages import _anon_huge_bytes

# 64 MiB from plain malloc, as ORT allocates weights (numpy would advise its own arrays)
buffer = ctypes.create_string_buffer(64 << 20)
weights = np.frombuffer(buffer, dtype=np.float32)
weights[:] = np.arange(weights.size, dtype=np.float32)
inside = ctypes.addressof(buffer) + (8 << 20)
before = _anon_huge_bytes(inside)
report = back_with_huge_pages(budget_s=10.0)
print(json.dumps({
    "before": before, "after": _anon_huge_bytes(inside), "huge_page": HUGE_PAGE,
    "intact": bool(np.array_equal(weights, np.arange(weights.size, dtype=np.float32))),
    "advised": report.advised_bytes, "collapsed": report.collapsed_bytes,
    "summary": report.summary(),
}))
"""


@pytest.mark.skipif(bool(thp_unavailable()) or not _kernel_collapses(),
                    reason="needs Linux >= 6.1 with transparent huge pages")
def test_populated_memory_is_rebuilt_on_huge_pages_with_its_contents_intact():
    # in a fresh process: in the suite's own, earlier models' memory shares (and spends the
    # time budget on) the mappings the buffer would join
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _COLLAPSE_CHILD], cwd=root, check=True,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # at least half of the 64 MiB now on 2 MiB pages
    assert result["after"] >= result["before"] + 16 * result["huge_page"], result
    assert result["intact"]
    assert result["advised"] >= result["collapsed"] > 0
    assert "MiB rebuilt" in result["summary"]


def test_engine_load_says_why_it_used_no_huge_pages(gqa_model_dir, tmp_path, monkeypatch):
    # turned off, as a machine without them says (on any machine: the setting is faked)
    setting = tmp_path / "enabled"
    setting.write_text("always madvise [never]\n")
    monkeypatch.setattr(huge_pages, "_THP_SETTING", setting)
    engine = Engine.load(gqa_model_dir)
    assert engine.huge_pages.note == thp_unavailable() != ""
    assert engine.huge_pages.advised_bytes == 0
    assert Engine.load(gqa_model_dir, huge_pages=False).huge_pages.note == "not requested"


@pytest.mark.skipif(bool(thp_unavailable()), reason="this machine has no transparent huge "
                    "pages to advise (the note is tested above)")
def test_engine_load_advises_huge_pages_where_the_kernel_has_them(gqa_model_dir):
    engine = Engine.load(gqa_model_dir)
    assert engine.huge_pages.note == ""
    assert engine.huge_pages.advised_bytes > 0
