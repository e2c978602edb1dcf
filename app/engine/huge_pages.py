"""Back the loaded weights with transparent huge pages (Linux).

A decode step reads every weight once. With 4 KiB pages that is one page-table walk per 4 KiB
of weights, tens of thousands per token, and under a hypervisor each walk is a nested one. ORT
allocates the weights with ``malloc``, and glibc asks the kernel for huge pages only when the
process was started with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``; most distributions ship
``transparent_hugepage=madvise``, so nobody asks. After a model is loaded, Hearth marks the
process's populated anonymous mappings ``MADV_HUGEPAGE`` (later faults there get huge pages)
and asks the kernel to rebuild what is already there with ``MADV_COLLAPSE`` (Linux ≥ 6.1), within
a time budget. Both are hints: contents never change, and any refusal leaves 4 KiB pages.

Measured on the starter model (2-core VM, 2 threads): decode 100-110 → 115-130 tokens/s
(``bench/bench_vs_genai.py``).
"""

from __future__ import annotations

import ctypes
import errno
import re
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

HUGE_PAGE = 2 << 20
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
_COLLAPSE_STEP = 32 << 20
_THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ (\d+)\s*(.*)$")


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    inode: int
    path: str
    rss: int = 0

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def anonymous_private(self) -> bool:
        """Writable private memory not backed by a file: malloc's heap and its mmap chunks."""
        return (self.perms.startswith("rw") and self.perms[3] == "p" and self.inode == 0
                and self.path in ("", "[heap]"))

    def huge_page_span(self) -> tuple[int, int] | None:
        """The part of the mapping that whole 2 MiB pages can cover, or None."""
        start = -(-self.start // HUGE_PAGE) * HUGE_PAGE
        end = self.end // HUGE_PAGE * HUGE_PAGE
        return (start, end) if end > start else None


@dataclass(frozen=True)
class HugePageReport:
    """What ``back_with_huge_pages`` did; ``note`` says why it did nothing, if it did not."""

    advised_bytes: int = 0
    collapsed_bytes: int = 0
    seconds: float = 0.0
    note: str = ""

    def summary(self) -> str:
        if self.note:
            return f"huge pages: {self.note}"
        return (f"huge pages: {self.collapsed_bytes >> 20} MiB rebuilt, "
                f"{self.advised_bytes >> 20} MiB advised in {self.seconds * 1000:.0f} ms")


def parse_smaps(lines: Iterable[str]) -> Iterator[Mapping]:
    """Mappings from ``/proc/PID/smaps`` text, each with its resident size."""
    current: dict | None = None
    for line in lines:
        header = _MAPPING.match(line)
        if header:
            if current is not None:
                yield Mapping(**current)
            current = {"start": int(header[1], 16), "end": int(header[2], 16),
                       "perms": header[3], "inode": int(header[4]), "path": header[5].strip()}
        elif current is not None and line.startswith("Rss:"):
            current["rss"] = int(line.split()[1]) * 1024
    if current is not None:
        yield Mapping(**current)


def populated(mapping: Mapping) -> bool:
    """At least half resident: collapsing it costs little memory that was not in use."""
    return mapping.rss * 2 >= mapping.size


def worth_huge_pages(mapping: Mapping) -> bool:
    """Anonymous memory that is mostly populated (weights), or the heap, which grows.

    Sparse mappings (thread stacks, reserved arenas) are left alone: a huge page there would
    populate memory that is never used. ``MADV_COLLAPSE`` fills holes, so only populated
    mappings are collapsed; a sparse heap is only advised.
    """
    return (mapping.anonymous_private and mapping.huge_page_span() is not None
            and (mapping.path == "[heap]" or populated(mapping)))


def thp_unavailable() -> str:
    """Why transparent huge pages cannot be used here, or "" if they can."""
    if not sys.platform.startswith("linux"):
        return "only used on Linux"
    try:
        setting = _THP_SETTING.read_text()
    except OSError:
        return "the kernel has no transparent huge pages"
    if "[never]" in setting:
        return "transparent huge pages are turned off ([never])"
    return ""


def _madvise():
    libc = ctypes.CDLL(None, use_errno=True)
    function = libc.madvise
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    return function


def back_with_huge_pages(*, budget_s: float = 2.0) -> HugePageReport:
    """Advise and collapse this process's populated anonymous memory onto huge pages.

    Collapsing copies memory (about 0.4 s for 200 MiB on a small VM), so it stops once
    ``budget_s`` is spent; advised mappings left over are collapsed later by khugepaged.
    """
    reason = thp_unavailable()
    if reason:
        return HugePageReport(note=reason)
    try:
        with open("/proc/self/smaps", encoding="ascii", errors="replace") as smaps:
            mappings = [m for m in parse_smaps(smaps) if worth_huge_pages(m)]
        madvise = _madvise()
    except (OSError, AttributeError) as exc:
        return HugePageReport(note=f"cannot inspect memory ({exc})")
    started = time.perf_counter()
    advised = collapsed = 0
    can_collapse = True
    for mapping in mappings:
        start, end = mapping.huge_page_span()
        if madvise(start, end - start, MADV_HUGEPAGE) != 0:
            continue
        advised += end - start
        at = start if populated(mapping) else end
        while can_collapse and at < end and time.perf_counter() - started < budget_s:
            step = min(_COLLAPSE_STEP, end - at)
            if madvise(at, step, MADV_COLLAPSE) != 0:
                # EINVAL: this mapping cannot be collapsed, or the kernel predates 6.1
                can_collapse = ctypes.get_errno() != errno.ENOMEM  # memory is short: stop
                break
            collapsed += step
            at += step
    return HugePageReport(advised_bytes=advised, collapsed_bytes=collapsed,
                          seconds=time.perf_counter() - started)
