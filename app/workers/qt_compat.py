"""Guard against a reference-count bug in PySide6 6.12.0 on Python < 3.12.

That abi3 wheel returns ``None`` from every void method and ``True`` from
``SignalInstance.emit`` without taking a reference, as if they were immortal (they are only
from Python 3.12 on). On Python 3.11 each such call drops a reference, and after enough
calls the interpreter aborts with "Fatal Python error: none_dealloc" (or "bool_dealloc").
A chat that streams a long reply makes tens of thousands of such calls.

``install()`` measures whether this PySide6 has the bug and, only then, gives ``None``,
``True`` and ``False`` the effectively-infinite reference count that Python 3.12 gives them
(they are never freed anyway: freeing them is itself a fatal error). Idempotent.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject, QTimer, Signal

_PROBE_CALLS = 200
_IMMORTAL_BOOST = 1 << 40  # what 3.12 calls immortal is 2**32 - 1 or more
_installed = False


class _Probe(QObject):
    ping = Signal()


def leaks_singleton_references() -> dict[str, int]:
    """References to None / True that this PySide6 drops per probe of _PROBE_CALLS calls."""
    timer = QTimer()
    before = sys.getrefcount(None)
    for _ in range(_PROBE_CALLS):
        timer.stop()  # a void method: returns None
    lost_none = before - sys.getrefcount(None)
    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(_PROBE_CALLS):
        probe.ping.emit()  # returns True
    lost_true = before - sys.getrefcount(True)
    return {"None": lost_none, "True": lost_true}


def _boost(obj: object) -> None:
    refcount = ctypes.c_ssize_t.from_address(id(obj))
    refcount.value += _IMMORTAL_BOOST


def install() -> bool:
    """Apply the guard if this interpreter and PySide6 need it; return whether it is on."""
    global _installed
    if _installed:
        return True
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    lost = leaks_singleton_references()
    if max(lost.values()) < _PROBE_CALLS // 2:
        return False
    for obj in (None, True, False):
        _boost(obj)
    _installed = True
    return True


def installed() -> bool:
    return _installed
