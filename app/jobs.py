"""Long jobs (downloads, imports, conversions, the starter setup) in plain Python.

A ``Job`` is a function that reports ``Progress`` and honours a ``JobControl``; the Qt side
(app/workers/job_worker.py) only runs it on a worker thread and turns its outcome into
signals. Keeping this free of Qt lets the CLI run the very same jobs in the foreground.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class JobCancelled(Exception):
    """The user cancelled the job (not an error: nothing to report)."""


@dataclass(frozen=True)
class Progress:
    """How far a job is: what its progress bar and status line show.

    ``fraction`` is 0..1, or None while the amount of work is unknown (a busy bar).
    ``state`` is a word the view may style ("running", "paused", "retrying", "verifying",
    "installing", "done"); ``message`` is the sentence to show."""

    fraction: float | None = None
    message: str = ""
    state: str = "running"

    @property
    def percent(self) -> int:
        """0..100, or -1 while unknown."""
        if self.fraction is None:
            return -1
        return max(0, min(100, int(self.fraction * 100)))


ProgressReport = Callable[[Progress], None]


class JobControl:
    """Pause / resume / cancel, safe to call from any thread; a job notices them at its next
    ``checkpoint`` (downloads: every chunk) or, while it sleeps, at once."""

    def __init__(self) -> None:
        self.keep_partial = False  # set by a cancel that means "stop for now", not "give up"
        self._cancelled = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._wake = threading.Event()

    def pause(self) -> None:
        self._running.clear()
        self._wake.set()

    def resume(self) -> None:
        self._running.set()
        self._wake.set()

    def cancel(self, *, keep_partial: bool = False) -> None:
        """Stop at the next checkpoint. ``keep_partial``: the app is quitting, so work done so
        far (a partial download) stays for next time."""
        self.keep_partial = keep_partial
        self._cancelled.set()
        self._running.set()
        self._wake.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def should_stop_transfer(self) -> bool:
        return self.cancelled or self.paused

    def checkpoint(self, on_pause: Callable[[], None] | None = None) -> None:
        """Raise JobCancelled when cancelled; block while paused."""
        if self.paused and on_pause is not None:
            on_pause()
        while not self._running.wait(0.5):
            pass
        if self.cancelled:
            raise JobCancelled

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake at once on cancel or pause; raise JobCancelled when cancelled."""
        self._wake.clear()
        self._wake.wait(seconds)
        if self.cancelled:
            raise JobCancelled


JobWork = Callable[[ProgressReport, JobControl], Any]


@dataclass
class Job:
    """One unit of background work.

    ``work(report, control)`` returns the job's result or raises: ``JobCancelled`` when it
    stopped on request (``control.keep_partial`` tells it whether to keep what it did so far),
    ``HearthError`` with a sentence for the user, anything else is a bug. ``pausable`` says
    whether the view offers Pause."""

    job_id: str
    title: str
    work: JobWork
    pausable: bool = False
    control: JobControl = field(default_factory=JobControl)
