"""The model manager: pick, download, switch, delete and import models from the desktop app.

``ModelManagerPanel`` is a non-modal dialog with three tabs (Catalog, Search the Hub,
Installed) over a download queue with one row per download (progress bar, bytes, rate, ETA,
Pause / Resume / Cancel). Transfers run on the download thread (``DownloadHost``); pause and
cancel set thread-safe flags at once. The panel never touches the engine: "Use" emits
``use_requested(path)`` and the controller loads the model on the engine thread.
``install_model_manager(window, controller)`` wires it into the main window.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QTableView,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.models.catalog import (
    Catalog,
    MachineInfo,
    choose_variant,
    fit_report,
    load_catalog,
    probe_machine,
)
from app.models.downloader import Downloader, DownloadProgress, DownloadRequest
from app.models.hub import HubClient
from app.models.library import InstalledModel, ModelLibrary, slugify
from app.settings import Settings
from app.ui.message_bridge import MessageBridge
from app.ui.model_manager_model import (
    CatalogModel,
    CatalogRow,
    HubResultsModel,
    InstalledModelsModel,
    RowRole,
    RowTableModel,
    format_size,
)
from app.workers.download_worker import DownloadHost, DownloadJob, ImportJob, SearchHost

# Settings this panel reads (rows for app/settings.py; empty = the default behaviour).
ENDPOINT_KEY, TOKEN_KEY, FOLDER_KEY = "hub_endpoint", "hub_token", "models_folder"


def hub_options(settings: Settings) -> tuple[str | None, str | None, Path | None]:
    """(endpoint, token, models folder) from the settings, then HF_ENDPOINT / HF_TOKEN and
    the token saved by ``huggingface-cli login``; None means the default."""
    values = settings.as_dict()
    endpoint = values.get(ENDPOINT_KEY) or os.environ.get("HF_ENDPOINT") or None
    token = values.get(TOKEN_KEY) or None
    if token is None:
        try:
            from huggingface_hub import get_token

            token = get_token()
        except Exception:  # no saved token is not an error
            token = None
    folder = values.get(FOLDER_KEY) or None
    return endpoint, token, Path(folder).expanduser() if folder else None


def describe_progress(p: DownloadProgress) -> str:
    """Progress as text: "120.0 MB of 1.2 GB · 8.1 MB/s · 2:13 left", or what is happening."""
    parts = [f"{format_size(p.bytes_done)} of {format_size(p.bytes_total)}"]
    if p.state == "downloading":
        if p.rate_bps > 0:
            parts.append(f"{format_size(int(p.rate_bps))}/s")
        if p.eta_s is not None:
            parts.append(f"{int(p.eta_s // 60)}:{int(p.eta_s % 60):02d} left")
    else:
        labels = {
            "resolving": "Looking up files…",
            "retrying": "Retrying",
            "paused": "Paused",
            "verifying": "Verifying",
            "installing": "Installing",
            "done": "Installed",
        }
        parts.append(labels.get(p.state, p.state))
    if p.message:
        parts.append(p.message)
    return " · ".join(parts)


class DownloadRow(QWidget):
    """One queued or running download: name, progress bar, details, Pause/Resume/Cancel.

    Signals: pause_requested(str), resume_requested(str), cancel_requested(str),
    retry_requested(str) (Resume on a failed download).
    """

    pause_requested = Signal(str)
    resume_requested = Signal(str)
    cancel_requested = Signal(str)
    retry_requested = Signal(str)

    def __init__(self, model_id: str, title: str, *, pausable: bool, parent: QWidget) -> None:
        super().__init__(parent)
        self.model_id = model_id
        self.failed = False
        self.title = QLabel(f"<b>{title}</b>", self)
        self.bar = QProgressBar(self)
        self.bar.setRange(0, 1000)
        self.bar.setAccessibleName(f"Download progress of {title}")
        self.detail = QLabel("Queued", self)
        self.detail.setWordWrap(True)
        self.detail.setAccessibleName(f"Download status of {title}")
        self.pause_button = QPushButton("Pause", self)
        self.resume_button = QPushButton("Resume", self)
        self.cancel_button = QPushButton("Cancel", self)
        for button, verb in (
            (self.pause_button, "Pause"),
            (self.resume_button, "Resume"),
            (self.cancel_button, "Cancel"),
        ):
            button.setAccessibleName(f"{verb} download of {title}")
        self.pause_button.setVisible(pausable)
        self.resume_button.setVisible(pausable)
        self.resume_button.setEnabled(False)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.pause_button)
        top.addWidget(self.resume_button)
        top.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.bar)
        layout.addWidget(self.detail)
        self.pause_button.clicked.connect(self.on_pause)
        self.resume_button.clicked.connect(self.on_resume)
        self.cancel_button.clicked.connect(self.on_cancel)

    def on_pause(self) -> None:
        self.pause_button.setEnabled(False)
        self.resume_button.setEnabled(True)
        self.detail.setText("Paused")
        self.pause_requested.emit(self.model_id)

    def on_resume(self) -> None:
        self.resume_button.setEnabled(False)
        self.pause_button.setEnabled(True)
        self.detail.setText("Resuming…")
        if self.failed:
            self.failed = False
            self.cancel_button.setEnabled(True)
            self.retry_requested.emit(self.model_id)
        else:
            self.resume_requested.emit(self.model_id)

    def on_cancel(self) -> None:
        for button in (self.pause_button, self.resume_button, self.cancel_button):
            button.setEnabled(False)
        self.detail.setText("Cancelling…")
        self.cancel_requested.emit(self.model_id)

    def on_started(self) -> None:
        self.detail.setText("Starting…")
        if not self.pause_button.isVisible():  # an import: no byte counts, no stopping it
            self.bar.setRange(0, 0)
            self.cancel_button.setEnabled(False)

    def on_progress(self, p: DownloadProgress) -> None:
        if self.resume_button.isEnabled() and not self.failed and p.state != "paused":
            return  # paused by the user: late reports from the last chunk change nothing
        if p.bytes_total:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(1000 * min(p.fraction, 1.0)))
        self.detail.setText(describe_progress(p))

    def on_failed(self, message: str) -> None:
        self.failed = True
        self.pause_button.setEnabled(False)
        self.resume_button.setEnabled(self.pause_button.isVisible())
        self.cancel_button.setEnabled(True)
        self.detail.setText(f"Failed: {message}")


class ModelManagerPanel(QDialog):
    """The model manager dialog.

    Signals:
        use_requested(str path): the user wants this model loaded (switch the active model).
        models_changed(): a model was installed, imported or deleted.
    """

    use_requested = Signal(str)
    models_changed = Signal()

    def __init__(
        self,
        bridge: MessageBridge,
        settings: Settings,
        *,
        catalog: Catalog | None = None,
        downloader_options: dict[str, Any] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.setAccessibleName("Model manager")
        self.resize(900, 640)
        self.bridge = bridge
        self.settings = settings
        self.downloader_options = dict(downloader_options or {})
        self._catalog = catalog
        self.loaded_path: str | None = None
        self.loading_path: str | None = None
        self.machine: MachineInfo | None = None
        self.download_rows: dict[str, DownloadRow] = {}
        self._retry: dict[str, DownloadJob | ImportJob] = {}
        self.downloads = DownloadHost(self)
        self.search_host = SearchHost(self)
        self.catalog_model = CatalogModel(self)
        self.hub_model = HubResultsModel(self)
        self.installed_model = InstalledModelsModel(self)
        self._build()
        self._connect()

    # construction -------------------------------------------------------------------------

    def _build(self) -> None:
        self.machine_label = QLabel(self)
        self.machine_label.setWordWrap(True)
        self.tabs = QTabWidget(self)
        self.tabs.addTab(self._catalog_tab(), "Catalog")
        self.tabs.addTab(self._search_tab(), "Search the Hub")
        self.tabs.addTab(self._installed_tab(), "Installed")
        self.queue_box = QGroupBox("Downloads", self)
        self.queue_layout = QVBoxLayout()
        self.queue_layout.addStretch(1)
        holder = QWidget(self.queue_box)
        holder.setLayout(self.queue_layout)
        scroll = QScrollArea(self.queue_box)
        scroll.setWidgetResizable(True)
        scroll.setWidget(holder)
        self.queue_empty = QLabel("No downloads.", self.queue_box)
        box_layout = QVBoxLayout(self.queue_box)
        box_layout.addWidget(self.queue_empty)
        box_layout.addWidget(scroll)
        layout = QVBoxLayout(self)
        layout.addWidget(self.machine_label)
        layout.addWidget(self.tabs, 3)
        layout.addWidget(self.queue_box, 2)

    def _table(self, model: RowTableModel, name: str) -> QTableView:
        view = QTableView(self)
        view.setModel(model)
        view.setAccessibleName(name)
        view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        view.verticalHeader().hide()
        view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        view.horizontalHeader().setStretchLastSection(True)
        return view

    def _catalog_tab(self) -> QWidget:
        page = QWidget(self)
        self.catalog_view = self._table(self.catalog_model, "Model catalog")
        self.variant_combo = QComboBox(page)
        self.variant_combo.setAccessibleName("Variant")
        self.download_button = QPushButton("Download", page)
        self.download_button.setAccessibleName("Download the selected model")
        row = QHBoxLayout()
        row.addWidget(QLabel("Variant:", page))
        row.addWidget(self.variant_combo, 1)
        row.addWidget(self.download_button)
        layout = QVBoxLayout(page)
        layout.addWidget(self.catalog_view, 1)
        layout.addLayout(row)
        return page

    def _search_tab(self) -> QWidget:
        page = QWidget(self)
        self.search_edit = QLineEdit(page)
        self.search_edit.setPlaceholderText("Search ONNX text-generation models on the Hub")
        self.search_edit.setAccessibleName("Hub search")
        self.search_button = QPushButton("Search", page)
        self.hub_view = self._table(self.hub_model, "Hub search results")
        self.search_status = QLabel("", page)
        self.search_status.setWordWrap(True)
        self.hub_download_button = QPushButton("Download", page)
        self.hub_download_button.setAccessibleName("Download the selected Hub model")
        top = QHBoxLayout()
        top.addWidget(self.search_edit, 1)
        top.addWidget(self.search_button)
        bottom = QHBoxLayout()
        bottom.addWidget(self.search_status, 1)
        bottom.addWidget(self.hub_download_button)
        layout = QVBoxLayout(page)
        layout.addLayout(top)
        layout.addWidget(self.hub_view, 1)
        layout.addLayout(bottom)
        return page

    def _installed_tab(self) -> QWidget:
        page = QWidget(self)
        self.installed_view = self._table(self.installed_model, "Installed models")
        self.use_button = QPushButton("Use", page)
        self.use_button.setAccessibleName("Use the selected model")
        self.delete_button = QPushButton("Delete", page)
        self.delete_button.setAccessibleName("Delete the selected model")
        self.import_folder_button = QPushButton("Import folder…", page)
        self.import_gguf_button = QPushButton("Import GGUF…", page)
        row = QHBoxLayout()
        for button in (self.use_button, self.delete_button):
            row.addWidget(button)
        row.addStretch(1)
        row.addWidget(self.import_folder_button)
        row.addWidget(self.import_gguf_button)
        layout = QVBoxLayout(page)
        layout.addWidget(self.installed_view, 1)
        layout.addLayout(row)
        return page

    def _connect(self) -> None:
        self.catalog_view.selectionModel().currentRowChanged.connect(self.on_catalog_selected)
        self.download_button.clicked.connect(self.on_download_catalog)
        self.search_button.clicked.connect(self.on_search)
        self.search_edit.returnPressed.connect(self.on_search)
        self.hub_download_button.clicked.connect(self.on_download_hub)
        self.use_button.clicked.connect(self.on_use)
        self.installed_view.doubleClicked.connect(lambda _index: self.on_use())
        self.delete_button.clicked.connect(self.on_delete)
        self.import_folder_button.clicked.connect(self.on_import_folder)
        self.import_gguf_button.clicked.connect(self.on_import_gguf)
        self.search_host.results.connect(self.on_search_results)
        self.search_host.failed.connect(self.on_search_failed)
        d = self.downloads
        d.queued.connect(self.on_queued)
        d.started.connect(self.on_started)
        d.progress.connect(self.on_progress)
        d.finished.connect(self.on_finished)
        d.failed.connect(self.on_failed)
        d.cancelled.connect(self.on_cancelled)
        d.crashed.connect(self.bridge.crash)

    # data ---------------------------------------------------------------------------------

    def store(self) -> ModelLibrary:
        return ModelLibrary(hub_options(self.settings)[2])

    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = load_catalog()
        return self._catalog

    def make_downloader(self) -> Downloader:
        endpoint, token, folder = hub_options(self.settings)
        store = ModelLibrary(folder)
        staging = store.root / ".staging" if folder is not None else None
        return Downloader(
            store, endpoint=endpoint, token=token, staging_root=staging, **self.downloader_options
        )

    def refresh(self) -> None:
        """Re-read the catalog fit hints and the installed models."""
        try:
            store = self.store()
            catalog = self.catalog()
        except HearthError as exc:
            self.bridge.report(exc)
            return
        self.machine = probe_machine(store.root)
        m = self.machine
        ram = format_size(m.ram_bytes) if m.ram_bytes else "unknown"
        disk = format_size(m.disk_free_bytes) if m.disk_free_bytes is not None else "unknown"
        self.machine_label.setText(
            f"This machine: {ram} RAM, {disk} free for models in {store.root}; "
            f"variants are chosen for {m.provider.upper()}."
        )
        installed = store.list_models()
        ids = {model.id for model in installed}
        rows = []
        for entry in catalog:
            variant = choose_variant(entry, m.provider)
            rows.append(CatalogRow(entry, variant, fit_report(variant, m), entry.id in ids))
        self.catalog_model.set_rows(rows)
        self.installed_model.set_rows(installed)
        self.installed_model.set_loaded_path(self.loaded_path)
        self._update_variants()

    def open_panel(self) -> None:
        self.refresh()
        if self.isVisible():  # already open behind the main window: bring it forward
            self.raise_()
            self.activateWindow()
        else:
            self.show()

    def _selected(self, view: QTableView) -> Any:
        index = view.currentIndex()
        return index.data(RowRole) if index.isValid() else None

    # catalog ------------------------------------------------------------------------------

    def on_catalog_selected(self, *_: object) -> None:
        self._update_variants()

    def _update_variants(self) -> None:
        self.variant_combo.clear()
        row: CatalogRow | None = self._selected(self.catalog_view)
        if row is None:
            return
        for variant in row.entry.variants:
            self.variant_combo.addItem(
                f"{variant.name} ({variant.provider}, {format_size(variant.size_bytes)})",
                variant.name,
            )
        self.variant_combo.setCurrentIndex(self.variant_combo.findData(row.variant.name))

    def select_catalog(self, model_id: str) -> None:
        row = self.catalog_model.row_of(model_id)
        self.catalog_view.setCurrentIndex(self.catalog_model.index(row, 0))

    def on_download_catalog(self) -> None:
        row: CatalogRow | None = self._selected(self.catalog_view)
        if row is None:
            self.bridge.info("Choose a model in the catalog first.")
            return
        if row.installed:
            self.bridge.info(f"{row.entry.name} is already installed.")
            return
        name = self.variant_combo.currentData() or row.variant.name
        request = DownloadRequest.from_catalog(row.entry, row.entry.variant(name))
        self.start_job(DownloadJob(row.entry.id, self.make_downloader(), request=request))

    # Hub search ---------------------------------------------------------------------------

    def on_search(self) -> None:
        endpoint, token, _folder = hub_options(self.settings)
        self.search_status.setText("Searching…")
        self.search_host.search(
            lambda: HubClient(endpoint, token, retries=1), self.search_edit.text()
        )

    def on_search_results(self, found: object) -> None:
        results = list(found)  # type: ignore[call-overload]
        self.hub_model.set_rows(results)
        self.search_status.setText(
            f"{len(results)} models found." if results else "No ONNX text-generation model found."
        )

    def on_search_failed(self, message: str) -> None:
        self.search_status.setText("The search failed.")
        self.bridge.error(message)

    def on_download_hub(self) -> None:
        found = self._selected(self.hub_view)
        if found is None:
            self.bridge.info("Choose a search result first.")
            return
        model_id = slugify(found.id)
        if self.store().get(model_id) is not None:
            self.bridge.info(f"{found.id} is already installed.")
            return
        provider = self.machine.provider if self.machine else "cpu"
        job = DownloadJob(model_id, self.make_downloader(), repo=found.id, provider=provider)
        self.start_job(job)

    # installed ----------------------------------------------------------------------------

    def selected_installed(self) -> InstalledModel | None:
        return self._selected(self.installed_view)

    def select_installed(self, model_id: str) -> None:
        row = self.installed_model.row_of(model_id)
        self.installed_view.setCurrentIndex(self.installed_model.index(row, 0))

    def on_use(self) -> None:
        model = self.selected_installed()
        if model is None:
            self.bridge.info("Choose an installed model first.")
            return
        if str(model.path) != self.loaded_path:
            self.use_requested.emit(str(model.path))

    def on_delete(self) -> None:
        model = self.selected_installed()
        if model is None:
            self.bridge.info("Choose an installed model first.")
            return
        in_use = [p for p in (self.loaded_path, self.loading_path) if p == str(model.path)]
        what = "Remove the link to" if model.linked else "Delete"
        extra = " (its folder stays where it is)" if model.linked else ""
        question = f"{what} {model.name}{extra}? This frees {format_size(model.size_on_disk)}."
        if not in_use and not self.confirm("Delete model", question):
            return
        try:
            self.store().remove(model.id, loaded_ids=[model.id] if in_use else [])
        except HearthError as exc:
            self.bridge.report(exc)
            return
        except OSError as exc:
            self.bridge.error(f"{model.path} could not be deleted: {exc.strerror}.")
            return
        self.refresh()
        self.models_changed.emit()

    def on_import_folder(self) -> None:
        folder = self.ask_folder()
        if not folder:
            return
        try:
            model = self.store().import_folder(Path(folder))
        except HearthError as exc:
            self.bridge.report(exc)
            return
        self.bridge.info(f"Imported {model.name}; its files stay in {model.path}.")
        self.refresh()
        self.select_installed(model.id)
        self.models_changed.emit()

    def on_import_gguf(self) -> None:
        path = self.ask_gguf_file()
        if path:
            self.start_job(ImportJob(f"import:{Path(path).name}", Path(path), self.store()))

    # questions (tests replace these) ------------------------------------------------------

    def confirm(self, title: str, text: str) -> bool:
        buttons = QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No
        answer = QMessageBox.question(self, title, text, buttons)
        return answer == QMessageBox.StandardButton.Yes

    def ask_folder(self) -> str:
        return QFileDialog.getExistingDirectory(self, "Import a model folder")

    def ask_gguf_file(self) -> str:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF file", "", "GGUF (*.gguf)")
        return path

    # the queue ----------------------------------------------------------------------------

    def start_job(self, job: DownloadJob | ImportJob) -> None:
        if not self.downloads.enqueue(job):
            self.bridge.info(f"{job.model_id} is already in the download queue.")
            return
        self._retry[job.model_id] = job

    def _title(self, job: DownloadJob | ImportJob | None, model_id: str) -> str:
        if isinstance(job, DownloadJob):
            return job.request.name if job.request is not None else (job.repo or model_id)
        if isinstance(job, ImportJob):
            return f"Import {job.path.name}"
        return model_id

    def on_queued(self, model_id: str) -> None:
        job = self.downloads.job(model_id)
        row = self.download_rows.get(model_id)
        if row is None:
            row = DownloadRow(
                model_id,
                self._title(job, model_id),
                pausable=isinstance(job, DownloadJob),
                parent=self.queue_box,
            )
            row.pause_requested.connect(self.downloads.pause)
            row.resume_requested.connect(self.downloads.resume)
            row.cancel_requested.connect(self.on_cancel_requested)
            row.retry_requested.connect(self.on_retry)
            self.queue_layout.insertWidget(self.queue_layout.count() - 1, row)
            self.download_rows[model_id] = row
        self.queue_empty.hide()

    def on_started(self, model_id: str) -> None:
        if (row := self.download_rows.get(model_id)) is not None:
            row.on_started()

    def on_progress(self, progress: DownloadProgress) -> None:
        if (row := self.download_rows.get(progress.model_id)) is not None:
            row.on_progress(progress)

    def on_finished(self, model_id: str, model: InstalledModel) -> None:
        self._drop_row(model_id)
        self._retry.pop(model_id, None)
        self.bridge.info(f"{model.name} is installed. Choose it in the toolbar or click Use.")
        self.refresh()
        self.select_installed(model.id)
        self.models_changed.emit()

    def on_failed(self, model_id: str, message: str) -> None:
        if (row := self.download_rows.get(model_id)) is not None:
            row.on_failed(message)
        self.bridge.error(message)

    def on_cancel_requested(self, model_id: str) -> None:
        if self.downloads.job(model_id) is None:  # a failed download: just drop it
            job = self._retry.pop(model_id, None)
            if isinstance(job, DownloadJob):
                shutil.rmtree(job.downloader.staging_folder(model_id), ignore_errors=True)
            self._drop_row(model_id)
            return
        self.downloads.cancel(model_id)

    def on_cancelled(self, model_id: str) -> None:
        self._retry.pop(model_id, None)
        self._drop_row(model_id)

    def on_retry(self, model_id: str) -> None:
        old = self._retry.get(model_id)
        if isinstance(old, DownloadJob):
            job: DownloadJob | ImportJob = DownloadJob(
                model_id, self.make_downloader(), old.request, old.repo, old.provider
            )
        elif isinstance(old, ImportJob):
            job = ImportJob(model_id, old.path, old.store)
        else:
            return
        self.start_job(job)

    def _drop_row(self, model_id: str) -> None:
        row = self.download_rows.pop(model_id, None)
        if row is not None:
            self.queue_layout.removeWidget(row)
            row.deleteLater()
        self.queue_empty.setVisible(not self.download_rows)

    # the controller's model state ---------------------------------------------------------

    def set_loaded_path(self, path: str | None) -> None:
        self.loaded_path = path
        self.loading_path = None
        self.installed_model.set_loaded_path(path)

    def on_model_loading(self, path: str) -> None:
        self.loading_path = path

    def on_model_load_failed(self, _message: str) -> None:
        self.loading_path = None

    # shutdown -----------------------------------------------------------------------------

    def shutdown(self) -> bool:
        """Cancel downloads (their partial data is kept for next time) → quit → wait."""
        downloads = self.downloads.shutdown(5000)
        search = self.search_host.shutdown(5000)
        return downloads and search


class _ShutdownOnClose(QObject):
    """Stops the panel's threads when the main window closes."""

    def __init__(self, panel: ModelManagerPanel, window: QWidget) -> None:
        super().__init__(window)
        self.panel = panel

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Close:
            self.panel.shutdown()
        return False


