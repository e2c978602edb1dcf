"""A short note with an Undo button at the foot of the chat ("Message deleted · Undo").

The note stays while the pointer rests on it (a click as it would have vanished still
lands on Undo) and for a few seconds after the pointer leaves. Edit ▸ Undo (Ctrl+Z) brings
the last delete back for as long as the chat stays open, note or no note.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

UNDO_SECONDS = 10
AFTER_HOVER_SECONDS = 4  # the note stays this long after the pointer leaves it


class UndoToast(QFrame):
    """Signals:
    undo_clicked(): the user pressed Undo while the note was shown.
    """

    undo_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("undoToast")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setAttribute(Qt.WidgetAttribute.WA_Hover, True)
        self.label = QLabel(self)
        self.label.setAccessibleName("Notice")
        self.button = QPushButton("Undo", self)
        self.button.setAccessibleName("Undo")
        self.button.setAccessibleDescription("Bring back what was just deleted (Ctrl+Z).")
        self.button.setToolTip("Bring back what was just deleted (Ctrl+Z)")
        self.button.setCursor(Qt.CursorShape.PointingHandCursor)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(14, 6, 8, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button)
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.timeout.connect(self.on_timeout)
        self.button.clicked.connect(self.on_undo)
        self.hide()

    @property
    def paused(self) -> bool:
        """The pointer is on the note: it does not go away."""
        return self.isVisible() and self.underMouse()

    def show_undo(self, text: str, seconds: float | None = None) -> None:
        seconds = UNDO_SECONDS if seconds is None else seconds
        self.label.setText(text)
        self.setAccessibleDescription(text)
        self.show()
        self.raise_()
        self.timer.start(int(seconds * 1000))

    def on_timeout(self) -> None:
        if self.paused:  # checked again when the pointer leaves
            return
        self.hide()

    def event(self, event: QEvent) -> bool:
        kind = event.type()
        if kind in (QEvent.Type.Enter, QEvent.Type.HoverEnter):
            self.timer.stop()
        elif kind in (QEvent.Type.Leave, QEvent.Type.HoverLeave) and self.isVisible():
            self.timer.start(int(AFTER_HOVER_SECONDS * 1000))
        return super().event(event)

    def dismiss(self) -> None:
        self.timer.stop()
        self.hide()

    def on_undo(self) -> None:
        self.dismiss()
        self.undo_clicked.emit()
