"""Model downloads, GGUF imports and Hub searches off the UI thread.

``DownloadWorker`` lives on its own QThread and runs jobs one after another (the queue is
the thread's event queue): each download goes through ``app.models.downloader.Downloader``.
Pause, resume and cancel are ``DownloadControl`` flags the UI thread sets directly through
the host (thread-safe, checked on every chunk), never queued slots. A user cancel deletes
the partial data; shutting the app down cancels too but keeps it, so the download resumes
on the next start. ``SearchWorker`` answers Hub searches on a second thread so a search
never waits behind a download.
"""

from __future__ import annotations

import shutil
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from app.errors import HearthError
from app.models.downloader import DownloadCancelled, DownloadControl, Downloader, DownloadRequest
from app.models.hub import HubClient
from app.models.library import ModelLibrary, variant_for_repo

# -- jobs -------------------------------------------------------------------------------


@dataclass
class DownloadJob:
    """One queued download. ``request`` is None for a Hub repo not in the catalog: the
    worker then lists ``repo`` and picks a variant with :func:`variant_for_repo`."""

    model_id: str
    downloader: Downloader
    request: DownloadRequest | None = None
    repo: str | None = None
    provider: str = "cpu"
    control: DownloadControl = field(default_factory=DownloadControl)
    keep_partial: bool = False  # set by shutdown: cancelled, but resumable next time


@dataclass
class ImportJob:
    """Convert a GGUF file into an installed model."""

    model_id: str  # a label for the queue ("import:<file name>")
    path: Path
    store: ModelLibrary
    control: DownloadControl = field(default_factory=DownloadControl)


class DownloadWorker(QObject):
    """Runs download and import jobs on the download thread, one at a time.

    Signals:
        started(str model_id): the job left the queue and is running.
        progress(DownloadProgress): a throttled progress report (bytes, rate, ETA, state).
        finished(str model_id, InstalledModel): verified and installed.
        failed(str model_id, str message): a sentence for the user; partial data kept.
        cancelled(str model_id): stopped by the user (or by shutdown).
        crashed(str details): an unexpected exception (a bug) with its traceback.
    """

    started = Signal(str)
    progress = Signal(object)
    finished = Signal(str, object)
    failed = Signal(str, str)
    cancelled = Signal(str)
    crashed = Signal(str)

    @Slot(object)
    def on_job_requested(self, job: DownloadJob | ImportJob) -> None:
        if job.control.cancelled:
            self.cancelled.emit(job.model_id)
            return
        self.started.emit(job.model_id)
        try:
            if isinstance(job, ImportJob):
                model = job.store.import_gguf(job.path)
            else:
                model = self._download(job)
        except DownloadCancelled:
            self.cancelled.emit(job.model_id)
        except HearthError as exc:
            self.failed.emit(job.model_id, str(exc))
        except Exception as exc:
            self.failed.emit(job.model_id, f"{job.model_id} stopped because of a bug: {exc}")
            self.crashed.emit(traceback.format_exc())
        else:
            self.finished.emit(job.model_id, model)

    def _download(self, job: DownloadJob):
        request = job.request
        if request is None:
            request = self._hub_request(job)
        try:
            return job.downloader.download(
                request,
                progress=self.progress.emit,
                control=job.control,
                keep_partial_on_cancel=True,
            )
        except DownloadCancelled:
            if not job.keep_partial:
                shutil.rmtree(job.downloader.staging_folder(job.model_id), ignore_errors=True)
            raise

    def _hub_request(self, job: DownloadJob) -> DownloadRequest:
        assert job.repo is not None
        hub: HubClient = job.downloader.hub
        commit = hub.resolve_revision(job.repo, "main")
        job.control.checkpoint()
        variant = variant_for_repo(hub.list_files(job.repo, commit), job.provider)
        job.control.checkpoint()
        return DownloadRequest(
            model_id=job.model_id,
            name=job.repo.rsplit("/", 1)[-1],
            repo=job.repo,
            revision=commit,
            variant=variant,
        )


