"""The "Import a GGUF" dialog: what the file holds (read from its header), the name the model
will get, and the precision to convert at, each with a sentence and the size it would take.

``GGUFFinderDialog`` comes first: it lists the GGUFs that LM Studio, Ollama, GPT4All and Jan
keep (``app.models.gguf.locations``, a bounded scan run off the UI thread by
``app.workers.gguf_scan``: the list fills as files are found, and closing the dialog stops
the scan) and its Browse… opens the file picker in the first of those apps' folders that
exists, not in the working folder.

The import dialog reads only the header (``preview_gguf``, ~50 ms even for a 150k-token
vocabulary) and converts nothing: Import emits ``import_requested`` and the
``ModelController`` runs the job.
A file the converter would refuse shows the converter's sentence here and cannot be imported.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.models.gguf.locations import FoundGGUF, sort_key
from app.models.gguf.preview import PRECISION_HELP, GGUFPreview, preview_gguf
from app.models.gguf.weights import PRECISIONS
from app.settings import Settings
from app.ui.file_folders import remember, start_folder
from app.units import format_bytes, format_parameters
from app.workers.gguf_scan import GGUFScan, Scanner

SCANNING_TEXT = "Looking for GGUF files in the folders of LM Studio, Ollama, GPT4All and Jan…"
PRECISION_LABELS = {"native": "Native", "int4": "int4", "fp16": "fp16", "fp32": "fp32"}


class GGUFImportDialog(QDialog):
    """Signals: import_requested(str path, str precision, str name)."""

    import_requested = Signal(str, str, str)

    def __init__(self, path: str | Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.path = Path(path)
        self.setWindowTitle("Import a GGUF model")
        self.setAccessibleName("Import a GGUF model")
        self.preview: GGUFPreview | None = None
        self.problem = ""
        try:
            self.preview = preview_gguf(self.path)
        except HearthError as exc:
            self.problem = str(exc)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        self.import_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.import_button.setText("Import")
        self.buttons.accepted.connect(self.on_import_clicked)
        self.buttons.rejected.connect(self.reject)
        self.facts = QFormLayout()
        self.fact_labels: dict[str, QLabel] = {}
        self.name_edit = QLineEdit(self)
        self.name_edit.setAccessibleName("Model name")
        self.error_label = QLabel(self.problem, self)
        self.error_label.setObjectName("statusNote")
        self.error_label.setProperty("level", "error")
        self.error_label.setWordWrap(True)
        self.error_label.setAccessibleName("Why this file cannot be imported")
        self.error_label.setVisible(bool(self.problem))
        self.precision_group = QButtonGroup(self)
        self.precision_buttons: dict[str, QRadioButton] = {}
        self.precision_notes: dict[str, QLabel] = {}
        layout = QVBoxLayout(self)
        layout.addLayout(self.facts)
        self._add_facts()
        layout.addWidget(self.error_label)
        if self.preview is not None:
            layout.addSpacing(6)
            layout.addWidget(QLabel("<b>Precision</b>", self))
            for precision in PRECISIONS:
                self._add_precision(layout, precision)
        self.import_button.setEnabled(self.preview is not None)
        if self.preview is None:
            cancel = self.buttons.button(QDialogButtonBox.StandardButton.Cancel)
            cancel.setDefault(True)
            cancel.setFocus()
        layout.addWidget(self.buttons)
        self.setMinimumWidth(520)

    # construction -------------------------------------------------------------------------

    def _fact(self, label: str, text: str) -> None:
        value = QLabel(text, self)
        value.setWordWrap(True)
        value.setAccessibleName(label)
        self.fact_labels[label] = value
        self.facts.addRow(label, value)

    def _add_facts(self) -> None:
        self._fact("File", self.path.name)
        try:
            size = format_bytes(self.path.stat().st_size)
        except OSError:
            size = "unknown"
        self._fact("Size", size)
        p = self.preview
        if p is None:
            return
        self._fact("Architecture",
                   f"{p.architecture} · {p.layers} layers · {format_parameters(p.parameters)} · "
                   f"{p.context_length:,} tokens of context")
        self._fact("Quantization", p.quantization)
        self.name_edit.setText(p.suggested_name)
        self.facts.addRow("Name", self.name_edit)

    def _add_precision(self, layout: QVBoxLayout, precision: str) -> None:
        assert self.preview is not None
        size = self.preview.output_bytes.get(precision)
        label = PRECISION_LABELS[precision]
        button = QRadioButton(f"{label} · about {format_bytes(size)}" if size else label, self)
        button.setAccessibleName(f"Precision {precision}")
        note_text = PRECISION_HELP[precision]
        note = QLabel(note_text, self)
        note.setObjectName("statusNote")
        note.setWordWrap(True)
        note.setIndent(24)
        button.setAccessibleDescription(note_text)
        self.precision_group.addButton(button)
        self.precision_buttons[precision] = button
        self.precision_notes[precision] = note
        button.setChecked(precision == "native")
        layout.addWidget(button)
        layout.addWidget(note)

    # answers ------------------------------------------------------------------------------

    def precision(self) -> str:
        return next((p for p, b in self.precision_buttons.items() if b.isChecked()), "native")

    def set_precision(self, precision: str) -> None:
        self.precision_buttons[precision].setChecked(True)

    def model_name(self) -> str:
        return " ".join(self.name_edit.text().split())

    def on_import_clicked(self) -> None:
        if self.preview is None:
            return
        self.import_requested.emit(str(self.path), self.precision(), self.model_name())
        self.accept()


class GGUFFinderDialog(QDialog):
    """The GGUFs other apps keep, to pick one from, and Browse… for any other file.

    ``chosen`` is the picked path ("" until one is picked); ``scanned`` turns True when the
    scan has ended. ``scanner`` (tests) replaces ``locations.scan_iter``."""

    def __init__(self, parent: QWidget | None = None, *, home: Path | None = None,
                 settings: Settings | None = None, scanner: Scanner | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self.setWindowTitle("Import a GGUF file")
        self.setAccessibleName("Import a GGUF file")
        self.home = home
        self.chosen = ""
        self.found: list[FoundGGUF] = []
        self.folders: list[tuple[str, Path]] = []
        self.scanned = False
        # the last GGUF's folder, else (once the scan says) the first app folder, else
        # Downloads
        self.start_folder = start_folder(settings, "gguf", "") if settings is not None else ""
        layout = QVBoxLayout(self)
        self.summary = QLabel(SCANNING_TEXT, self)
        self.summary.setWordWrap(True)
        layout.addWidget(self.summary)
        self.list = QListWidget(self)
        self.list.setAccessibleName("GGUF files found")
        self.list.hide()
        self.list.itemDoubleClicked.connect(lambda _item: self.on_next())
        layout.addWidget(self.list)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel, self)
        self.browse_button = self.buttons.addButton(
            "Browse…", QDialogButtonBox.ButtonRole.ActionRole)
        self.next_button = self.buttons.addButton(
            "Next", QDialogButtonBox.ButtonRole.AcceptRole)
        self.next_button.setEnabled(False)
        self.browse_button.clicked.connect(self.on_browse)
        self.next_button.clicked.connect(self.on_next)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.setMinimumWidth(520)
        self.scan = GGUFScan(home, scanner=scanner)
        self.scan.folders.connect(self.on_folders)
        self.scan.found.connect(self.on_found)
        self.scan.finished.connect(self.on_scanned)
        self.scan.start()

    # the scan's results (queued to this thread) -------------------------------------------

    def on_folders(self, folders: object) -> None:
        self.folders = list(folders)  # type: ignore[call-overload]
        app_folder = str(self.folders[0][1]) if self.folders else ""
        if self.settings is not None:
            self.start_folder = start_folder(self.settings, "gguf", app_folder)
        else:
            self.start_folder = app_folder

    def on_found(self, item: FoundGGUF) -> None:
        """One more file: in its place (by app and name), the first one selected."""
        row = bisect.bisect([sort_key(f) for f in self.found], sort_key(item))
        self.found.insert(row, item)
        entry = QListWidgetItem(f"{item.name} · {item.app} · {format_bytes(item.size)}")
        entry.setData(Qt.ItemDataRole.UserRole, str(item.path))
        entry.setToolTip(str(item.path))
        self.list.insertItem(row, entry)
        self.list.show()
        if self.list.currentItem() is None:
            self.list.setCurrentRow(0)
        self.next_button.setEnabled(True)
        apps = ", ".join(sorted({f.app for f in self.found}))
        self.summary.setText(f"GGUF files found in {apps}" + (":" if self.scanned else "…"))

    def on_scanned(self, _stopped: bool) -> None:
        self.scanned = True
        apps = sorted({app for app, _ in self.folders})
        if self.found:
            text = f"GGUF files found in {', '.join(sorted({f.app for f in self.found}))}:"
        elif apps:
            text = f"No GGUF files found in the folders of {', '.join(apps)}."
        else:
            text = "No LM Studio, Ollama, GPT4All or Jan models folder was found."
        self.summary.setText(text)

    def done(self, result: int) -> None:
        self.scan.stop()  # a flag: the scan ends at its next entry
        super().done(result)

    def closeEvent(self, event) -> None:
        self.scan.stop()
        super().closeEvent(event)

    def on_next(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.chosen = str(item.data(Qt.ItemDataRole.UserRole))
            self.accept()

    def on_browse(self) -> None:
        path = self.ask_file()
        if path:
            if self.settings is not None:
                remember(self.settings, "gguf", path)
            self.chosen = path
            self.accept()

    def ask_file(self) -> str:
        """The file picker, opened in the first app folder that exists (tests replace it)."""
        path, _ = QFileDialog.getOpenFileName(
            self, "Import a GGUF file", self.start_folder, "GGUF (*.gguf)")
        return path
