"""How much memory this machine has, and how much of it is free now."""

from __future__ import annotations

import os
from pathlib import Path

_MEMINFO = Path("/proc/meminfo")


def total_ram_bytes() -> int | None:
    """Physical memory, from psutil (a dependency; the fallbacks serve a stripped
    environment), else sysconf (None: unknown)."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def available_ram_bytes() -> int | None:
    """Memory a new allocation can take without swapping: psutil's ``available``, else
    Linux's MemAvailable (None: unknown)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
