"""The text of a message (or of its thinking): a read-only text browser whose height is
its document's at the widget's width."""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, Qt, QUrl, Signal
from PySide6.QtWidgets import QAbstractScrollArea, QFrame, QSizePolicy, QTextBrowser, QWidget


class MessageBody(QTextBrowser):
    """The message text: one QTextDocument laid out once per change at the widget's width,
    its height fixed to the document's (no height-for-width: a column of those made every
    relayout ask all messages again, ~250 ms per streamed update in a 100-message chat).

    Signals:
        link_activated(str url)
    """

    link_activated = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBody")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setReadOnly(True)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizeAdjustPolicy(QAbstractScrollArea.SizeAdjustPolicy.AdjustIgnored)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.DefaultContextMenu)
        self.viewport().setAutoFillBackground(False)
        self.document().setDocumentMargin(0)
        self.anchorClicked.connect(self.on_anchor_clicked)
        self.setFixedHeight(0)

    def set_html(self, html: str) -> None:
        self.document().setHtml(html)
        self._fit()

    def on_anchor_clicked(self, url: QUrl) -> None:
        self.link_activated.emit(url.toString())

    def _fit(self) -> None:
        width = self.viewport().width()
        if width > 0:
            self.document().setTextWidth(width)
        height = math.ceil(self.document().size().height())
        if height != self.height():
            self.setFixedHeight(height)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)  # a new font (the chat text size) becomes the document's
        if event.type() == QEvent.Type.FontChange:
            self._fit()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._fit()

    def wheelEvent(self, event) -> None:
        event.ignore()  # the conversation scrolls, not the message

    def set_plain_text(self, text: str) -> None:
        self.document().setPlainText(text)
        self._fit()
