"""Resumable, verified model downloads from the Hugging Face Hub (or a mirror).

Each file is fetched with plain HTTP Range requests into ``<staging>/<model id>/<path>.part``,
so a crash, a restart or a network cut resumes from the bytes already on disk. Transient
failures (5xx, 429, timeouts, dropped connections) are retried with bounded exponential
backoff. Pause, resume and cancel come from any thread through a ``DownloadControl`` and are
checked on every chunk; socket timeouts are short so nothing hangs. Free disk space is checked
before starting and while writing. Every file is verified (sha256 for LFS files, the git blob
sha1 otherwise) before the model is moved into the store with one atomic rename; a corrupt
file is fetched again once, and never installed.

The server is not trusted: every listed path is confined to the model's folder (the listing
is refused otherwise), a body longer than the listed size is an error (never a retry), redirects
are bounded, a ``Retry-After`` is honoured up to a minute, every file is hashed again right
before the install, and one model is downloaded by one process at a time (a lock file in the
staging folder; a second download of it waits). A models folder on another disk than the
staging folder must have room for the copy, and a failed copy keeps the downloaded files.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import filelock
import httpx2

from app import paths
from app.errors import DiskFullError, DownloadError
from app.fileio import read_json, write_json_atomic
from app.jobs import JobCancelled, JobControl
from app.manifest import Manifest, source
from app.models.catalog import CatalogEntry, Variant
from app.models.hub import (
    MAX_REDIRECTS,
    MAX_RETRY_AFTER_S,
    HubClient,
    RemoteFile,
    gated_error,
    is_commit,
    parse_retry_after,
    repo_path_problem,
)
from app.models.installed import InstalledModel
from app.models.repo_graphs import graph_variants, missing_graphs
from app.models.revision_record import RevisionRecord
from app.units import format_bytes

STATE_NAME = ".hearth-download.json"
PART_SUFFIX = ".part"
LOCK_SUFFIX = ".lock"  # <staging>/<model id>.lock: held by the process downloading that model


def free_space(path: Path) -> int:
    """Free bytes on the file system holding ``path`` (tests patch this probe)."""
    return shutil.disk_usage(path).free


def same_filesystem(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are on one file system, so a rename moves without copying
    (tests patch this probe)."""
    return os.stat(a).st_dev == os.stat(b).st_dev


class InstallTarget(Protocol):
    """Where a download's verified files go: the model library (``ModelLibrary``), which
    builds the downloader and hands itself over, so this module never imports it. The
    downloader checks ``get`` again under its cross-process lock and installs there, so two
    processes never both install one model."""

    @property
    def root(self) -> Path: ...

    def get(self, model_id: str) -> InstalledModel | None: ...

    def install_from_staging(self, staging: Path, manifest: Manifest) -> InstalledModel: ...


# Downloads are jobs: the job's control and its cancel exception are the downloader's.
DownloadCancelled = JobCancelled
DownloadControl = JobControl


@dataclass(frozen=True)
class DownloadProgress:
    """One progress report for a model. ``state`` is one of: resolving, waiting (another
    process downloads the same model), downloading, retrying, paused, verifying, installing,
    done."""

    model_id: str
    state: str
    bytes_done: int
    bytes_total: int
    rate_bps: float = 0.0
    eta_s: float | None = None
    file: str | None = None
    message: str | None = None

    @property
    def fraction(self) -> float:
        return self.bytes_done / self.bytes_total if self.bytes_total else 0.0


ProgressCallback = Callable[[DownloadProgress], None]


@dataclass(frozen=True)
class DownloadRequest:
    """What to download and how to describe it once installed."""

    model_id: str
    name: str
    repo: str
    revision: str
    variant: Variant
    format: str | None = None
    context_length: int | None = None
    parameters: int | None = None
    license: str | None = None
    #: the repo's whole file listing at ``revision`` (a commit) when the plan has listed it
    #: already (``ModelLibrary.plan_download`` for a Hub repo): the download reads it instead
    #: of listing the repo again
    listing: tuple[RemoteFile, ...] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_catalog(cls, entry: CatalogEntry, variant: Variant) -> DownloadRequest:
        return cls(
            model_id=entry.id,
            name=entry.name,
            repo=entry.repo,
            revision=entry.revision,
            variant=variant,
            format=entry.format,
            context_length=entry.context_length,
            parameters=entry.parameters,
            license=entry.license,
        )


