"""One bridge for everything the user must hear about.

``HearthError`` (an environment or input problem) becomes a readable sentence in the
window's banner; any other exception is a bug and opens a crash dialog with details to copy.
The app keeps running either way. ``run_app`` routes ``sys.excepthook`` here.
"""

from __future__ import annotations

import sys
import traceback
from types import TracebackType

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app import __version__
from app.errors import HearthError


class MessageBridge(QObject):
    """Signals:
    message_shown(str level, str text): level is "info", "warning" or "error".
    crash_reported(str details): an unexpected exception, formatted.
    message_withdrawn(str text): ``text`` no longer holds (a failed reply is being retried);
        where it still shows, it goes.
    """

    message_shown = Signal(str, str)
    message_withdrawn = Signal(str)
    crash_reported = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._previous_hook = None

    def info(self, text: str) -> None:
        self.message_shown.emit("info", text)

    def warning(self, text: str) -> None:
        self.message_shown.emit("warning", text)

    def error(self, text: str) -> None:
        self.message_shown.emit("error", text)

    def withdraw(self, text: str) -> None:
        self.message_withdrawn.emit(text)

    def report(self, exc: BaseException) -> None:
        """A HearthError is shown as its sentence; anything else is a crash."""
        if isinstance(exc, HearthError):
            self.error(str(exc))
        else:
            self.crash(format_exception(type(exc), exc, exc.__traceback__))

    def crash(self, details: str) -> None:
        self.crash_reported.emit(details)

    # sys.excepthook -----------------------------------------------------------------------

    def excepthook(
        self,
        exc_type: type[BaseException],
        exc: BaseException,
        tb: TracebackType | None,
    ) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            sys.__excepthook__(exc_type, exc, tb)
            return
        if isinstance(exc, HearthError):
            self.error(str(exc))
            return
        details = format_exception(exc_type, exc, tb)
        print(details, file=sys.stderr)
        self.crash(details)

    def install(self) -> None:
        self._previous_hook = sys.excepthook
        sys.excepthook = self.excepthook

    def uninstall(self) -> None:
        if self._previous_hook is not None:
            sys.excepthook = self._previous_hook
            self._previous_hook = None


def format_exception(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> str:
    body = "".join(traceback.format_exception(exc_type, exc, tb))
    return f"Hearth {__version__} on Python {sys.version.split()[0]}, {sys.platform}\n\n{body}"


class CrashDialog(QDialog):
    """Non-modal: says something went wrong, shows the details, copies them."""

    def __init__(self, details: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Hearth hit a bug")
        self.setAccessibleName("Error report")
        self.details = details
        intro = QLabel(
            "Something went wrong inside Hearth. Your chats are saved and the app keeps "
            "running. Please copy the details below into a bug report.",
            self,
        )
        intro.setWordWrap(True)
        self.text = QPlainTextEdit(details, self)
        self.text.setReadOnly(True)
        self.text.setAccessibleName("Error details")
        self.text.setAccessibleDescription("Technical details to paste into a bug report.")
        copy = QPushButton("Copy details", self)
        copy.setAccessibleName("Copy details")
        copy.clicked.connect(self.on_copy)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.close)
        row = QHBoxLayout()
        row.addWidget(copy)
        row.addStretch(1)
        row.addWidget(buttons)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.text, 1)
        layout.addLayout(row)
        self.resize(640, 400)

    def on_copy(self) -> None:
        QGuiApplication.clipboard().setText(self.details)


class Banner(QWidget):
    """A dismissable line at the top of the chat area for info, warnings and errors."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.label.setAccessibleName("Notice")
        close = QPushButton("Dismiss", self)
        close.setAccessibleName("Dismiss notice")
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(close)
        self.level = ""
        self.hide()

    def show_message(self, level: str, text: str) -> None:
        colours = {"error": "#cf222e", "warning": "#9a6700", "info": "#0969da"}
        self.level = level
        self.label.setText(text)
        self.label.setStyleSheet(f"color: {colours.get(level, '#0969da')};")
        self.label.setAccessibleDescription(f"{level}: {text}")
        self.show()

    def withdraw(self, text: str) -> None:
        """Hide the notice if it still says ``text`` (a newer one stays)."""
        if self.label.text() == text:
            self.hide()

    def text(self) -> str:
        return "" if self.isHidden() else self.label.text()
