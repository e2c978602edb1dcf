"""Many PySide6 calls must not exhaust the references to None / True (PySide6 6.12 guard)."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, QTimer, Signal

import app.workers  # noqa: F401  (installs the guard)
from app.workers import qt_compat


class Emitter(QObject):
    text = Signal(str)


def test_hundreds_of_thousands_of_calls_do_not_abort():
    e = Emitter()
    seen = []
    e.text.connect(seen.append)
    timer = QTimer()
    before = sys.getrefcount(None)
    for i in range(200_000):  # without the guard: "Fatal Python error: none_dealloc"
        timer.stop()
        if i % 10 == 0:
            e.text.emit("x")
    assert len(seen) == 20_000
    if qt_compat.installed():
        assert sys.getrefcount(None) > 1 << 39
    else:
        assert abs(sys.getrefcount(None) - before) < 1000
