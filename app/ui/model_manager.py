"""The model manager dialog: a view over ``ModelController``.

Three tabs (Catalog, Search the Hub, Installed) over a queue with one row per job (progress
bar, what is happening, Pause / Resume / Cancel). The dialog builds no stores or downloaders
and touches no files: every button is an intent on the controller, and the rows follow the
job worker's own signals (queued to the UI thread by Qt).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Signal
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
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.jobs import Progress
from app.models.installed import InstalledModel
from app.ui.catalog_details import CatalogDetails
from app.ui.gated_notice import GatedNotice
from app.ui.model_controller import ModelController
from app.ui.model_manager_model import (
    CatalogModel,
    CatalogRow,
    HubResultsModel,
    InstalledModelsModel,
    RowRole,
    RowTableModel,
)
from app.units import format_bytes

if TYPE_CHECKING:
    from app.ui.gguf_import_dialog import GGUFImportDialog


class DownloadRow(QWidget):
    """One queued or running job: name, progress bar, details, Pause/Resume/Cancel.

    Signals: pause_requested(str), resume_requested(str), cancel_requested(str),
    retry_requested(str) (Retry, the Resume button's name on a failed job).
    """

    pause_requested = Signal(str)
    resume_requested = Signal(str)
    cancel_requested = Signal(str)
    retry_requested = Signal(str)

    def __init__(self, job_id: str, title: str, *, pausable: bool, parent: QWidget) -> None:
        super().__init__(parent)
        self.job_id = job_id
        self.failed = False
        self._title = title
        self.title = QLabel(f"<b>{title}</b>", self)
        self.bar = QProgressBar(self)
        self.bar.setRange(0, 1000)
        self.bar.setAccessibleName(f"Progress of {title}")
        self.detail = QLabel("Queued", self)
        self.detail.setWordWrap(True)
        self.detail.setAccessibleName(f"Status of {title}")
        self.pause_button = QPushButton("Pause", self)
        self.resume_button = QPushButton("Resume", self)
        self.cancel_button = QPushButton("Cancel", self)
        for button, verb in (
            (self.pause_button, "Pause"),
            (self.resume_button, "Resume"),
            (self.cancel_button, "Cancel"),
        ):
            button.setAccessibleName(f"{verb} {title}")
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

    @property
    def pausable(self) -> bool:
        return not self.pause_button.isHidden()

    def on_pause(self) -> None:
        self.pause_button.setEnabled(False)
        self.resume_button.setEnabled(True)
        self.detail.setText("Paused")
        self.pause_requested.emit(self.job_id)

    def on_resume(self) -> None:
        self.resume_button.setEnabled(False)
        self.pause_button.setEnabled(True)
        if self.failed:
            self.failed = False
            self._label_resume("Resume")
            self.detail.setText("Trying again…")
            self.cancel_button.setEnabled(True)
            self.retry_requested.emit(self.job_id)
            return
        self.detail.setText("Resuming…")
        self.resume_requested.emit(self.job_id)

    def on_cancel(self) -> None:
        for button in (self.pause_button, self.resume_button, self.cancel_button):
            button.setEnabled(False)
        self.detail.setText("Cancelling…")
        self.cancel_requested.emit(self.job_id)

    def on_started(self) -> None:
        self.detail.setText("Starting…")

    def on_progress(self, p: Progress) -> None:
        if self.resume_button.isEnabled() and not self.failed and p.state != "paused":
            return  # paused by the user: late reports from the last chunk change nothing
        if p.fraction is None:
            self.bar.setRange(0, 0)
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(1000 * p.fraction))
        self.bar.setTextVisible(not p.message.endswith("%"))  # the message says it already
        self.detail.setText(p.message)

    def on_failed(self, message: str) -> None:
        self.failed = True
        self.bar.setRange(0, 1000)
        self.pause_button.setEnabled(False)
        self.resume_button.setEnabled(self.pausable)
        self._label_resume("Retry")  # after a failure it tries again, it resumes nothing
        self.cancel_button.setEnabled(True)
        self.detail.setText(f"Failed: {message}")

    def _label_resume(self, verb: str) -> None:
        self.resume_button.setText(verb)
        self.resume_button.setAccessibleName(f"{verb} {self._title}")


class ModelManagerPanel(QDialog):
    """The model manager dialog. It only shows models and emits intents on ``controller``.

    Signals: token_requested() (a gated notice's "Add a Hugging Face token…": the window
    opens the token setting); closed() (the dialog went away: notes about its buttons no
    longer apply).
    """

    token_requested = Signal()
    closed = Signal()

    def hideEvent(self, event) -> None:
        super().hideEvent(event)
        self.closed.emit()

    def __init__(self, controller: ModelController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.setAccessibleName("Model manager")
        self.resize(900, 640)
        self.controller = controller
        self.bridge = controller.bridge
        self.download_rows: dict[str, DownloadRow] = {}
        self.gguf_dialog: GGUFImportDialog | None = None
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
        self.queue_box = QGroupBox("Downloads and imports", self)
        self.queue_layout = QVBoxLayout()
        self.queue_layout.addStretch(1)
        holder = QWidget(self.queue_box)
        holder.setLayout(self.queue_layout)
        scroll = QScrollArea(self.queue_box)
        scroll.setWidgetResizable(True)
        scroll.setWidget(holder)
        self.queue_empty = QLabel("Nothing is downloading.", self.queue_box)
        # a download the Hub refused with 401 / 403: the licence and the token
        self.refused_notice = GatedNotice(self.queue_box)
        box_layout = QVBoxLayout(self.queue_box)
        box_layout.addWidget(self.refused_notice)
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
        self.catalog_details = CatalogDetails(page)
        self.gated_notice = GatedNotice(page)  # the selected entry's licence, when gated
        layout = QVBoxLayout(page)
        layout.addWidget(self.catalog_view, 1)
        layout.addWidget(self.catalog_details)
        layout.addWidget(self.gated_notice)
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
        # the selected import converted in an older form: what updating brings, or why not
        self.update_note = QLabel("", page)
        self.update_note.setWordWrap(True)
        self.update_note.setAccessibleName("Update note")
        self.update_button = QPushButton("Update", page)
        self.update_button.setAccessibleName("Update the selected model")
        self.update_button.setToolTip("Convert its GGUF file again in the current form; the "
                                      "model stays usable until the new one is ready")
        note_row = QHBoxLayout()
        note_row.addWidget(self.update_note, 1)
        note_row.addWidget(self.update_button)
        self.update_note.hide()
        self.update_button.hide()
        row = QHBoxLayout()
        for button in (self.use_button, self.delete_button):
            row.addWidget(button)
        row.addStretch(1)
        row.addWidget(self.import_folder_button)
        row.addWidget(self.import_gguf_button)
        layout = QVBoxLayout(page)
        layout.addWidget(self.installed_view, 1)
        layout.addLayout(note_row)
        layout.addLayout(row)
        return page

    def _connect(self) -> None:
        self.catalog_view.selectionModel().currentRowChanged.connect(self.on_catalog_selected)
        self.download_button.clicked.connect(self.on_download_catalog)
        self.catalog_details.download_draft_requested.connect(self.on_download_draft)
        self.catalog_details.reload_requested.connect(self.on_reload_with_draft)
        self.search_button.clicked.connect(self.on_search)
        self.search_edit.returnPressed.connect(self.on_search)
        self.hub_download_button.clicked.connect(self.on_download_hub)
        self.use_button.clicked.connect(self.on_use)
        self.installed_view.selectionModel().currentRowChanged.connect(
            self.on_installed_selected)
        self.update_button.clicked.connect(self.on_update)
        self.installed_view.doubleClicked.connect(lambda _index: self.on_use())
        self.delete_button.clicked.connect(self.on_delete)
        self.import_folder_button.clicked.connect(self.on_import_folder)
        self.import_gguf_button.clicked.connect(self.on_import_gguf)
        self.gated_notice.token_requested.connect(self.token_requested)
        self.refused_notice.token_requested.connect(self.token_requested)
        c = self.controller
        c.search_finished.connect(self.on_search_results)
        c.search_failed.connect(self.on_search_failed)
        c.models_changed.connect(self.refresh)
        c.already_installed.connect(self.on_already_installed)
        c.chat.model_loaded.connect(self.on_model_state)
        c.chat.model_load_failed.connect(self.on_model_state)
        c.jobs.queued.connect(self.on_queued)
        w = c.jobs.worker
        w.started.connect(self.on_started)
        w.progress.connect(self.on_progress)
        w.finished.connect(self.on_finished)
        w.failed.connect(self.on_failed)
        w.cancelled.connect(self.on_cancelled)

    # data ---------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the catalog fit hints and the installed models."""
        c = self.controller
        try:
            machine = c.machine()
            rows = [CatalogRow(r.entry, r.variant, r.fit, r.installed) for r in c.catalog_rows()]
        except HearthError as exc:
            self.bridge.report(exc)
            return
        ram = format_bytes(machine.ram_bytes) if machine.ram_bytes else "unknown"
        disk = (format_bytes(machine.disk_free_bytes)
                if machine.disk_free_bytes is not None else "unknown")
        self.machine_label.setText(
            f"This machine: {ram} RAM, {disk} free for models in {c.library().root}; "
            f"variants are chosen for {machine.provider.upper()}."
        )
        self.catalog_model.set_rows(rows)
        self.installed_model.set_rows(c.installed())
        self.installed_model.set_loaded_path(c.loaded_path)
        self.on_installed_selected()
        self._update_variants()

    def open_panel(self) -> None:
        self.refresh()
        if self.isVisible():  # already open behind the main window: bring it forward
            self.raise_()
            self.activateWindow()
        else:
            self.show()

    def on_model_state(self, *_: object) -> None:
        self.installed_model.set_loaded_path(self.controller.loaded_path)
        self._update_details(self._selected(self.catalog_view))

    def _selected(self, view: QTableView) -> Any:
        index = view.currentIndex()
        return index.data(RowRole) if index.isValid() else None

    # catalog ------------------------------------------------------------------------------

    def on_catalog_selected(self, *_: object) -> None:
        self._update_variants()

    def _update_variants(self) -> None:
        self.variant_combo.clear()
        row: CatalogRow | None = self._selected(self.catalog_view)
        self._update_details(row)
        installed = row is not None and row.installed
        self.download_button.setText("Installed" if installed else "Download")
        self.download_button.setEnabled(not installed)
        self.download_button.setToolTip(
            "This model is installed: use it from the Installed tab." if installed else "")
        if row is None:
            return
        for variant in row.entry.variants:
            self.variant_combo.addItem(
                f"{variant.name} ({variant.provider}, {format_bytes(variant.size_bytes)})",
                variant.name,
            )
        self.variant_combo.setCurrentIndex(self.variant_combo.findData(row.variant.name))

    def _catalog_row(self, model_id: str | None) -> CatalogRow | None:
        index = self.catalog_model.row_of(model_id) if model_id else -1
        return self.catalog_model.rows()[index] if index >= 0 else None

    def _update_details(self, row: CatalogRow | None) -> None:
        draft = self._catalog_row(row.entry.draft) if row is not None else None
        downloading = draft is not None and draft.entry.id in self.download_rows
        reload = False
        if row is not None and draft is not None and draft.installed:
            model = self.controller.library().get(row.entry.id)
            reload = model is not None and self.controller.draft_waiting(str(model.path))
        self.catalog_details.show_row(row, draft, draft_downloading=downloading,
                                      reload_for_draft=reload)
        self.gated_notice.show_for(row.entry if row is not None else None)

    def on_download_draft(self, draft_id: str) -> None:
        """Download the selected model's draft: the same catalog download as any model's,
        in the variant this machine gets."""
        draft = self._catalog_row(draft_id)
        if draft is not None:
            self.controller.download_catalog(draft.entry, draft.variant.name)

    def on_reload_with_draft(self, model_id: str) -> None:
        model = self.controller.library().get(model_id)
        if model is not None:
            self.controller.use(model)

    def select_catalog(self, model_id: str) -> None:
        index = self.catalog_model.index(self.catalog_model.row_of(model_id), 0)
        self.catalog_view.setCurrentIndex(index)
        self.catalog_view.scrollTo(index)

    def on_download_catalog(self) -> None:
        row: CatalogRow | None = self._selected(self.catalog_view)
        if row is None:
            self.bridge.info("Choose a model in the catalog first.")
            return
        self.controller.download_catalog(
            row.entry, self.variant_combo.currentData() or row.variant.name
        )

    # Hub search ---------------------------------------------------------------------------

    def on_search(self) -> None:
        self.search_status.setText("Searching…")
        self.controller.search(self.search_edit.text())

    def on_search_results(self, found: object) -> None:
        results = list(found)  # type: ignore[call-overload]
        self.hub_model.set_rows(results)
        self.search_status.setText(
            f"{len(results)} models found." if results else "No ONNX text-generation model found."
        )

    def on_search_failed(self, message: str) -> None:
        """The reason, in the dialog where the user is looking (not only behind it)."""
        self.search_status.setText(message)

    def on_download_hub(self) -> None:
        found = self._selected(self.hub_view)
        if found is None:
            self.bridge.info("Choose a search result first.")
            return
        self.controller.download_repo(found.id)

    # installed ----------------------------------------------------------------------------

    def selected_installed(self) -> InstalledModel | None:
        return self._selected(self.installed_view)

    def select_installed(self, model_id: str) -> None:
        row = self.installed_model.row_of(model_id)
        self.installed_view.setCurrentIndex(self.installed_model.index(row, 0))

    def on_installed_selected(self, *_: object) -> None:
        """Under the list: the selected import's update (or why it keeps its form)."""
        model = self.selected_installed()
        state = self.controller.update_state(model) if model is not None else None
        sentence = state.sentence if state is not None else ""
        updating = model is not None and self.controller.jobs.job(f"update:{model.id}") is not None
        self.update_note.setText("Updating… (the model stays usable meanwhile)" if updating
                                 else sentence)
        self.update_note.setVisible(bool(sentence))
        self.update_button.setVisible(state is not None and state.can_update)
        self.update_button.setEnabled(not updating)

    def on_update(self) -> None:
        model = self.selected_installed()
        if model is not None and self.controller.update_model(model):
            self.on_installed_selected()

    def on_use(self) -> None:
        model = self.selected_installed()
        if model is None:
            self.bridge.info("Choose an installed model first.")
            return
        self.controller.use(model)

    def on_delete(self) -> None:
        model = self.selected_installed()
        if model is None:
            self.bridge.info("Choose an installed model first.")
            return
        what = "Remove the link to" if model.linked else "Delete"
        extra = " (its folder stays where it is)" if model.linked else ""
        question = f"{what} {model.name}{extra}? This frees {format_bytes(model.size_on_disk)}."
        in_use = str(model.path) in (self.controller.loaded_path, self.controller.chat.loading_path)
        if in_use or self.confirm("Delete model", question):
            self.controller.remove(model)

    def on_import_folder(self) -> None:
        folder = self.ask_folder()
        if folder:
            self.controller.import_folder(folder)

    def on_import_gguf(self) -> None:
        path = self.ask_gguf_file()
        if path:
            self.open_gguf_dialog(path)

    def open_gguf_dialog(self, path: str) -> GGUFImportDialog:
        """The header facts, name and precision for ``path`` (window-modal, not blocking);
        its Import starts the job."""
        from app.ui.gguf_import_dialog import GGUFImportDialog  # the GGUF reader: when used

        dialog = GGUFImportDialog(path, self)
        dialog.import_requested.connect(self.on_gguf_import_requested)
        dialog.finished.connect(dialog.deleteLater)
        self.gguf_dialog = dialog
        dialog.open()
        return dialog

    def on_gguf_import_requested(self, path: str, precision: str, name: str) -> None:
        self.controller.import_gguf(path, precision, name or None)

    def on_already_installed(self, model: object, sentence: str) -> None:
        """A GGUF import found its file installed: offer the installed model instead."""
        if not isinstance(model, InstalledModel) or not self.ask_open_installed(sentence):
            return
        self.refresh()
        self.tabs.setCurrentIndex(2)
        self.select_installed(model.id)
        self.controller.use(model)

    # questions (tests replace these) ------------------------------------------------------

    def confirm(self, title: str, text: str) -> bool:
        buttons = QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No
        answer = QMessageBox.question(self, title, text, buttons)
        return answer == QMessageBox.StandardButton.Yes

    def ask_folder(self) -> str:
        from app.ui.file_folders import remember, start_folder

        settings = self.controller.settings
        folder = QFileDialog.getExistingDirectory(self, "Import a model folder",
                                                  start_folder(settings, "model"))
        if folder:
            remember(settings, "model", folder)
        return folder

    def ask_open_installed(self, sentence: str) -> bool:
        box = QMessageBox(QMessageBox.Icon.Information, "Already installed", sentence,
                          QMessageBox.StandardButton.Cancel, self)
        open_button = box.addButton("Open it", QMessageBox.ButtonRole.AcceptRole)
        box.setDefaultButton(open_button)
        box.exec()
        return box.clickedButton() is open_button

    def ask_gguf_file(self) -> str:
        """The GGUFs other apps keep, or any file through Browse… (``GGUFFinderDialog``)."""
        from app.ui.gguf_import_dialog import GGUFFinderDialog

        finder = GGUFFinderDialog(self, settings=self.controller.settings)
        finder.exec()
        return finder.chosen

    # the queue ----------------------------------------------------------------------------

    def on_queued(self, job_id: str) -> None:
        job = self.controller.jobs.job(job_id)
        if job is None or job_id.startswith("search:"):
            return
        row = self.download_rows.get(job_id)
        if row is None:
            row = DownloadRow(job_id, job.title, pausable=job.pausable, parent=self.queue_box)
            row.pause_requested.connect(self.controller.pause)
            row.resume_requested.connect(self.controller.resume)
            row.cancel_requested.connect(self.on_cancel_requested)
            row.retry_requested.connect(self.controller.retry)
            self.queue_layout.insertWidget(self.queue_layout.count() - 1, row)
            self.download_rows[job_id] = row
        self.queue_empty.hide()
        self._update_details(self._selected(self.catalog_view))
        self.on_installed_selected()

    def on_started(self, job_id: str) -> None:
        if (row := self.download_rows.get(job_id)) is not None:
            row.on_started()
        self.refused_notice.hide()  # a new try (with a token, perhaps)

    def on_progress(self, job_id: str, progress: Progress) -> None:
        if (row := self.download_rows.get(job_id)) is not None:
            row.on_progress(progress)

    def on_finished(self, job_id: str, result: object) -> None:
        self._drop_row(job_id)
        if isinstance(result, InstalledModel):
            self.refresh()
            self.select_installed(result.id)

    def on_failed(self, job_id: str, message: str) -> None:
        if (row := self.download_rows.get(job_id)) is not None:
            row.on_failed(message)
        refusal = self.controller.gated_refusal(job_id)
        if refusal is not None:
            self.refused_notice.show_refused(refusal)

    def on_cancel_requested(self, job_id: str) -> None:
        running = self.controller.jobs.job(job_id) is not None
        self.controller.discard(job_id)
        if not running:  # a failed job: nothing will answer, drop its row now
            self._drop_row(job_id)

    def on_cancelled(self, job_id: str) -> None:
        self._drop_row(job_id)

    def _drop_row(self, job_id: str) -> None:
        row = self.download_rows.pop(job_id, None)
        if row is not None:
            self.queue_layout.removeWidget(row)
            row.deleteLater()
        self.queue_empty.setVisible(not self.download_rows)
        self._update_details(self._selected(self.catalog_view))
        self.on_installed_selected()
