"""The composer's attachments: the attach button (a file dialog), and a chip per file
waiting to go with the next message (✕ takes it off). Files pasted or dropped on the
composer land here too (``ComposerEdit.files_added``). Once a message went with them they
leave the tray (``discard``): the message's row shows them, as "reading…" chips while they
are read off the UI thread, then "· searched" on a file too long to go in the prompt whole
(``attachment_chips``). Chips wrap onto more lines (``FlowLayout``) and cut a long name in
the middle, so files never widen the window."""

from __future__ import annotations

import itertools
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFileDialog, QSizePolicy, QToolButton, QWidget

from app.chat.parts import Attachment
from app.ui.flow_layout import FlowLayout, FlowRow
from app.ui.focus_ring import RingToolButton

DOCUMENT_FILTER = ("Documents (*.pdf *.docx *.html *.htm *.md *.markdown *.txt *.rst *.csv "
                   "*.tsv *.json *.py *.js *.ts *.c *.h *.cpp *.rs *.go *.java *.sh *.toml "
                   "*.yaml *.yml);;All files (*)")
READING = "reading…"
SEARCHED = "searched"
#: the widest a file's name is shown on a chip (device-independent pixels)
CHIP_NAME_PX = 220


def chip(name: str, parent: QWidget | None = None, *, suffix: str = "") -> QToolButton:
    """A file chip (on the composer, and on a sent message): the file's ``name`` then
    ``suffix``; a long name is cut in the middle (its start and extension stay, the whole
    name is in the tooltip), so a chip never widens its window."""
    button = RingToolButton(parent)  # the style shows no focus on it
    button.setObjectName("fileChip")
    shown = button.fontMetrics().elidedText(name, Qt.TextElideMode.ElideMiddle,
                                            CHIP_NAME_PX)
    button.setText(shown + suffix)
    button.setAccessibleName(f"Attached file {name}")
    button.setAutoRaise(False)
    return button


def attachment_chips(parts: tuple, parent: QWidget, *, reading: bool = False,
                     undecided: bool = False, waiting: bool = False) -> QWidget | None:
    """The chips of a sent message's attachments (None: it has none); ``reading``: they are
    being read (each says so); ``undecided``: read, and whether each goes in whole or is
    searched waits for the model's context (no "· searched" yet); ``waiting``: the message
    waits its turn, its files are read when it comes."""
    files = [p for p in parts if isinstance(p, Attachment)]
    if not files:
        return None
    row = FlowRow(parent)  # many files wrap onto more lines
    layout = row.flow
    layout.setContentsMargins(0, 2, 0, 0)
    for part in files:
        if reading:
            button = chip(part.name, row, suffix=f" · {READING}")
            button.setAccessibleName(f"Attached file {part.name}, being read")
            button.setToolTip(f"{part.path}\nBeing read; the message goes to the model "
                              "when its files are read.")
        elif waiting:
            button = chip(part.name, row)
            button.setAccessibleName(f"Attached file {part.name}, read when its turn comes")
            button.setToolTip(f"{part.path}\nRead when the message's turn comes, after the "
                              "reply it waits for.")
        elif undecided:
            button = chip(part.name, row)
            button.setAccessibleName(f"Attached file {part.name}, read")
            button.setToolTip(f"{part.path}\nRead; once the model has loaded it goes in "
                              "the prompt whole if it fits, else its passages are searched.")
        elif part.text:
            button = chip(part.name, row)
            button.setToolTip(f"{part.path}\nPut in the prompt whole.")
        else:  # too long for the prompt: its passages are searched for each question
            button = chip(part.name, row, suffix=f" · {SEARCHED}")
            button.setAccessibleName(f"Attached file {part.name}, searched per question")
            button.setToolTip(f"{part.path}\nToo long to go in the prompt whole: the "
                              "passages that match each question are used.")
        layout.addWidget(button)
    return row


class AttachmentTray(QWidget):
    """Signals: changed(): a file was attached or taken off."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.files: list[Path] = []
        self.attach_button = RingToolButton(self)
        self.attach_button.setObjectName("attachButton")
        self.attach_button.setText("Attach…")
        self.attach_button.setAccessibleName("Attach files")
        self.attach_button.setToolTip("Attach files to the next message (or drop or paste "
                                      "them on the composer)")
        self.attach_button.clicked.connect(self.on_attach)
        self._layout = FlowLayout(self)  # many files wrap onto more lines
        self._layout.addWidget(self.attach_button)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
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
            button.hide()  # gone at once, not at the next turn of the event loop
            button.deleteLater()
        self._chips = []
        for path in self.files:
            button = chip(path.name, self, suffix="  ✕")
            button.setAccessibleName(f"Attached file {path.name}: remove it")
            button.setToolTip(f"{path}\nClick to take it off the message.")
            button.clicked.connect(lambda _=False, p=path: self.remove(p))
            self._layout.addWidget(button)
            self._chips.append(button)
        for first, second in itertools.pairwise([self.attach_button, *self._chips]):
            QWidget.setTabOrder(first, second)  # Tab: Attach, then each file's ✕
        self.changed.emit()
