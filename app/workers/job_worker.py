"""Runs ``app.jobs.Job``s one after another on a worker thread and reports them as signals.

Every job reports the same way: ``progress(job_id, Progress)`` while it runs, then exactly one
of ``finished(job_id, result)``, ``failed(job_id, sentence)`` (a ``HearthError``: something
the user can act on) or ``cancelled(job_id)``. An unexpected exception is a bug: the user gets
``failed`` with a short sentence and the crash dialog gets ``crashed(details)``.

``JobRunner`` is the UI thread's side: it owns the thread, keeps the queue (one job per id),
sets pause / resume / cancel flags directly (thread-safe) and cancels everything on shutdown.
"""

from __future__ import annotations

import threading
import traceback

from PySide6.QtCore import QObject, Signal, Slot

from app.errors import HearthError
from app.jobs import Job, JobCancelled, Progress
from app.workers.thread_host import ThreadHost


class JobWorker(QObject):
    """Signals:
    started(str job_id): the job left the queue and is running.
    progress(str job_id, Progress)
    finished(str job_id, object result)
    failed(str job_id, str sentence): the job could not finish; the sentence says why.
    cancelled(str job_id): stopped on request (or by shutdown).
    crashed(str details): an unexpected exception (a bug) with its traceback.
    """

    started = Signal(str)
    progress = Signal(str, object)
    finished = Signal(str, object)
    failed = Signal(str, str)
    cancelled = Signal(str)
    crashed = Signal(str)

    @Slot(object)
    def run(self, job: Job) -> None:
        job_id = job.job_id
        if job.control.cancelled:
            self.cancelled.emit(job_id)
            return
        self.started.emit(job_id)

        def report(progress: Progress) -> None:
            self.progress.emit(job_id, progress)

        try:
            result = job.work(report, job.control)
        except JobCancelled:
            self.cancelled.emit(job_id)
        except HearthError as exc:
            self.failed.emit(job_id, str(exc))
        except Exception as exc:
            self.failed.emit(job_id, f"{job.title} stopped because of a bug: {exc}")
            self.crashed.emit(traceback.format_exc())
        else:
            self.finished.emit(job_id, result)


class JobRunner(QObject):
    """One job thread and its queue, seen from the UI thread.

    Signals: queued(str job_id). Everything else: connect to ``runner.worker``'s signals.
    """

    queued = Signal(str)

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self.worker = JobWorker()
        self._host = ThreadHost(self.worker, name, stop=self._cancel_all, parent=self)
        for signal in (self.worker.finished, self.worker.failed, self.worker.cancelled):
            signal.connect(self._forget)

    def submit(self, job: Job) -> bool:
        """Queue ``job``; False when a job with the same id is already queued or running."""
        with self._lock:
            if job.job_id in self._jobs:
                return False
            self._jobs[job.job_id] = job
        self.queued.emit(job.job_id)
        self._host.post(self.worker.run, job)
        return True

    def job(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def pending(self) -> list[str]:
        """Queued or running jobs, in queue order."""
        with self._lock:
            return list(self._jobs)

    @property
    def running(self) -> bool:
        """Whether the job thread is still running (False after shutdown)."""
        return self._host.running

    def pause(self, job_id: str) -> None:
        if (job := self.job(job_id)) is not None:
            job.control.pause()

    def resume(self, job_id: str) -> None:
        if (job := self.job(job_id)) is not None:
            job.control.resume()

    def cancel(self, job_id: str) -> None:
        if (job := self.job(job_id)) is not None:
            job.control.cancel()

    def _cancel_all(self) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:  # leaving, not giving up: partial work stays for next time
            job.control.cancel(keep_partial=True)

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Cancel every job (keeping what they did so far, e.g. partial downloads) → quit →
        wait."""
        return self._host.shutdown(timeout_ms)

    def _forget(self, job_id: str, *_: object) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)
