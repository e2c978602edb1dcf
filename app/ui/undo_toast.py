"""A short note with an Undo button at the foot of the chat ("Message deleted · Undo")."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

UNDO_SECONDS = 10


class UndoToast(QFrame):
    """Signals:
    undo_clicked(): the user pressed Undo while the note was shown.
    """

    undo_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("undoToast")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.label = QLabel(self)
        self.label.setAccessibleName("Notice")
        self.button = QPushButton("Undo", self)
        self.button.setAccessibleName("Undo")
        self.button.setAccessibleDescription("Bring back what was just deleted.")
        self.button.setCursor(Qt.CursorShape.PointingHandCursor)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(14, 6, 8, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button)
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.timeout.connect(self.hide)
        self.button.clicked.connect(self.on_undo)
        self.hide()

    def show_undo(self, text: str, seconds: float = UNDO_SECONDS) -> None:
        self.label.setText(text)
        self.setAccessibleDescription(text)
        self.show()
        self.raise_()
        self.timer.start(int(seconds * 1000))

    def on_undo(self) -> None:
        self.timer.stop()
        self.hide()
        self.undo_clicked.emit()
