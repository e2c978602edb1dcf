"""The model controller: the twin of ChatController for models on disk.

Lives on the UI thread. It owns the model library's jobs (downloads, GGUF and folder
imports, the starter setup) on one job thread and Hub searches on another, and exposes the
user's intents as methods: ``download_catalog``, ``download_repo``, ``use``, ``remove``,
``import_folder``, ``import_gguf``, ``update_model`` (an import converted in an older form,
converted again from its file), ``setup_starter``, ``search``, and, in a section of
their own, the remote engines' ``add_remote``, ``remove_remote``, ``refresh_remotes``,
``test_remote`` (app/remote; their listing runs on a third job thread). Widgets (the model manager
dialog, the window's menus, the first-run page) call those and listen to its signals and to
``jobs.worker``'s own signals (started / progress / finished / failed / cancelled), which Qt
queues to the UI thread. Nothing here blocks: file work, including inspecting the ONNX files
of a folder to import, runs on the job thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from app.errors import GatedError, HearthError
from app.jobs import Job, JobControl, Progress, ProgressReport
from app.models.catalog import Catalog, CatalogEntry, MachineInfo
from app.models.gguf import update
from app.models.gguf.duplicates import AlreadyInstalledError
from app.models.installed import InstalledModel
from app.models.library import CatalogChoice, ModelLibrary, slugify
from app.network import feature
from app.remote.errors import RemoteError
from app.remote.listing import ConnectionTest, check_connection, list_all
from app.remote.sources import RemoteSource, SourceStore, is_remote_target, parse_target
from app.secrets import hub_token
from app.settings import Settings
from app.ui.controller import ChatController
from app.ui.gated_notice import GatedRefusal
from app.ui.message_bridge import MessageBridge
from app.units import format_bytes
from app.workers.job_worker import JobRunner

if TYPE_CHECKING:  # the downloader pulls in huggingface_hub: loaded when first used
    from app.models.downloader import DownloadProgress

STARTER_JOB = "starter"
#: the end of the "installed" note; it names the model manager's Use button, so the window
#: takes the note away when that dialog closes
USE_HINT = "Choose it in the model menu or click Use."
_STATE_LABELS = {
    "resolving": "Looking up files…",
    "retrying": "Retrying",
    "paused": "Paused",
    "verifying": "Verifying",
    "installing": "Installing",
    "done": "Installed",
}


@dataclass(frozen=True)
class AlreadyInstalled:
    """The outcome of a GGUF import whose file is installed already."""

    model: InstalledModel
    sentence: str


def conversion_progress(fraction: float | None, message: str) -> Progress:
    """A converter report as the row shows it: "Converting layer 12 of 30 · 40 %"."""
    if fraction is None:
        return Progress(None, message)
    return Progress(fraction, f"{message} · {max(0, min(100, int(fraction * 100)))} %")


def download_progress(p: DownloadProgress) -> Progress:
    """A download report as the one progress type: "120.0 MB of 1.2 GB · 8.1 MB/s · 2:13
    left", or what is happening."""
    parts = [f"{format_bytes(p.bytes_done)} of {format_bytes(p.bytes_total)}"]
    if p.state == "downloading":
        if p.rate_bps > 0:
            parts.append(f"{format_bytes(int(p.rate_bps))}/s")
        if p.eta_s is not None:
            parts.append(f"{int(p.eta_s // 60)}:{int(p.eta_s % 60):02d} left")
    else:
        parts.append(_STATE_LABELS.get(p.state, p.state))
    if p.message:
        parts.append(p.message)
    fraction = min(p.fraction, 1.0) if p.bytes_total else None
    return Progress(fraction, " · ".join(parts), p.state)


