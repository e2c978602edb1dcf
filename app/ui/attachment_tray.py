"""The composer's attachments: the attach button (a file dialog), and a chip per file
waiting to go with the next message (✕ takes it off). Files pasted or dropped on the
composer land here too (``ComposerEdit.files_added``). Once a message went with them they
leave the tray (``discard``): the message's row shows them, as "reading…" chips while they
are read off the UI thread (``attachment_chips``)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QToolButton, QWidget

from app.chat.parts import Attachment

DOCUMENT_FILTER = ("Documents (*.pdf *.docx *.html *.htm *.md *.markdown *.txt *.rst *.csv "
                   "*.tsv *.json *.py *.js *.ts *.c *.h *.cpp *.rs *.go *.java *.sh *.toml "
                   "*.yaml *.yml);;All files (*)")
READING = "reading…"


def chip(text: str, parent: QWidget | None = None) -> QToolButton:
    """A file chip (on the composer, and on a sent message)."""
    button = QToolButton(parent)
    button.setObjectName("fileChip")
    button.setText(text)
    button.setAccessibleName(f"Attached file {text}")
    button.setAutoRaise(False)
    return button


def attachment_chips(parts: tuple, parent: QWidget, *,
                     reading: bool = False) -> QWidget | None:
    """The chips of a sent message's attachments (None: it has none); ``reading``: they are
    being read (each says so)."""
    files = [p for p in parts if isinstance(p, Attachment)]
    if not files:
        return None
    row = QWidget(parent)
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 2, 0, 0)
    layout.setSpacing(4)
    for part in files:
        if reading:
            button = chip(f"{part.name} · {READING}", row)
            button.setAccessibleName(f"Attached file {part.name}, being read")
            button.setToolTip(f"{part.path}\nBeing read; the message goes to the model "
                              "when its files are read.")
        else:
            button = chip(part.name, row)
            how = "put in the prompt whole" if part.text else "searched for each question"
            button.setToolTip(f"{part.path}\n{how}")
        layout.addWidget(button)
    layout.addStretch(1)
    return row


class AttachmentTray(QWidget):
    """Signals: changed(): a file was attached or taken off."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.files: list[Path] = []
        self.attach_button = QToolButton(self)
        self.attach_button.setObjectName("attachButton")
        self.attach_button.setText("Attach…")
        self.attach_button.setAccessibleName("Attach files")
        self.attach_button.setToolTip("Attach files to the next message (or drop or paste "
                                      "them on the composer)")
        self.attach_button.clicked.connect(self.on_attach)
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(4)
        self._layout.addWidget(self.attach_button)
        self._chips: list[QToolButton] = []

    def on_attach(self) -> None:
        self.add(self.ask_files())

    def ask_files(self) -> list[Path]:  # tests replace this
        names, _ = QFileDialog.getOpenFileNames(self, "Attach files", "", DOCUMENT_FILTER)
        return [Path(n) for n in names]

    def add(self, paths: list[Path]) -> None:
        for path in paths:
            if path.is_file() and path not in self.files:
                self.files.append(path)
        self._rebuild()

    def remove(self, path: Path) -> None:
        if path in self.files:
            self.files.remove(path)
        self._rebuild()

    def discard(self, paths: object) -> None:
        """The message went out with these files: they leave the tray."""
        gone = set(paths)  # type: ignore[call-overload]
        self.files = [p for p in self.files if p not in gone]
        self._rebuild()

    def chip_names(self) -> list[str]:
        return [c.text() for c in self._chips]

    def _rebuild(self) -> None:
        for button in self._chips:
            self._layout.removeWidget(button)
            button.deleteLater()
        self._chips = []
        for path in self.files:
            button = chip(f"{path.name}  ✕", self)
            button.setToolTip(f"{path}\nClick to take it off the message.")
            button.clicked.connect(lambda _=False, p=path: self.remove(p))
            self._layout.addWidget(button)
            self._chips.append(button)
        self.changed.emit()
