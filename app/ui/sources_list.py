"""The passages a reply used, listed under it (file, page or heading, a snippet: the
passage's sentence nearest the question's words, app/documents/snippets.py); clicking one
shows the whole passage with "Open file"."""

from __future__ import annotations

import os

from PySide6.QtCore import QSize, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QResizeEvent
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.chat.parts import Source
from app.documents.snippets import snippet
from app.ui.focus_ring import draw_focus_ring


def source_line(number: int, source: Source, query: str = "") -> str:
    """"[1] kettle.md · Kettle › Descaling — Descale the kettle monthly…" (``query``: the
    question the passage was found for)."""
    where = f" · {source.location}" if source.location else ""
    return f"[{number}] {source.document}{where} — {snippet(source.text, query)}"


class SourceButton(QPushButton):
    """A source's line, cut with "…" to the reply's width (a narrow window never clips
    it; the whole line is ``line`` and in the tooltip)."""

    PADDING_PX = 8

    def __init__(self, line: str, parent: QWidget | None = None) -> None:
        super().__init__(line, parent)
        self.line = line
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def minimumSizeHint(self) -> QSize:
        return QSize(0, super().minimumSizeHint().height())

    def paintEvent(self, event) -> None:
        super().paintEvent(event)
        draw_focus_ring(self)  # a flat button shows no focus of its own

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        width = max(0, event.size().width() - self.PADDING_PX)
        self.setText(self.fontMetrics().elidedText(self.line, Qt.TextElideMode.ElideRight,
                                                   width))


class SourcesList(QWidget):
    """Signals: source_clicked(Source); changed(): its buttons were made again."""

    source_clicked = Signal(object)
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sourcesList")
        self.sources: tuple[Source, ...] = ()
        self.query = ""
        self.buttons: list[SourceButton] = []
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 4, 0, 0)
        self._layout.setSpacing(0)
        self.heading = QLabel("Sources", self)
        self.heading.setObjectName("sourcesHeading")
        self._layout.addWidget(self.heading)
        self.hide()

    def set_sources(self, sources: tuple[Source, ...], query: str = "") -> None:
        """``query``: the question they were found for (each snippet shows its words)."""
        if sources == self.sources and query == self.query:
            return
        self.sources, self.query = sources, query
        for button in self.buttons:
            self._layout.removeWidget(button)
            button.hide()
            button.deleteLater()
        self.buttons = []
        for number, source in enumerate(sources, 1):
            line = source_line(number, source, query)
            button = SourceButton(line, self)
            button.setObjectName("sourceButton")
            button.setFlat(True)
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            button.setStyleSheet("text-align: left; padding: 1px 2px;")
            button.setToolTip(f"{line}\n{source.path or source.document}")
            button.setAccessibleName(line)
            button.clicked.connect(lambda _=False, s=source: self.source_clicked.emit(s))
            self._layout.addWidget(button)
            self.buttons.append(button)
        self.setVisible(bool(sources))
        self.changed.emit()

    def plain_text(self) -> str:
        return "\n".join(["Sources", *(b.line for b in self.buttons)]) if self.sources else ""


class PassageDialog(QDialog):
    """One passage in full, with "Open file" (the system's viewer)."""

    def __init__(self, source: Source, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.source = source
        where = f" — {source.location}" if source.location else ""
        self.setWindowTitle(f"{source.document}{where}")
        self.text = QPlainTextEdit(source.text, self)
        self.text.setReadOnly(True)
        self.text.setAccessibleName("Passage")
        # which part of the file (the window's title is not shown everywhere), then where
        # the file is
        self.where_label = QLabel(f"{source.document}{where}", self)
        self.where_label.setObjectName("passageWhere")
        self.where_label.setWordWrap(True)
        self.where_label.setTextFormat(Qt.TextFormat.PlainText)
        bold = self.where_label.font()
        bold.setBold(True)
        self.where_label.setFont(bold)
        self.path_label = QLabel(source.path or source.document, self)
        self.path_label.setWordWrap(True)
        self.path_label.setTextFormat(Qt.TextFormat.PlainText)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        self.open_button = buttons.addButton("Open file", QDialogButtonBox.ButtonRole.ActionRole)
        self.open_button.setEnabled(bool(source.path))
        self.open_button.clicked.connect(self.on_open)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.where_label)
        layout.addWidget(self.path_label)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)
        self.resize(560, 380)
        self.opened: list[str] = []

    def on_open(self) -> None:
        if not os.path.isfile(self.source.path):  # moved or deleted since it was indexed
            self.path_label.setText(f"{self.source.document} is no longer at "
                                    f"{self.source.path} (moved or deleted); the passage "
                                    "below is what was indexed.")
            self.open_button.setEnabled(False)
            return
        self.opened.append(self.source.path)
        self.open_url(QUrl.fromLocalFile(self.source.path))

    def open_url(self, url: QUrl) -> None:  # tests replace this
        QDesktopServices.openUrl(url)
