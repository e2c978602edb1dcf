"""The "Import a GGUF" dialog: what the file holds (read from its header), the name the model
will get, and the precision to convert at, each with a sentence and the size it would take.

It reads only the header (``preview_gguf``, ~50 ms even for a 150k-token vocabulary) and
converts nothing: Import emits ``import_requested`` and the ``ModelController`` runs the job.
A file the converter would refuse shows the converter's sentence here and cannot be imported.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.models.gguf.preview import PRECISION_HELP, GGUFPreview, preview_gguf
from app.models.gguf.weights import PRECISIONS
from app.units import format_bytes, format_parameters

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
