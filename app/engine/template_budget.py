"""The limits of one chat-template render: output size, wall time, memory, and Stop.

Three independent layers, so that a template has to beat all of them at once:

1. **Sizes are predicted before anything is built.** Every value a template can make passes
   through a hook of the sandbox (operators, ``~``, list/tuple/dict literals, calls, filters,
   output, namespace assignment; see ``chat_template``). Each hook computes the size of the
   result *from its inputs* before running the operation and refuses when it would be larger
   than ``max_chars``. Sizes are "expanded weights" (:meth:`Budget.weigh`): a list that holds
   the same string twice weighs twice the string, so sharing references cannot hide a value
   whose ``str()``, ``tojson``, comparison or hash would explode. Every container a template
   builds is immutable (the immutable sandbox) and namespaces may not be nested inside
   containers, so a weight checked once stays true.
2. **A wall-clock deadline and the Stop event are checked inside the render**: on every line
   of the template's compiled code (a ``sys.settrace`` hook installed only on the rendering
   thread, only for ``<template>`` frames) and in every hook. A loop with an empty body, which
   calls nothing, is still interrupted; layer 1 keeps each single C-level operation small
   enough (at most ``max_chars`` elements) to finish quickly.
3. **Memory is measured**: the process's resident size (Linux ``/proc/self/statm``) is read
   every few hundred template lines and whenever the template has produced another few
   megabytes, and the render stops once it grew more than ``max_memory_bytes``. Where no
   resident size can be read, the total size of all produced values is capped instead.

A template reaches Python only through the sandbox, so it cannot remove the trace hook, call
an unwrapped function or build a value without a hook seeing it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from jinja2.utils import Namespace

_MAX_DEPTH = 64
_MAX_INT_BITS = 1 << 16
_LINES_PER_PROBE = 256
_PRODUCED_PER_PROBE = 1 << 20
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

CURRENT: ContextVar[Budget | None] = ContextVar("hearth_template_budget", default=None)
"""The budget of the render running on this thread (None outside a render)."""


class Exhausted(Exception):
    """Rendering went over a limit (the message completes "The chat template of X …")."""


class Stopped(Exhausted):
    """The Stop event was set during the render."""


class Budget:
    """Limits and running totals of one render."""

    def __init__(
        self,
        max_chars: int,
        time_limit_s: float,
        max_memory_bytes: int,
        stop: threading.Event | None = None,
    ) -> None:
        self.max_chars = max_chars
        self.time_limit_s = time_limit_s
        self.max_memory_bytes = max_memory_bytes
        self.stop = stop
        self.deadline = time.monotonic() + time_limit_s
        self._weights: dict[int, tuple[Any, int]] = {}
        self._lines = 0
        self._produced = 0
        self._produced_at_probe = 0
        self._statm = _open_statm()
        self._rss_start = self._rss()
        self._max_produced = max(64 * max_chars, max_memory_bytes)

    def close(self) -> None:
        self._weights.clear()
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None

    # -- time ----------------------------------------------------------------------------

    def check_time(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Stopped("was stopped before it finished")
        if time.monotonic() > self.deadline:
            raise Exhausted(f"ran for more than {self.time_limit_s:g} s")

    def line(self) -> None:
        """Called by the trace hook on every template line."""
        self.check_time()
        self._lines += 1
        if self._lines % _LINES_PER_PROBE == 0:
            self._probe_memory()
            # A traced loop hands the interpreter lock on too rarely (the UI thread waited
            # 0.4 s for it behind a long render): let the other threads run now.
            time.sleep(0)

    # -- memory --------------------------------------------------------------------------

    def _rss(self) -> int | None:
        if self._statm is None:
            return None
        try:
            fields = os.pread(self._statm, 128, 0).split()
            return int(fields[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            return None

    def _probe_memory(self) -> None:
        self._produced_at_probe = self._produced
        rss = self._rss()
        if rss is not None and self._rss_start is not None:
            grown = rss - self._rss_start
            if grown > self.max_memory_bytes:
                raise Exhausted(f"used more than {self.max_memory_bytes // 2**20} MB of memory")

    def produced(self, weight: int) -> None:
        """Account for a newly built value of ``weight``."""
        self._produced += weight
        if self._rss_start is None and self._produced > self._max_produced:
            raise Exhausted(f"built more than {self._max_produced:,} characters in total")
        if self._produced - self._produced_at_probe > _PRODUCED_PER_PROBE:
            self._probe_memory()

    # -- sizes ---------------------------------------------------------------------------

    def need(self, size: int, what: str = "a value") -> None:
        """Refuse to build something of predicted ``size``."""
        if size > self.max_chars:
            raise Exhausted(f"asked for {what} of {size:,} characters (at most {self.max_chars:,})")

    def need_int_bits(self, bits: int) -> None:
        if bits > _MAX_INT_BITS:
            raise Exhausted(f"asked for a number of {bits:,} bits (at most {_MAX_INT_BITS:,})")

    def admit(self, value: Any) -> Any:
        """Check a value the template has just built and count it; returns it unchanged."""
        self.check_time()
        weight = self.weigh(value)
        self.produced(weight)
        return value

    def admit_known(self, value: list | tuple, weight: int) -> Any:
        """Like :meth:`admit` for a container whose weight the caller computed from its
        operands (``a + b``, ``a * n``), without walking it again."""
        self.check_time()
        self._weights[id(value)] = (value, weight)
        self.produced(weight)
        return value

    def weigh(self, value: Any, depth: int = 0) -> int:
        """The expanded size of ``value`` (about the length of its ``repr``), refusing values
        above ``max_chars``, nested more than 64 deep, or namespaces inside containers."""
        if isinstance(value, str | bytes | bytearray):
            weight = len(value) + 2
        elif value is None or isinstance(value, bool | float):
            weight = 5
        elif isinstance(value, int):
            self.need_int_bits(value.bit_length())
            weight = value.bit_length() // 3 + 2
        elif isinstance(value, range):
            weight = 8 * len(value) + 2
        elif isinstance(value, Namespace):
            if depth:
                raise Exhausted("put a namespace inside another value, which is not allowed")
            attrs = object.__getattribute__(value, "_Namespace__attrs")
            weight = 2 + sum(self.weigh(k, 1) + self.weigh(v, 1) for k, v in attrs.items())
        elif isinstance(value, Mapping | list | tuple):
            weight = self._weigh_container(value, depth)
        else:  # functions, macros, undefined, loop objects, lazy iterators
            weight = 2
        if weight > self.max_chars:
            raise Exhausted(f"built a value of more than {self.max_chars:,} characters")
        return weight

    def _weigh_container(self, value: Any, depth: int) -> int:
        cached = self._weights.get(id(value))
        if cached is not None and cached[0] is value:
            return cached[1]
        if depth >= _MAX_DEPTH:
            raise Exhausted(f"nested values more than {_MAX_DEPTH} deep")
        weight = 2
        items = value.items() if isinstance(value, Mapping) else ((v, None) for v in value)
        for n, (key, item) in enumerate(items):
            if n % 65536 == 65535:
                self.check_time()
            weight += self.weigh(key, depth + 1) + 2
            if item is not None:
                weight += self.weigh(item, depth + 1)
            if weight > self.max_chars:
                raise Exhausted(f"built a value of more than {self.max_chars:,} characters")
        self._weights[id(value)] = (value, weight)  # the value is kept alive: ids stay unique
        return weight


def current() -> Budget | None:
    return CURRENT.get()


def _open_statm() -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:
        return None


class CheckedNamespace(Namespace):
    """``namespace()`` whose attribute assignment (``{% set ns.x = … %}``) is size-checked."""

    def __setitem__(self, name: str, value: Any) -> None:
        budget = CURRENT.get()
        if budget is not None:
            budget.check_time()
            budget.weigh(value, 1)
            super().__setitem__(name, value)
            budget.weigh(self)
            return
        super().__setitem__(name, value)
