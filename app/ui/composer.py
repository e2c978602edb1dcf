"""The message composer: Enter sends, Shift+Enter adds a line, Send turns into Stop."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QPushButton, QWidget


class ComposerEdit(QPlainTextEdit):
    """Text box. Signals: send_pressed(), stop_pressed()."""

    send_pressed = Signal()
    stop_pressed = Signal()
    #: The "send_key" setting: "enter" (Shift+Enter adds a line) or "ctrl+enter" (Enter does).
    send_key = "enter"

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        mods = event.modifiers()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            ctrl = bool(mods & Qt.KeyboardModifier.ControlModifier)
            shift = bool(mods & Qt.KeyboardModifier.ShiftModifier)
            sends = ctrl if self.send_key == "ctrl+enter" else not shift
            if sends:
                self.send_pressed.emit()
            else:
                self.insertPlainText("\n")
            return
        if key == Qt.Key.Key_Escape:
            self.stop_pressed.emit()
            return
        super().keyPressEvent(event)


_HINTS = {
    "enter": ("Message the model…  (Enter sends, Shift+Enter adds a line)",
              "Type a message. Enter sends, Shift+Enter adds a line, Escape stops a reply."),
    "ctrl+enter": ("Message the model…  (Ctrl+Enter sends, Enter adds a line)",
                   "Type a message. Ctrl+Enter sends, Enter adds a line, Escape stops a reply."),
}


class Composer(QWidget):
    """Where the user writes.

    Signals:
        submitted(str text): the user sent a non-empty message.
        stop_requested(): the user asked to stop the streaming reply (Stop button or Esc).
    """

    submitted = Signal(str)
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._generating = False
        self.edit = ComposerEdit(self)
        self.edit.setObjectName("composerEdit")
        self.edit.setAccessibleName("Message")
        self.set_send_key("enter")
        self.edit.setTabChangesFocus(True)
        self.edit.setMaximumHeight(110)
        self.button = QPushButton("Send", self)
        self.button.setObjectName("sendButton")
        self.button.setAccessibleName("Send")
        self.button.setAccessibleDescription("Send the message, or stop the reply being written.")
        self.button.setDefault(True)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 8)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)
        self.edit.send_pressed.connect(self.on_send)
        self.edit.stop_pressed.connect(self.on_stop)
        self.button.clicked.connect(self.on_button_clicked)
        self.setAccessibleName("Composer")

    @property
    def generating(self) -> bool:
        return self._generating

    def set_generating(self, generating: bool) -> None:
        self._generating = generating
        self.button.setText("Stop" if generating else "Send")
        self.button.setAccessibleName("Stop" if generating else "Send")

    def set_text(self, text: str) -> None:
        self.edit.setPlainText(text)
        self.edit.moveCursor(self.edit.textCursor().MoveOperation.End)
        self.edit.setFocus()

    def text(self) -> str:
        return self.edit.toPlainText()

    def on_button_clicked(self) -> None:
        if self._generating:
            self.on_stop()
        else:
            self.on_send()

    def on_send(self) -> None:
        if self._generating:
            return
        text = self.edit.toPlainText().strip()
        if not text:
            return
        self.edit.clear()
        self.submitted.emit(text)

    def on_stop(self) -> None:
        if self._generating:
            self.stop_requested.emit()

    def set_send_key(self, send_key: str) -> None:
        """"enter" or "ctrl+enter" (the "send_key" setting); the hint says which."""
        self.edit.send_key = send_key
        placeholder, description = _HINTS[send_key]
        self.edit.setPlaceholderText(placeholder)
        self.edit.setAccessibleDescription(description)
