"""The conversation as rich text in one QTextBrowser, kept in step with a ChatModel.

Only the streaming (last) message is re-rendered while a reply streams, at most ~30 times a
second; the rest of the document is left alone, so long chats stay smooth. Links with the
``hearth:`` scheme are the per-message actions (copy, edit, delete, regenerate) and the
per-code-block copy buttons.
"""

from __future__ import annotations

import html
import time

from PySide6.QtCore import QEvent, QModelIndex, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication, QTextCursor
from PySide6.QtWidgets import QTextBrowser, QWidget

from app.storage.history import StoredMessage
from app.storage.transfer import provenance_line
from app.ui.chat_model import ROLE_NAMES, ChatModel
from app.ui.markdown_render import Rendered, render_markdown
from app.ui.theme import Colors, colors_for

STREAM_INTERVAL_MS = 33  # ~30 Hz
PAGE = 100  # messages rendered when a chat opens; "Show earlier messages" adds more


class ChatView(QTextBrowser):
    """Read-only view of a ChatModel.

    Signals:
        action_requested(str action, int row): "edit", "delete" or "regenerate" on a row.
        copied(str what): text was put on the clipboard ("message" or "code").
    """

    action_requested = Signal(str, int)
    copied = Signal(str)

    def __init__(self, model: ChatModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model
        self._colors: Colors = colors_for(self.palette())
        self._rendered: dict[int, tuple[str, Rendered]] = {}
        self._starts: list[int] = []  # where each rendered row's message begins
        self._first = 0  # first rendered row (older rows wait behind "Show earlier")
        self._page = PAGE
        self.render_count = 0  # full renders, for tests and the bench
        self.stream_render_count = 0
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setReadOnly(True)
        self.setObjectName("chatView")
        self.setAccessibleName("Conversation")
        self.setAccessibleDescription("The messages of the open chat; the newest is at the end.")
        self.document().setDocumentMargin(12)
        self._stream_timer = QTimer(self)
        self._stream_timer.setSingleShot(True)
        self._stream_timer.setInterval(STREAM_INTERVAL_MS)
        self._stream_timer.timeout.connect(self.on_stream_timer)
        self.anchorClicked.connect(self.on_anchor_clicked)
        model.modelReset.connect(self.on_model_reset)
        model.rowsInserted.connect(self.on_rows_inserted)
        model.rowsRemoved.connect(self.on_rows_removed)
        model.dataChanged.connect(self.on_data_changed)
        self.render_all()

    # state --------------------------------------------------------------------------------

    def set_busy(self, busy: bool) -> None:
        """Tell screen readers whether a reply is streaming."""
        self.setAccessibleDescription(
            "The assistant is replying." if busy else "The messages of the open chat."
        )

    def rendered(self, row: int) -> Rendered:
        msg = self._model.message(row)
        cached = self._rendered.get(row)
        if cached is not None and cached[0] == msg.content:
            return cached[1]
        result = render_markdown(msg.content, self._colors, row)
        self._rendered[row] = (msg.content, result)
        return result

    # rendering ----------------------------------------------------------------------------

    def on_model_reset(self) -> None:
        self._page = PAGE
        self._rendered.clear()
        self.render_all()

    def render_all(self) -> None:
        """Render the newest ``self._page`` messages from scratch."""
        self._stream_timer.stop()
        follow = self._at_bottom()
        self.clear()
        self._starts = []
        count = self._model.rowCount()
        self._first = max(0, count - self._page)
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        if self._first:
            cursor.insertHtml(
                f'<p align="center"><a href="hearth:more/0" style="color:{self._colors.link};">'
                f"Show earlier messages ({self._first} more)</a></p>"
            )
        for row in range(self._first, count):
            self._starts.append(self._end_position())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertHtml(self._message_html(row))
        cursor.endEditBlock()
        self.render_count += 1
        if follow:
            self.scroll_to_end()

    def show_earlier(self) -> None:
        self._page += PAGE
        self.render_all()
        self.verticalScrollBar().setValue(0)

    def on_rows_inserted(self, parent: QModelIndex, first: int, last: int) -> None:
        if first != self._first + len(self._starts) or last != self._model.rowCount() - 1:
            self.render_all()
            return
        follow = self._at_bottom()
        for row in range(first, last + 1):
            self._rendered.pop(row, None)
            self._starts.append(self._end_position())
            self._insert_at_end(self._message_html(row))
        if follow:
            self.scroll_to_end()

    def on_rows_removed(self, parent: QModelIndex, first: int, last: int) -> None:
        """Rows removed at the end (regenerate, edit, a failed reply) cut the document's
        tail; anything else re-renders."""
        local = first - self._first
        if local < 0 or last != self._first + len(self._starts) - 1:
            self.render_all()
            return
        self._stream_timer.stop()
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._starts[local])
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        del self._starts[local:]
        for row in list(self._rendered):
            if row >= first:
                del self._rendered[row]

    def on_data_changed(self, top_left: QModelIndex, bottom_right: QModelIndex, roles) -> None:
        last = self._model.rowCount() - 1
        if top_left.row() == last and bottom_right.row() == last:
            if roles and ChatModel.ContentRole in roles:
                if not self._stream_timer.isActive():
                    self._stream_timer.start()
            else:
                self.rerender_last()
        else:
            self.render_all()

    def on_stream_timer(self) -> None:
        self.rerender_last()

    def rerender_last(self) -> None:
        """Replace only the last message's part of the document."""
        self._stream_timer.stop()
        count = self._model.rowCount()
        if not count or self._first + len(self._starts) != count or not self._starts:
            return
        started = time.perf_counter()
        follow = self._at_bottom()
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        cursor.setPosition(self._starts[-1])
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        cursor.insertHtml(self._message_html(count - 1))
        cursor.endEditBlock()
        self.stream_render_count += 1
        if follow:
            self.scroll_to_end()
        # A very long reply costs more per render: back off so the UI thread stays mostly free.
        spent_ms = (time.perf_counter() - started) * 1000
        self._stream_timer.setInterval(max(STREAM_INTERVAL_MS, int(spent_ms * 4)))

    def flush(self) -> None:
        """Render a pending streaming update now."""
        if self._stream_timer.isActive():
            self.rerender_last()

    def scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 8

    def _end_position(self) -> int:
        return self.document().characterCount() - 1

    def _insert_at_end(self, fragment: str) -> None:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertHtml(fragment)

    def _message_html(self, row: int) -> str:
        msg: StoredMessage = self._model.message(row)
        c = self._colors
        bg = c.user_bg if msg.role == "user" else c.assistant_bg
        who = html.escape(ROLE_NAMES.get(msg.role, msg.role))
        links = [("copy", "Copy")]
        if msg.role == "user":
            links += [("edit", "Edit"), ("delete", "Delete")]
        elif msg.role == "assistant":
            links += [("regenerate", "Regenerate"), ("delete", "Delete")]
        actions = " &nbsp; ".join(
            f'<a href="hearth:{name}/{row}" style="color:{c.link};">{label}</a>'
            for name, label in links
        )
        note = ""
        if msg.status == "streaming":
            note = f' <span style="color:{c.muted};">· replying…</span>'
        elif msg.status == "stopped":
            note = f' <span style="color:{c.warning};">· stopped</span>'
        elif msg.status == "failed":
            note = f' <span style="color:{c.error};">· failed</span>'
        body = self.rendered(row).html if msg.content else "<p>&nbsp;</p>"
        footer = ""
        if msg.role == "assistant" and msg.provenance and msg.status != "streaming":
            footer = (
                f'<p style="color:{c.muted}; font-size:small;">'
                f"{html.escape(provenance_line(msg.provenance))}</p>"
            )
        return (
            f'<table width="100%" cellspacing="0" cellpadding="10" '
            f'style="background-color:{bg}; margin-bottom:8px;"><tr><td>'
            f"<p><b>{who}</b>{note} &nbsp;&nbsp; "
            f'<span style="font-size:small;">{actions}</span></p>'
            f"{body}{footer}</td></tr></table>"
        )

    # interaction --------------------------------------------------------------------------

    def on_anchor_clicked(self, url: QUrl) -> None:
        if url.scheme() != "hearth":
            if url.scheme() in ("http", "https", "mailto"):
                QDesktopServices.openUrl(url)
            return
        parts = url.path().split("/")
        action = parts[0]
        if action == "more":
            self.show_earlier()
            return
        try:
            row = int(parts[1])
        except (IndexError, ValueError):
            return
        if not 0 <= row < self._model.rowCount():
            return
        if action == "copy":
            QGuiApplication.clipboard().setText(self._model.message(row).content)
            self.copied.emit("message")
        elif action == "code":
            blocks = self.rendered(row).code_blocks
            index = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else -1
            if 0 <= index < len(blocks):
                QGuiApplication.clipboard().setText(blocks[index])
                self.copied.emit("code")
        elif action in ("edit", "delete", "regenerate"):
            self.action_requested.emit(action, row)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            colors = colors_for(self.palette())
            if colors != self._colors:
                self._colors = colors
                self._rendered.clear()
                self.render_all()

    def keyPressEvent(self, event) -> None:
        if (
            event.key() == Qt.Key.Key_End
            and event.modifiers() & Qt.KeyboardModifier.ControlModifier
        ):
            self.scroll_to_end()
            return
        super().keyPressEvent(event)