@dataclass
class _Plan:
    request: DownloadRequest
    commit: str
    files: list[tuple[RemoteFile, str]]  # (remote file, local path)
    staging: Path
    state: dict = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(remote.size for remote, _ in self.files)


@dataclass(frozen=True)
class _FileTransfer:
    """One file of a plan on its way to disk: where it comes from and goes, who watches."""

    client: httpx2.Client
    plan: _Plan
    url: str
    remote: RemoteFile
    local: str  # path inside the model folder
    part: Path  # the partial file bytes are appended to
    meter: _Meter
    control: DownloadControl

    def held(self) -> int:
        return self.part.stat().st_size if self.part.exists() else 0


class _Retry(Exception):
    """A transient HTTP answer (5xx / 429): worth another try, after ``retry_after`` seconds
    when the server said so."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Meter:
    """Bytes done, rate over a sliding window, ETA; throttles reports."""

    def __init__(
        self, model_id: str, total: int, callback: ProgressCallback | None, interval_s: float
    ) -> None:
        self.model_id = model_id
        self.total = total
        self.done = 0
        self.callback = callback
        self.interval_s = interval_s
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self._last_emit = 0.0

    def rate(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def advance(self, n: int, file: str) -> None:
        self.done += n
        now = time.monotonic()
        self._samples.append((now, self.done))
        while len(self._samples) > 2 and now - self._samples[0][0] > 5.0:
            self._samples.popleft()
        if now - self._last_emit >= self.interval_s:
            self.emit("downloading", file=file)

    def emit(self, state: str, *, file: str | None = None, message: str | None = None) -> None:
        self._last_emit = time.monotonic()
        if self.callback is None:
            return
        rate = self.rate() if state == "downloading" else 0.0
        remaining = max(self.total - self.done, 0)
        eta = remaining / rate if rate > 0 else None
        self.callback(
            DownloadProgress(self.model_id, state, self.done, self.total, rate, eta, file, message)
        )


class Downloader:
    """Downloads one model at a time into the staging folder, then installs it into
    ``library`` (an :class:`InstallTarget`: the :class:`~app.models.library.ModelLibrary`
    that built it).

    ``endpoint`` / ``token``: the Hub or mirror to use and an optional access token.
    ``retries`` / ``backoff_s``: attempts without progress per file, and the first wait
    (doubled each time, capped at ``max_backoff_s``); a ``Retry-After`` answer waits what the
    server asks, up to ``max_retry_after_s``. ``read_timeout_s``: how long a silent
    connection is trusted. ``disk_reserve_bytes``: free space always left on the disk.
    """

    def __init__(
        self,
        library: InstallTarget,
        *,
        endpoint: str | None = None,
        token: str | None = None,
        staging_root: Path | None = None,
        retries: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        max_retry_after_s: float = MAX_RETRY_AFTER_S,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 20.0,
        chunk_size: int = 1 << 16,
        disk_reserve_bytes: int = 64 << 20,
        disk_check_every_bytes: int = 8 << 20,
        progress_interval_s: float = 0.2,
    ) -> None:
        self.library = library
        self.hub = HubClient(endpoint, token, retries=retries, backoff_s=backoff_s)
        self.staging_root = Path(staging_root) if staging_root else paths.staging_dir()
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_retry_after_s = max_retry_after_s
        self.timeout = httpx2.Timeout(
            connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=5.0
        )
        self.chunk_size = chunk_size
        self.disk_reserve_bytes = disk_reserve_bytes
        self.disk_check_every_bytes = disk_check_every_bytes
        self.progress_interval_s = progress_interval_s

    # -- public ----------------------------------------------------------------------

    def staging_folder(self, model_id: str) -> Path:
        return self.staging_root / model_id

    def discard_partial(self, model_id: str) -> None:
        """Delete what an unfinished download of ``model_id`` left (the one place that does)."""
        shutil.rmtree(self.staging_folder(model_id), ignore_errors=True)

    def download(
        self,
        request: DownloadRequest,
        *,
        progress: ProgressCallback | None = None,
        control: DownloadControl | None = None,
        keep_partial_on_cancel: bool | None = None,
    ) -> InstalledModel:
        """Fetch, verify and install ``request``; resumes whatever a previous run left.

        Raises DownloadError / DiskFullError (partial data kept for the next attempt) or
        DownloadCancelled (partial data deleted, unless ``keep_partial_on_cancel`` — by default
        the control's ``keep_partial``, set when the app quits mid-download). While another
        process downloads the same model this waits for it (state "waiting"), then returns
        what it installed or carries on where it stopped.
        """
        control = control or DownloadControl()
        existing = self.library.get(request.model_id)
        if existing is not None:
            return existing
        meter = _Meter(request.model_id, 0, progress, self.progress_interval_s)
        with self._exclusive(request, meter, control):  # cancelling the wait deletes nothing
            existing = self.library.get(request.model_id)
            if existing is None:  # else the other process installed it meanwhile
                try:
                    existing = self._download(request, meter, control)
                except DownloadCancelled:
                    keep = keep_partial_on_cancel
                    if not (control.keep_partial if keep is None else keep):
                        self.discard_partial(request.model_id)
                    raise
        meter.emit("done")
        return existing

    def _download(
        self, request: DownloadRequest, meter: _Meter, control: DownloadControl
    ) -> InstalledModel:
        meter.emit("resolving")
        plan = self._plan(request)
        meter.total = plan.total
        meter.done = self._bytes_on_disk(plan)
        self._check_disk(plan, plan.total - meter.done, request)
        self._check_install_disk(plan)
        headers = {**self.hub.auth_headers(), "Accept-Encoding": "identity"}
        with httpx2.Client(
            trust_env=True,
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            timeout=self.timeout,
            headers=headers,
        ) as client:
            for attempt in (1, 2):
                for remote, local in plan.files:
                    self._fetch_file(client, plan, remote, local, meter, control)
                control.checkpoint()
                meter.emit("installing")
                changed = self._changed_since_verified(plan)
                if not changed:
                    return self._install(plan)
                self._forget(plan, changed, meter)
                if attempt == 2:
                    raise DownloadError(
                        f"{', '.join(changed)} in {plan.staging} changed on disk after it was "
                        "verified, again after downloading it once more.",
                        hint="Something on this computer is changing the files (an antivirus, "
                        "a sync tool, another program); stop it and download again.",
                    )
                meter.emit(
                    "retrying",
                    file=changed[0],
                    message=f"{', '.join(changed)} changed on disk after it was verified; "
                    "downloading it again",
                )
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def _exclusive(
        self, request: DownloadRequest, meter: _Meter, control: DownloadControl
    ) -> Iterator[None]:
        """Hold ``<staging>/<model id>.lock`` (across processes), waiting while another
        process holds it; the wait stays pausable and cancellable."""
        self.staging_root.mkdir(parents=True, exist_ok=True)
        path = self.staging_root / f"{request.model_id}{LOCK_SUFFIX}"
        lock = filelock.FileLock(path, thread_local=False)
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            meter.emit(
                "waiting",
                message=f"{request.name} is being downloaded by another Hearth window or "
                "command; waiting for it to finish",
            )
            while True:
                control.checkpoint(on_pause=lambda: meter.emit("paused"))
                try:
                    lock.acquire(timeout=0.25)
                    break
                except filelock.Timeout:
                    continue
        try:
            yield
        finally:
            # Deleted while still held, so the staging folder is left clean: a waiter that
            # then locks the unlinked file sees it has no name and locks a new one (filelock
            # checks this), so two holders never exist. Windows refuses while it is open.
            with contextlib.suppress(OSError):
                path.unlink()
            lock.release()

    # -- planning --------------------------------------------------------------------

    def _plan(self, request: DownloadRequest) -> _Plan:
        variant = request.variant
        commit = request.revision
        if not is_commit(commit):  # the commit of the first download, else what main is now
            recorded = RevisionRecord(self.library.root).get(request.repo)
            commit = recorded or self.hub.resolve_revision(request.repo, request.revision)
        listed = self._listing(request, commit)
        missing = missing_graphs(variant, (f.path for f in listed))
        if missing:
            raise _missing_graph_error(request, commit, missing, listed)
        staging = self.staging_folder(request.model_id)
        files = [
            (f, self._confined(staging, f, variant.local_path(f.path)))
            for f in listed
            if variant.selects(f.path)
        ]
        if not files:
            raise DownloadError(
                f"{request.repo} at {commit[:12]} has no files for the variant '{variant.name}'.",
                hint="The catalog may be out of date; update Hearth or choose another variant.",
            )
        staging.mkdir(parents=True, exist_ok=True)
        state = read_json(staging / STATE_NAME)
        if (
            state.get("repo") != request.repo
            or state.get("commit") != commit
            or state.get("variant") != variant.name
        ):
            # Different content than what the partial files hold: start over.
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            state = {"repo": request.repo, "commit": commit, "variant": variant.name, "files": {}}
            write_json_atomic(staging / STATE_NAME, state)
        return _Plan(request, commit, files, staging, state)

    def _listing(self, request: DownloadRequest, commit: str) -> list[RemoteFile]:
        """The files of the request's repo at ``commit`` under its variant's subfolder: from
        the plan's listing when it was made at this commit, else listed now."""
        subfolder = request.variant.subfolder
        if request.listing is None or request.revision != commit:
            return self.hub.list_files(request.repo, commit, subfolder)
        if not subfolder:
            return list(request.listing)
        prefix = subfolder.rstrip("/") + "/"
        return [f for f in request.listing if f.path.startswith(prefix)]

    def _confined(self, staging: Path, remote: RemoteFile, local: str) -> str:
        """``local`` when it names a file inside ``staging`` (the model's folder), else a
        DownloadError: the listing is checked by the Hub client, this checks what the variant
        made of it."""
        problem = repo_path_problem(local)
        root = staging.resolve()
        if problem is None and not (root / local).resolve().is_relative_to(root):
            problem = "leads outside the model's folder"
        if problem:
            raise DownloadError(
                f"The Hub's listing names the file {remote.path!r}, which {problem}; Hearth "
                "does not download it.",
                hint="The server or mirror is broken or hostile; check the “Model download "
                "server” setting.",
            )
        return local

    def _bytes_on_disk(self, plan: _Plan) -> int:
        done = 0
        for remote, local in plan.files:
            final = plan.staging / local
            part = final.with_name(final.name + PART_SUFFIX)
            if self._is_verified(plan, remote, local):
                done += remote.size
            elif part.exists():
                done += min(part.stat().st_size, remote.size)
        return done

    def _is_verified(self, plan: _Plan, remote: RemoteFile, local: str) -> bool:
        entry = plan.state["files"].get(local, {})
        final = plan.staging / local
        return bool(entry.get("sha256")) and final.exists() and final.stat().st_size == remote.size

    # -- one file --------------------------------------------------------------------

    def _fetch_file(
        self,
        client: httpx2.Client,
        plan: _Plan,
        remote: RemoteFile,
        local: str,
        meter: _Meter,
        control: DownloadControl,
    ) -> None:
        if self._is_verified(plan, remote, local):
            return
        final = plan.staging / local
        final.parent.mkdir(parents=True, exist_ok=True)
        part = final.with_name(final.name + PART_SUFFIX)
        url = self.hub.file_url(plan.request.repo, remote.path, plan.commit)
        job = _FileTransfer(client, plan, url, remote, local, part, meter, control)
        for attempt in (1, 2):
            self._transfer(job)
            meter.emit("verifying", file=local)
            sha256, problem = _verify(part, remote)
            if problem is None:
                os.replace(part, final)
                plan.state["files"][local] = {"sha256": sha256, "size": remote.size}
                write_json_atomic(plan.staging / STATE_NAME, plan.state)
                return
            # Corrupt: throw the bytes away and fetch the file once more.
            meter.done -= remote.size
            part.unlink(missing_ok=True)
            plan.state["files"].pop(local, None)
            write_json_atomic(plan.staging / STATE_NAME, plan.state)
            if attempt == 2:
                raise DownloadError(
                    f"{url} was downloaded twice and failed verification both times ({problem}).",
                    hint="The server or a proxy is corrupting data; try another network or "
                    "mirror (the “Model download server” setting).",
                )
            meter.emit(
                "retrying",
                file=local,
                message=f"{local} was corrupt ({problem}); downloading it again",
            )

    def _transfer(self, job: _FileTransfer) -> None:
        """Bring ``job.part`` to ``job.remote.size`` bytes, resuming and retrying as needed."""
        remote, part, meter, control = job.remote, job.part, job.meter, job.control
        failures = 0
        last_error = ""
        while True:
            control.checkpoint(on_pause=lambda: meter.emit("paused", file=job.local))
            have = job.held()
            if have > remote.size:
                meter.done -= have
                part.unlink()
                have = 0
            if have == remote.size:
                return
            try:
                progressed = self._request_range(job, have)
                if control.should_stop_transfer():
                    continue
                if not progressed:
                    raise _Retry("the server sent no data")
            except httpx2.TooManyRedirects as exc:
                raise DownloadError(
                    f"{job.url} redirected more than {MAX_REDIRECTS} times.",
                    hint="Check the “Model download server” setting (Settings ▸ Models): it "
                    "must point to a Hugging Face Hub or mirror.",
                ) from exc
            except (_Retry, httpx2.TransportError) as exc:
                last_error = _describe(exc)
                failures = 1 if job.held() > have else failures + 1
                if failures > self.retries:
                    raise DownloadError(
                        f"Downloading {job.url} failed after {failures} attempts ({last_error}).",
                        hint="Check your internet connection or proxy settings, then start the "
                        "download again: it resumes where it stopped.",
                    ) from exc
                delay = min(self.backoff_s * 2 ** (failures - 1), self.max_backoff_s)
                asked = exc.retry_after if isinstance(exc, _Retry) else None
                if asked is not None:
                    delay = min(asked, self.max_retry_after_s)
                    last_error += f"; the server asked to wait {asked:.0f} s"
                meter.emit(
                    "retrying", file=job.local, message=f"{last_error}; retrying in {delay:.1f} s"
                )
                control.sleep(delay)

    def _request_range(self, job: _FileTransfer, have: int) -> bool:
        """One GET from byte ``have``; returns whether any byte was written."""
        plan, url, part, meter, control = job.plan, job.url, job.part, job.meter, job.control
        headers = {}
        entry = plan.state["files"].setdefault(job.local, {})
        if have:
            headers["Range"] = f"bytes={have}-"
            etag = entry.get("etag")
            if etag and not etag.startswith("W/"):
                headers["If-Range"] = etag
        with job.client.stream("GET", url, headers=headers) as response:
            status = response.status_code
            if status == 416 and have:
                # Nothing past what we hold: the part is stale or complete; start clean.
                meter.done -= have
                part.unlink(missing_ok=True)
                return True
            if status in (429,) or status >= 500:
                raise _Retry(
                    f"HTTP {status}", parse_retry_after(response.headers.get("retry-after"))
                )
            if status in (401, 403):
                raise gated_error(url, plan.request.repo, status)
            if status == 404:
                raise DownloadError(
                    f"{url} was not found (HTTP 404).",
                    hint="The catalog may be out of date, or the mirror lacks this file.",
                )
            if status not in (200, 206):
                raise DownloadError(
                    f"{url} answered HTTP {status}.",
                    hint="Try again later, or check the “Model download server” setting.",
                )
            mode = "ab"
            if status == 206:
                start = _content_range_start(response.headers.get("content-range"))
                if start != have:
                    raise _Retry(f"the server resumed at byte {start}, not {have}")
            elif have:  # 200: a full body (the file changed, or no Range support)
                meter.done -= have
                mode = "wb"
            expected = job.remote.size - (have if status == 206 else 0)
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > expected:
                raise self._oversize(job, f"announced {int(length)} bytes where {expected} remain")
            etag = response.headers.get("etag")
            if etag and etag != entry.get("etag"):
                entry["etag"] = etag
                write_json_atomic(plan.staging / STATE_NAME, plan.state)
            written = 0
            since_check = 0
            try:
                with open(part, mode) as handle:
                    for chunk in response.iter_bytes(self.chunk_size):
                        if written + len(chunk) > expected:
                            handle.close()
                            raise self._oversize(job, f"sent more than the {expected} bytes left")
                        handle.write(chunk)
                        written += len(chunk)
                        since_check += len(chunk)
                        meter.advance(len(chunk), job.local)
                        if since_check >= self.disk_check_every_bytes:
                            since_check = 0
                            handle.flush()
                            self._check_disk(plan, meter.total - meter.done, plan.request)
                        if control.should_stop_transfer():
                            break
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise self._disk_full(plan, part.parent, meter.total - meter.done) from exc
                raise
            return written > 0

    def _oversize(self, job: _FileTransfer, what: str) -> DownloadError:
        """A body longer than the listed size: the part is thrown away, nothing is retried."""
        job.meter.done -= job.held()
        job.part.unlink(missing_ok=True)
        return DownloadError(
            f"{job.url} {what}: the listing says {job.local} has {job.remote.size} bytes.",
            hint="The server does not match its own file listing; try again later or use "
            "another mirror (the “Model download server” setting).",
        )

    # -- disk ------------------------------------------------------------------------

    def _check_disk(self, plan: _Plan, remaining: int, request: DownloadRequest) -> None:
        free = free_space(plan.staging)
        if free < remaining + self.disk_reserve_bytes:
            raise self._disk_full(plan, plan.staging, remaining)

    def _check_install_disk(self, plan: _Plan) -> None:
        """A models folder on another file system gets a copy of the whole model: it needs
        room for all of it (the staging folder's check covers only what is still missing)."""
        root = self.library.root
        if same_filesystem(plan.staging, root):
            return
        free = free_space(root)
        if free < plan.total + self.disk_reserve_bytes:
            raise DiskFullError(
                f"Not enough free disk space to install {plan.request.name}: the models folder "
                f"{root} is on another disk than the download folder {plan.staging}, so the "
                f"finished model ({format_bytes(plan.total)}) is copied there, and it has "
                f"{format_bytes(free)} free.",
                hint="Free some space there, or choose a models folder on the same disk in "
                "Settings; the download resumes where it stopped.",
            )

    def _disk_full(self, plan: _Plan, folder: Path, remaining: int) -> DiskFullError:
        try:
            free = free_space(folder)
        except OSError:
            free = 0
        return DiskFullError(
            f"Not enough free disk space to download {plan.request.name}: it needs "
            f"{format_bytes(remaining)} more and {folder} has {format_bytes(free)} free.",
            hint="Free some space and start the download again; it resumes where it stopped.",
        )

    # -- install ---------------------------------------------------------------------

    def _changed_since_verified(self, plan: _Plan) -> list[str]:
        """The staged files whose bytes no longer match the listing or the hash recorded
        when they were verified (hashed again now, right before the install)."""
        changed = []
        for remote, local in plan.files:
            final = plan.staging / local
            recorded = plan.state["files"].get(local, {}).get("sha256")
            if not final.is_file():
                changed.append(local)
                continue
            sha256, problem = _verify(final, remote)
            if problem is not None or sha256 != recorded:
                changed.append(local)
        return changed

    def _forget(self, plan: _Plan, locals_: list[str], meter: _Meter) -> None:
        sizes = {local: remote.size for remote, local in plan.files}
        for local in locals_:
            (plan.staging / local).unlink(missing_ok=True)
            plan.state["files"].pop(local, None)
            meter.done -= sizes[local]
        write_json_atomic(plan.staging / STATE_NAME, plan.state)

    def _install(self, plan: _Plan) -> InstalledModel:
        request = plan.request
        files = [
            {"path": local, "size": remote.size, "sha256": plan.state["files"][local]["sha256"]}
            for remote, local in plan.files
        ]
        manifest = Manifest(
            id=request.model_id,
            name=request.name,
            source=source(
                "hub",
                repo=request.repo,
                revision=plan.commit,
                variant=request.variant.name,
                path=request.variant.subfolder,
                endpoint=self.hub.endpoint,
            ),
            format=request.format,
            files=files,
            context_length=request.context_length,
            parameters=request.parameters,
            license=request.license,
        )
        (plan.staging / STATE_NAME).unlink(missing_ok=True)
        try:
            installed = self.library.install_from_staging(plan.staging, manifest)
            RevisionRecord(self.library.root).remember(request.repo, plan.commit)
            return installed
        except BaseException:  # the files stay for the next attempt, so does their record
            if plan.staging.is_dir():
                write_json_atomic(plan.staging / STATE_NAME, plan.state)
            raise


# -- verification ----------------------------------------------------------------------


def _missing_graph_error(request: DownloadRequest, commit: str, missing: list[str],
                         listed: list[RemoteFile]) -> DownloadError:
    """The refusal for a variant whose graph the repo does not hold (nothing downloaded)."""
    others = graph_variants(f.path for f in listed)
    where = f"{request.repo} at {commit[:12]}"
    sentence = (f"{where} has no {', '.join(missing)}, the graph of the variant "
                f"'{request.variant.name}', so nothing was downloaded.")
    if not others:
        return DownloadError(sentence, hint="The repository holds no ONNX graph Hearth can "
                             "load; the catalog may be out of date.")
    offered = ", ".join(f"{precision} ({path})" for precision, path in others)
    return DownloadError(
        sentence,
        hint=f"The repository has these variants: {offered}. Download one with "
        f"hearth models download {request.repo} --variant {others[0][0]}.",
    )


def _verify(path: Path, remote: RemoteFile) -> tuple[str, str | None]:
    """(sha256 of the file, None) when it matches the Hub's record, else (sha256, problem)."""
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(f"blob {size}\0".encode())
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            sha256.update(chunk)
            blob.update(chunk)
    digest = sha256.hexdigest()
    if size != remote.size:
        return digest, f"size {size} instead of {remote.size}"
    if remote.sha256:
        if digest != remote.sha256.lower():
            return digest, "sha256 mismatch"
    elif remote.blob_id and len(remote.blob_id) == 40 and blob.hexdigest() != remote.blob_id:
        return digest, "git hash mismatch"
    return digest, None


def _content_range_start(value: str | None) -> int | None:
    # "bytes 100-199/200"
    if not value or not value.startswith("bytes "):
        return None
    try:
        return int(value[6:].split("-", 1)[0])
    except ValueError:
        return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx2.TimeoutException):
        return "the connection timed out"
    if isinstance(exc, httpx2.ConnectError):
        return "cannot connect"
    if isinstance(exc, httpx2.TransportError):
        return f"the connection broke ({type(exc).__name__})"
    return str(exc)


__all__ = [
    "DownloadCancelled",
    "DownloadControl",
    "DownloadProgress",
    "DownloadRequest",
    "Downloader",
    "free_space",
]