def install_model_manager(window: Any, controller: Any) -> None:
    """Wire the model manager into the main window.

    Adds a "Models…" toolbar action and a "Browse models…" button on the first-run panel,
    both opening the panel; "Use" loads the model through ``controller.load_model`` (the
    generation worker's load request, on the engine thread); installs and deletions refresh
    the toolbar picker; the panel's threads stop when the window closes. The panel is kept
    as ``window.model_manager``.
    """
    panel = ModelManagerPanel(controller.bridge, controller.settings, parent=window)
    panel.setWindowFlag(Qt.WindowType.Window, True)
    window.model_manager = panel
    action = QAction("Models…", window)
    action.setToolTip("Download, switch, delete and import models")
    action.triggered.connect(panel.open_panel)
    toolbar = window.findChild(QToolBar, "mainToolbar")
    if toolbar is not None:
        toolbar.addAction(action)
    window.models_action = action
    first_run = window.first_run
    browse = QPushButton("Browse models…", first_run)
    browse.setAccessibleName("Browse models")
    browse.setAccessibleDescription("Download or import another model.")
    browse.clicked.connect(panel.open_panel)
    layout = first_run.layout()
    layout.insertWidget(
        layout.indexOf(first_run.button) + 1, browse, 0, Qt.AlignmentFlag.AlignHCenter
    )
    window.browse_models_button = browse

    panel.use_requested.connect(controller.load_model)
    panel.models_changed.connect(window.refresh_models)
    controller.model_loading.connect(panel.on_model_loading)
    controller.model_loaded.connect(lambda info: panel.set_loaded_path(info.path))
    controller.model_load_failed.connect(panel.on_model_load_failed)
    info = controller.model_info
    panel.set_loaded_path(info.path if info is not None else None)
    window.installEventFilter(_ShutdownOnClose(panel, window))