class DownloadHost(QObject):
    """Owns the download thread; the UI talks to the worker through it.

    Signals:
        job_requested(DownloadJob | ImportJob): queued to the worker.
        queued(str model_id): a job joined the queue.
        started, progress, finished, failed, cancelled, crashed: as on DownloadWorker,
            delivered on the host's thread.
    """

    job_requested = Signal(object)
    queued = Signal(str)
    started = Signal(str)
    progress = Signal(object)
    finished = Signal(str, object)
    failed = Signal(str, str)
    cancelled = Signal(str)
    crashed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._jobs: dict[str, DownloadJob | ImportJob] = {}
        self._lock = threading.Lock()
        self.thread = QThread()
        self.thread.setObjectName("hearth-downloads")
        self.worker = DownloadWorker()
        self.worker.moveToThread(self.thread)
        _wire(self, self.worker)
        for signal in (self.finished, self.failed):
            signal.connect(self._forget)
        self.cancelled.connect(self._forget)
        self.thread.start()

    # requests (UI thread) ------------------------------------------------------------------

    def enqueue(self, job: DownloadJob | ImportJob) -> bool:
        """Queue ``job``; False when a job for the same model is already queued or running."""
        with self._lock:
            if job.model_id in self._jobs:
                return False
            self._jobs[job.model_id] = job
        self.queued.emit(job.model_id)
        self.job_requested.emit(job)
        return True

    def job(self, model_id: str) -> DownloadJob | ImportJob | None:
        with self._lock:
            return self._jobs.get(model_id)

    def pending(self) -> list[str]:
        """Queued or running jobs, in queue order."""
        with self._lock:
            return list(self._jobs)

    def pause(self, model_id: str) -> None:
        """Thread-safe flag: the transfer stops at the next chunk and waits."""
        if (job := self.job(model_id)) is not None:
            job.control.pause()

    def resume(self, model_id: str) -> None:
        if (job := self.job(model_id)) is not None:
            job.control.resume()

    def cancel(self, model_id: str) -> None:
        """Thread-safe flag: the transfer stops at once; partial data is deleted."""
        if (job := self.job(model_id)) is not None:
            job.control.cancel()

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Cancel (keeping partial downloads for next time) → quit → wait."""
        if not self.thread.isRunning():
            return True
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            if isinstance(job, DownloadJob):
                job.keep_partial = True
            job.control.cancel()
        self.thread.quit()
        return self.thread.wait(timeout_ms)

    def _forget(self, model_id: str, *_: object) -> None:
        with self._lock:
            self._jobs.pop(model_id, None)


def _wire(host: DownloadHost, worker: DownloadWorker) -> None:
    """Every cross-thread connection, in one place; all queued."""
    queued = Qt.ConnectionType.QueuedConnection
    host.job_requested.connect(worker.on_job_requested, queued)
    worker.started.connect(host.started, queued)
    worker.progress.connect(host.progress, queued)
    worker.finished.connect(host.finished, queued)
    worker.failed.connect(host.failed, queued)
    worker.cancelled.connect(host.cancelled, queued)
    worker.crashed.connect(host.crashed, queued)


# -- Hub search -------------------------------------------------------------------------


class SearchWorker(QObject):
    """Signals: results(int ticket, list[HubModel]), failed(int ticket, str message)."""

    results = Signal(int, object)
    failed = Signal(int, str)

    @Slot(int, object, str)
    def on_search_requested(
        self, ticket: int, client_factory: Callable[[], HubClient], query: str
    ) -> None:
        try:
            found = client_factory().search(query)
        except HearthError as exc:
            self.failed.emit(ticket, str(exc))
        except Exception as exc:  # the panel must keep working
            self.failed.emit(ticket, f"The Hub search failed: {exc}")
        else:
            self.results.emit(ticket, found)


class SearchHost(QObject):
    """Owns the search thread. Only the answer to the latest search is relayed.

    Signals: search_requested(int, object, str) (queued to the worker);
    results(list[HubModel]); failed(str message).
    """

    search_requested = Signal(int, object, str)
    results = Signal(object)
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._ticket = 0
        self.thread = QThread()
        self.thread.setObjectName("hearth-hub-search")
        self.worker = SearchWorker()
        self.worker.moveToThread(self.thread)
        queued = Qt.ConnectionType.QueuedConnection
        self.search_requested.connect(self.worker.on_search_requested, queued)
        self.worker.results.connect(self._on_results, queued)
        self.worker.failed.connect(self._on_failed, queued)
        self.thread.start()

    def search(self, client_factory: Callable[[], HubClient], query: str) -> None:
        self._ticket += 1
        self.search_requested.emit(self._ticket, client_factory, query)

    def _on_results(self, ticket: int, found: object) -> None:
        if ticket == self._ticket:
            self.results.emit(found)

    def _on_failed(self, ticket: int, message: str) -> None:
        if ticket == self._ticket:
            self.failed.emit(message)

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """A search cannot be interrupted; its HTTP timeouts bound the wait."""
        if not self.thread.isRunning():
            return True
        self._ticket += 1  # drop any answer still coming
        self.thread.quit()
        return self.thread.wait(timeout_ms)