class ModelController(QObject):
    """Signals:
    models_changed(): a model was installed, imported or removed.
    search_finished(list[HubModel]): the answer to the latest search.
    search_failed(str message)
    starter_ready(str path): the starter model is set up (and is being loaded).
    connection_tested(bool ok, str sentence): the answer to ``test_connection``.
    remote_sources_changed(): a remote engine was added or removed.
    remotes_listed(list[SourceListing]): every remote source's models (app.remote.listing:
        each listing has ``models`` of ``RemoteModel``s whose ``target`` goes to ``use``, and
        ``error`` / ``note`` saying what failed or what the server lacks).
    remote_tested(ConnectionTest): the answer to ``test_remote``.
    already_installed(InstalledModel, str sentence): a GGUF import found its file installed.
    """

    models_changed = Signal()
    search_finished = Signal(object)
    search_failed = Signal(str)
    starter_ready = Signal(str)
    connection_tested = Signal(bool, str)
    remote_sources_changed = Signal()
    remotes_listed = Signal(object)
    remote_tested = Signal(object)
    already_installed = Signal(object, str)

    def __init__(
        self,
        chat: ChatController,
        settings: Settings,
        bridge: MessageBridge,
        *,
        catalog: Catalog | None = None,
        downloader_options: dict[str, Any] | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.chat = chat
        self.settings = settings
        self.bridge = bridge
        self.downloader_options = dict(downloader_options or {})
        self._catalog = catalog
        self.jobs = JobRunner("hearth-jobs", self)
        self.searches = JobRunner("hearth-hub-search", self)
        self._search_ticket = 0
        self._told_updatable: set[str] = set()  # models whose update was mentioned at load
        self._submitted: dict[str, Job] = {}
        self._retry_factories: dict[str, Any] = {}
        # downloads the Hub refused with 401 / 403, by job id (written on the job thread
        # before the job's ``failed`` signal is sent)
        self._gated: dict[str, GatedRefusal] = {}
        w = self.jobs.worker
        w.finished.connect(self.on_job_finished)
        w.failed.connect(self.on_job_failed)
        w.cancelled.connect(self.on_job_cancelled)
        w.crashed.connect(self.bridge.crash)
        chat.model_loaded.connect(self.on_model_loaded)
        s = self.searches.worker
        s.finished.connect(self.on_search_finished)
        s.failed.connect(self.on_search_failed)
        s.crashed.connect(self.bridge.crash)
        self.remotes = JobRunner("hearth-remotes", self)
        self._remote_ticket = 0
        r = self.remotes.worker
        r.finished.connect(self.on_remote_job_finished)
        r.failed.connect(self.on_remote_job_failed)
        r.crashed.connect(self.bridge.crash)

    # where models live --------------------------------------------------------------------

    def hub_options(self) -> tuple[str | None, str | None, Path | None]:
        """(endpoint, token, models folder) from the settings (the token from the keyring),
        then HF_ENDPOINT and huggingface_hub's saved token; None means the default. Finding
        the token can import huggingface_hub: jobs call this, not the window's start-up."""
        endpoint, folder = self._endpoint_and_folder()
        token = hub_token(legacy=self.settings.get("hub_token") or None)
        return endpoint, token, folder

    def _endpoint_and_folder(self) -> tuple[str | None, Path | None]:
        values = self.settings.as_dict()
        endpoint = values.get("hub_endpoint") or os.environ.get("HF_ENDPOINT") or None
        folder = values.get("models_folder") or None
        return endpoint, Path(folder).expanduser() if folder else None

    def library(self) -> ModelLibrary:
        """The models folder as the settings name it now (they may change between calls).
        Its Hub token is found when a job needs it (``with_token``), not here."""
        endpoint, folder = self._endpoint_and_folder()
        return ModelLibrary(
            folder,
            settings=self.settings,
            endpoint=endpoint,
            staging_root=folder / ".staging" if folder is not None else None,
            catalog=self._catalog,
            downloader_options=self.downloader_options,
        )

    def _with_token(self, library: ModelLibrary) -> ModelLibrary:
        """``library`` with the Hub token set (call on the job thread)."""
        library.token = self.hub_options()[1]
        return library

    def machine(self) -> MachineInfo:
        return self.library().machine()

    def installed(self) -> list[InstalledModel]:
        try:
            return self.library().list_models()
        except (HearthError, OSError) as exc:
            self.bridge.error(f"The models folder could not be read: {exc}")
            return []

    def catalog_rows(self) -> list[CatalogChoice]:
        """Every catalog entry with the variant this machine gets, install state and fit."""
        library = self.library()
        self._catalog = library.catalog()  # read once
        return library.catalog_entries()

    @property
    def loaded_path(self) -> str | None:
        info = self.chat.model_info
        return info.path if info is not None else None

    def _in_use(self, model: InstalledModel) -> bool:
        return str(model.path) in (self.loaded_path, self.chat.loading_path)

    # intents ------------------------------------------------------------------------------

    def use(self, model: InstalledModel | str) -> bool:
        """Load ``model`` on the engine thread (a no-op when it is already loaded, unless
        its draft model was installed since: then it loads again, with the draft)."""
        path = str(model.path if isinstance(model, InstalledModel) else model)
        if path == self.loaded_path and not self.draft_waiting(path):
            return True
        return self.chat.load_model(path)

    def draft_waiting(self, path: str) -> bool:
        """Whether the model loaded from ``path`` runs without the draft model its catalog
        entry names although that draft is installed (it was installed after the load)."""
        info = self.chat.model_info
        if info is None or info.path != path or info.draft is not None:
            return False
        try:
            return self.library().draft_for(path) is not None
        except (HearthError, OSError):
            return False

    def download_catalog(self, entry: CatalogEntry, variant_name: str | None = None) -> bool:
        if self.library().get(entry.id) is not None:
            self.bridge.info(f"{entry.name} is already installed.")
            return False
        return self._download(entry.id, entry.name, entry.id, variant_name)

    def download_repo(self, repo: str) -> bool:
        """Download any Hub repo in either ONNX layout; the variant is chosen for this
        machine when the job runs (listing the repo is network work)."""
        model_id = slugify(repo)
        if self.library().get(model_id) is not None:
            self.bridge.info(f"{repo} is already installed.")
            return False
        return self._download(model_id, repo, repo, None)

    def _download(self, job_id: str, title: str, key: str, variant: str | None) -> bool:
        library = self.library()

        def work(report: ProgressReport, control: JobControl) -> InstalledModel:
            self._gated.pop(job_id, None)
            with feature("model download"):  # names these connections in the network log
                self._with_token(library)
                try:
                    plan = library.plan_download(key, variant=variant)
                    control.checkpoint()
                    return library.download(
                        plan, control=control, progress=lambda p: report(download_progress(p))
                    )
                except GatedError as exc:
                    self._gated[job_id] = _refusal(library, key, title, exc)
                    raise

        self._retry_factories[job_id] = lambda: self._download(job_id, title, key, variant)
        return self._submit(Job(job_id, title, work, pausable=True))

    def import_folder(self, folder: str | Path) -> bool:
        """Register a model folder in place; its ONNX files are inspected on the job thread."""
        path = Path(folder)
        library = self.library()
        job = Job(f"import:{path.name}", f"Import {path.name}",
                  lambda report, control: library.import_folder(path))
        return self._submit(job)

    def import_gguf(self, file: str | Path, precision: str = "native",
                    name: str | None = None) -> bool:
        """Convert a GGUF file (a job): the duplicate check (hashing) and the conversion run
        on the job thread; a file already installed ends with ``already_installed``."""
        path = Path(file)
        library = self.library()

        def work(report: ProgressReport, control: JobControl) -> object:
            try:
                return library.import_gguf(
                    path, precision=precision, name=name or None,
                    progress=lambda fraction, message="": report(
                        conversion_progress(fraction, str(message))),
                    check=control.checkpoint,
                )
            except AlreadyInstalledError as exc:
                return AlreadyInstalled(exc.model, str(exc))

        job = Job(f"import:{path.name}", f"Import {path.name}", work)
        self._retry_factories[job.job_id] = lambda: self.import_gguf(path, precision, name)
        return self._submit(job)

    def update_state(self, model: InstalledModel) -> update.ModelUpdate:
        """Whether ``model`` (an imported GGUF) can be converted again in the current forms,
        keeps its form (file gone or changed: the sentence says so) or is current. Cheap: a
        stat and 2 MiB of the file (the models panel asks it for the selected model)."""
        try:
            return update.check_model(model)
        except (HearthError, OSError) as exc:  # an unreadable file: the model still works
            return update.ModelUpdate(model, update.SOURCE_CHANGED,
                                      sentence=f"Its GGUF file cannot be read ({exc}).")

    def update_model(self, model: InstalledModel) -> bool:
        """Convert ``model``'s GGUF again in the current forms (a job with progress and
        Cancel): asked for by the user, never on its own (a 7B file takes minutes and a
        second package's disk space). The old package stays in use until the new one
        replaces it; a short disk is said before the job starts."""
        state = self.update_state(model)
        if not state.can_update:
            self.bridge.info(state.sentence or f"{model.name} is up to date.")
            return False
        from app import paths

        library = self.library()
        try:
            update.check_space(state, paths.staging_dir())  # where the job converts
        except HearthError as exc:
            self.bridge.report(exc)
            return False

        def work(report: ProgressReport, control: JobControl) -> InstalledModel:
            return update.update_model(
                library, model,
                progress=lambda fraction, message="": report(
                    conversion_progress(fraction, str(message))),
                check=control.checkpoint,
            )

        job = Job(f"update:{model.id}", f"Update {model.name}", work)
        self._retry_factories[job.job_id] = lambda: self.update_model(model)
        return self._submit(job)

    def setup_starter(self) -> bool:
        """Convert (once) and load the built-in starter model."""
        from app.models.starter import ensure_starter

        def work(report: ProgressReport, control: JobControl) -> Path:
            return ensure_starter(
                progress=lambda fraction, message="": report(Progress(fraction, str(message))),
                check=control.checkpoint,
            )

        return self._submit(Job(STARTER_JOB, "Set up the starter model", work))

    def remove(self, model: InstalledModel) -> bool:
        """Delete an installed model (or the link of an in-place import). The loaded model
        cannot be removed."""
        try:
            self.library().remove(model.id, loaded_ids=[model.id] if self._in_use(model) else [])
        except HearthError as exc:
            self.bridge.report(exc)
            return False
        except OSError as exc:
            self.bridge.error(f"{model.path} could not be deleted: {exc.strerror}.")
            return False
        self.models_changed.emit()
        return True

    def gated_refusal(self, job_id: str) -> GatedRefusal | None:
        """Why a failed download was refused by the Hub (401 / 403), or None."""
        return self._gated.get(job_id)

    def retry(self, job_id: str) -> bool:
        factory = self._retry_factories.get(job_id)
        return bool(factory and factory())

    def discard(self, job_id: str) -> None:
        """Cancel a queued or running job, or drop a failed one and its partial data."""
        if self.jobs.job(job_id) is not None:
            self.jobs.cancel(job_id)
            return
        job = self._submitted.pop(job_id, None)
        self._retry_factories.pop(job_id, None)
        if job is not None and job.pausable:  # a failed download: drop what it fetched
            self.library().downloader().discard_partial(job_id)

    def pause(self, job_id: str) -> None:
        self.jobs.pause(job_id)

    def resume(self, job_id: str) -> None:
        self.jobs.resume(job_id)

    def move_models_folder(self, folder: str | Path) -> bool:
        """Move every installed model into ``folder`` (a job) and make it the models folder
        once they are all there; a failure leaves the rest where they were."""
        from app.models.relocate import move_models

        source = self.library().root
        target = Path(folder).expanduser()

        def work(report: ProgressReport, control: JobControl) -> Path:
            move_models(source, target, report, control)
            return target

        job = Job("move-models", f"Move models to {target}", work)
        return self._submit(job)

    def test_connection(self) -> None:
        """Check the Hub endpoint and token (a job); answers with ``connection_tested``."""
        endpoint, token, _folder = self.hub_options()

        def work(report: ProgressReport, control: JobControl) -> str:
            from app.models.hub import HubClient  # huggingface_hub: loaded when first used

            return HubClient(endpoint, token, retries=0).check_connection()

        self.searches.submit(Job("test-connection", "Test the Hub connection", work))

    def search(self, query: str) -> None:
        endpoint, token, _folder = self.hub_options()
        self._search_ticket += 1
        ticket = f"search:{self._search_ticket}"
        self.searches.submit(
            Job(ticket, "Hub search",
                lambda report, control: _hub(endpoint, token).search(query))
        )

    def _submit(self, job: Job) -> bool:
        if not self.jobs.submit(job):
            self.bridge.info(f"{job.title} is already in the queue.")
            return False
        self._submitted[job.job_id] = job
        return True

    def on_model_loaded(self, info: Any) -> None:
        """The library remembers the model last used (the default on the next start); a
        model that can be updated says so once per session."""
        try:
            library = self.library()
            library.set_last_used(info.path)
        except OSError as exc:  # a full or read-only disk must not stop the chat
            self.bridge.warning(f"Hearth could not remember the model in use: {exc}")
            return
        model = library.find_path(info.path)
        if model is None or model.id in self._told_updatable:
            return
        if self.update_state(model).can_update:
            self._told_updatable.add(model.id)
            self.bridge.info(f"{model.name} can be updated for faster replies: Models ▸ "
                             "Installed ▸ Update.")

    # job outcomes (UI thread) -------------------------------------------------------------

    def on_job_finished(self, job_id: str, result: object) -> None:
        self._submitted.pop(job_id, None)
        self._retry_factories.pop(job_id, None)
        if job_id == STARTER_JOB:
            self.models_changed.emit()
            self.starter_ready.emit(str(result))
            self.chat.load_model(str(result))
            return
        if isinstance(result, AlreadyInstalled):
            self.already_installed.emit(result.model, result.sentence)
            return
        if job_id.startswith("update:") and isinstance(result, InstalledModel):
            self.models_changed.emit()
            self.bridge.info(f"{result.name} is updated to the current conversion.")
            if str(result.path) == self.loaded_path and not self.chat.generating:
                self.chat.load_model(str(result.path))  # its new graph from the next reply
            return
        if job_id == "move-models":
            self.settings.set("models_folder", str(result))
            self.settings.save()
            self.bridge.info(f"Your models are now in {result}.")
        if isinstance(result, InstalledModel):
            verb = "imported" if job_id.startswith("import:") else "installed"
            if verb == "imported" and result.manifest.extra.get("updated_at"):
                verb = "updated in place (it was imported in an older form)"
            self.bridge.info(f"{result.name} is {verb}. {USE_HINT}")
        self.models_changed.emit()

    def on_job_failed(self, job_id: str, message: str) -> None:
        self.bridge.error(message)

    def on_job_cancelled(self, job_id: str) -> None:
        self._submitted.pop(job_id, None)
        self._retry_factories.pop(job_id, None)

    def on_search_finished(self, job_id: str, found: object) -> None:
        if job_id == "test-connection":
            self.connection_tested.emit(True, str(found))
            return
        if job_id == f"search:{self._search_ticket}":
            self.search_finished.emit(list(found))  # type: ignore[call-overload]

    def on_search_failed(self, job_id: str, message: str) -> None:
        if job_id == "test-connection":
            self.connection_tested.emit(False, message)
            return
        if job_id == f"search:{self._search_ticket}":
            self.search_failed.emit(message)

    # remote sources (app/remote) -----------------------------------------------------------

    def remote_store(self) -> SourceStore:
        return SourceStore()

    def remote_sources(self) -> list[RemoteSource]:
        return self.remote_store().list()

    def add_remote(self, name: str, url: str, key: str | None = None,
                   models: list[str] | tuple[str, ...] = (), *,
                   cleartext_ok: bool = False) -> RemoteSource | None:
        """Save a remote engine (its key in the OS keyring, or the labelled fallback file),
        then list its models. ``models``: ids to offer when it has no /v1/models;
        ``cleartext_ok``: the user agreed to plain http:// to another machine."""
        try:
            source = self.remote_store().add(name, url, key, models,
                                             cleartext_ok=cleartext_ok)
        except RemoteError as exc:
            self.bridge.report(exc)
            return None
        except OSError as exc:
            self.bridge.error(f"The remote engine could not be saved: {exc.strerror}.")
            return None
        self.remote_sources_changed.emit()
        self.refresh_remotes()
        return source

    def remove_remote(self, source_id: str) -> bool:
        """Forget a remote engine and its key; not while one of its models is in use."""
        for path in (self.loaded_path, self.chat.loading_path):
            if path and is_remote_target(path) and parse_target(path)[0] == source_id:
                self.bridge.info("Pick another model before removing the remote engine in use.")
                return False
        try:
            removed = self.remote_store().remove(source_id)
        except OSError as exc:
            self.bridge.error(f"The remote engine could not be removed: {exc.strerror}.")
            return False
        if removed:
            self.remote_sources_changed.emit()
            self.refresh_remotes()
        return removed

    def refresh_remotes(self) -> bool:
        """List every source's /v1/models on the remotes' job thread → ``remotes_listed``."""
        self._remote_ticket += 1
        store = self.remote_store()
        return self.remotes.submit(Job(f"remote:list:{self._remote_ticket}", "List remote models",
                                       lambda report, control: list_all(store)))

    def test_remote(self, url: str, key: str | None = None) -> bool:
        """Try an address before it is saved → ``remote_tested(ConnectionTest)``."""
        self._remote_ticket += 1
        return self.remotes.submit(Job(f"remote:test:{self._remote_ticket}", "Test connection",
                                       lambda report, control: check_connection(url, key)))

    def on_remote_job_finished(self, job_id: str, result: object) -> None:
        if job_id.startswith("remote:list:"):
            self.remotes_listed.emit(list(result))  # type: ignore[call-overload]
        elif isinstance(result, ConnectionTest):
            self.remote_tested.emit(result)

    def on_remote_job_failed(self, job_id: str, message: str) -> None:
        if job_id.startswith("remote:test:"):
            self.remote_tested.emit(ConnectionTest(False, message, "error"))
        else:
            self.bridge.error(message)

    # shutdown -----------------------------------------------------------------------------

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Cancel jobs (partial downloads are kept for next time) → quit → wait."""
        self._search_ticket += 1  # drop any answer still coming
        jobs = self.jobs.shutdown(timeout_ms)
        searches = self.searches.shutdown(timeout_ms)
        remotes = self.remotes.shutdown(timeout_ms)
        return jobs and searches and remotes


def _refusal(library: ModelLibrary, key: str, title: str, exc: GatedError) -> GatedRefusal:
    """The refusal of ``key``'s download, with its catalog entry's licence when it has one."""
    try:
        entry = library.catalog().find(key)
    except HearthError:
        entry = None
    if entry is None:
        return GatedRefusal(title, exc.repo or key, exc.status)
    return GatedRefusal(entry.name, entry.repo, exc.status, entry.license, entry.license_url)


def _hub(endpoint: str | None, token: str | None):
    """A Hub client (huggingface_hub is imported when first needed, not at start-up)."""
    from app.models.hub import HubClient

    return HubClient(endpoint, token, retries=1)
