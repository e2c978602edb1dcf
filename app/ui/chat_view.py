"""The conversation: one centred column of message widgets, kept in step with a ChatModel.

The column is about 72 characters wide with generous spacing; an empty chat shows the
welcome page instead. Only the streaming (last) message is re-rendered while a reply
streams, at most ~30 times a second; the other widgets are left alone, so long chats stay
smooth. A chat opens with its newest ``PAGE`` messages; "Show earlier messages" puts as many more
above them (the shown ones stay, and so does the view).

Every action (icon buttons, branch arrows, code-copy links) arrives as a ``hearth:`` URL at
``on_anchor_clicked``: ``copy/<row>``, ``code/<row>/<n>``, ``edit/<row>``, ``delete/<row>``,
``regenerate/<row>``, ``retry/<row>``, ``send/<row>``, ``previous/<row>``, ``next/<row>``,
``more/0``.
"""

from __future__ import annotations

import itertools
import time

from PySide6.QtCore import QEvent, QModelIndex, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAccessible, QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QPushButton,
    QScrollArea,
    QScrollBar,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.chat.parts import Source, ToolResult
from app.ui.chat_model import ChatModel
from app.ui.message_widget import MessageWidget
from app.ui.sources_list import PassageDialog
from app.ui.theme import Colors, chat_stylesheet, colors_for
from app.ui.tool_card import ToolCallCard
from app.ui.undo_toast import UndoToast
from app.ui.welcome_page import WelcomePage
from app.ui.zoom import system_points, zoom_stylesheet

STREAM_INTERVAL_MS = 33  # ~30 Hz
PAGE = 50  # messages rendered when a chat opens; "Show earlier messages" adds as many more
COLUMN_CHARS = 72  # the readable line length of the column
ROW_ACTIONS = ("edit", "delete", "regenerate", "retry", "send", "previous", "next")

try:  # Qt >= 6.8
    from PySide6.QtGui import QAccessibleAnnouncementEvent as _announcement_event
except ImportError:  # pragma: no cover - older Qt: screen readers read the name change
    _announcement_event = None


class ChatView(QWidget):
    """Read-only view of a ChatModel.

    Signals:
        anchorClicked(QUrl url): a ``hearth:`` action or a link in a message was clicked.
        action_requested(str action, int row): "edit", "delete", "regenerate", "retry",
            "send", "previous" or "next" on a row.
        copied(str what): text was put on the clipboard ("message" or "code").
        announced(str text): a finished reply was announced to screen readers (once each).
    """

    anchorClicked = Signal(QUrl)
    action_requested = Signal(str, int)
    copied = Signal(str)
    announced = Signal(str)

    def __init__(self, model: ChatModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model
        self._colors: Colors = colors_for(QGuiApplication.palette())
        self._text_points: float | None = None  # None: the system's text size
        self._widgets: list[MessageWidget] = []
        self._first = 0  # first rendered row (older rows wait behind "Show earlier")
        self._page = PAGE
        self._follow = True  # keep the end in view while the user has not scrolled up
        self.render_count = 0  # full renders, for tests and the bench
        self.stream_render_count = 0
        self.setObjectName("chatView")
        self.setAccessibleName("Conversation")
        self.setAccessibleDescription("The messages of the open chat; the newest is at the end.")

        self.scroll = QScrollArea(self)
        self.scroll.setObjectName("chatScroll")
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        page = QWidget()
        page.setObjectName("chatPage")
        self.column = QWidget(page)
        self.column.setObjectName("chatColumn")
        self.column.setAccessibleName("Messages")
        page_layout = QHBoxLayout(page)
        page_layout.setContentsMargins(16, 8, 16, 8)
        page_layout.addStretch(1)
        page_layout.addWidget(self.column, 100)
        page_layout.addStretch(1)
        self._column_layout = QVBoxLayout(self.column)
        self._column_layout.setContentsMargins(0, 8, 0, 24)
        self._column_layout.setSpacing(4)
        self.show_earlier_button = QPushButton(self.column)
        self.show_earlier_button.setObjectName("showEarlier")
        self.show_earlier_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.show_earlier_button.clicked.connect(self.show_earlier)
        self._column_layout.addWidget(self.show_earlier_button, 0, Qt.AlignmentFlag.AlignHCenter)
        self._column_layout.addStretch(1)
        self.scroll.setWidget(page)

        self.welcome = WelcomePage(self)
        self.stack = QStackedWidget(self)
        self.stack.addWidget(self.scroll)
        self.stack.addWidget(self.welcome)
        self.toast = UndoToast(self)
        toast_row = QHBoxLayout()
        toast_row.setContentsMargins(0, 0, 0, 6)
        toast_row.addStretch(1)
        toast_row.addWidget(self.toast)
        toast_row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.stack, 1)
        layout.addLayout(toast_row)

        self._stream_timer = QTimer(self)
        self._stream_timer.setSingleShot(True)
        self._stream_timer.setInterval(STREAM_INTERVAL_MS)
        self._stream_timer.timeout.connect(self.on_stream_timer)
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self.on_scroll_range_changed)
        bar.valueChanged.connect(self.on_scroll_value_changed)
        self.anchorClicked.connect(self.on_anchor_clicked)
        model.modelReset.connect(self.on_model_reset)
        model.rowsInserted.connect(self.on_rows_inserted)
        model.rowsRemoved.connect(self.on_rows_removed)
        model.dataChanged.connect(self.on_data_changed)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.connect(self.on_focus_changed)
            app.paletteChanged.connect(self.on_palette_changed)
        self._apply_colors()
        self.render_all()

    # state --------------------------------------------------------------------------------

    def set_busy(self, busy: bool) -> None:
        """Tell screen readers whether a reply is streaming."""
        self.setAccessibleDescription(
            "The assistant is replying." if busy else "The messages of the open chat."
        )

    def set_model_name(self, name: str | None) -> None:
        """The model the welcome page names (None: no model loaded)."""
        self.welcome.set_model(name)

    def message_widget(self, row: int) -> MessageWidget:
        """The widget of model row ``row`` (it must be rendered)."""
        return self._widgets[row - self._first]

    def message_widgets(self) -> list[MessageWidget]:
        return list(self._widgets)

    def verticalScrollBar(self) -> QScrollBar:
        return self.scroll.verticalScrollBar()

    def toPlainText(self) -> str:
        """The text on screen: the "Show earlier" link, then each message."""
        if self.stack.currentWidget() is self.welcome:
            return ""
        parts = []
        if not self.show_earlier_button.isHidden():
            parts.append(self.show_earlier_button.text())
        parts += [w.plain_text() for w in self._widgets if w.shown_in_column]
        return "\n\n".join(parts)

    def toHtml(self) -> str:
        return "\n".join(w.html() for w in self._widgets)

    # rendering ----------------------------------------------------------------------------

    def on_model_reset(self) -> None:
        self._page = PAGE
        self._follow = True
        self.render_all()

    def render_all(self) -> None:
        """Render the newest ``self._page`` messages from scratch."""
        self._stream_timer.stop()
        self.column.setUpdatesEnabled(False)
        for widget in self._widgets:
            self._column_layout.removeWidget(widget)
            widget.hide()
            widget.deleteLater()
        self._widgets = []
        count = self._model.rowCount()
        self._first = max(0, count - self._page)
        self._update_show_earlier()
        for row in range(self._first, count):
            self._add_widget(row)
        self._link_results(self._widgets)
        self._link_sources()
        self.column.setUpdatesEnabled(True)
        self.stack.setCurrentWidget(self.scroll if count else self.welcome)
        self.render_count += 1
        if self._follow:
            self.scroll_to_end()

    def show_earlier(self) -> None:
        """Render up to ``PAGE`` older messages above those shown (the shown ones stay as they
        are), the view staying on the message that was at its top."""
        if self._first == 0:
            return
        self._stream_timer.stop()
        self._follow = False
        bar = self.verticalScrollBar()
        anchor = self._widgets[0] if self._widgets else None
        offset = (anchor.y() if anchor else 0) - bar.value()
        first = max(0, self._first - PAGE)
        self.column.setUpdatesEnabled(False)
        older = [self._make_widget(row) for row in range(first, self._first)]
        for index, widget in enumerate(older):
            self._column_layout.insertWidget(1 + index, widget)  # after "Show earlier"
        self._widgets[:0] = older
        self._first = first
        self._page = self._model.rowCount() - first  # a later full render keeps them
        self._update_show_earlier()
        # Tab goes through the messages in their order: new widgets join the focus chain at
        # its end, so move them in front of the ones shown before
        chain = [self.show_earlier_button, *older, *([anchor] if anchor else [])]
        for before, after in itertools.pairwise(chain):
            QWidget.setTabOrder(before, after)
        self.column.setUpdatesEnabled(True)
        self._link_results(self._widgets)
        self._link_sources()
        if self.column.isVisible():
            for widget in older:
                widget.setVisible(widget.shown_in_column)
        QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        bar.setValue(anchor.y() - offset if anchor else 0)

    def _update_show_earlier(self) -> None:
        self.show_earlier_button.setText(f"Show earlier messages ({self._first} more)")
        self.show_earlier_button.setVisible(self._first > 0)

    def _make_widget(self, row: int) -> MessageWidget:
        widget = MessageWidget(self._model.message(row), row, self._colors, self.column)
        widget.link_activated.connect(self.on_link_activated)
        widget.sources.source_clicked.connect(self.show_passage)
        return widget

    def _add_widget(self, row: int) -> MessageWidget:
        widget = self._make_widget(row)
        # before the trailing stretch
        self._column_layout.insertWidget(self._column_layout.count() - 1, widget)
        self._widgets.append(widget)
        if self.column.isVisible() and widget.shown_in_column:
            widget.show()  # now, not on the next event-loop turn (its buttons are usable)
        if widget.message.role == "tool":
            self._link_results([widget])
        elif widget.message.role == "assistant":
            self._link_sources()
        return widget

    def _link_sources(self) -> None:
        """The passages a turn used (stored with its user message) are listed under the
        turn's last reply."""
        sources: tuple = ()
        question = ""
        last: MessageWidget | None = None
        for widget in [*self._widgets, None]:
            if widget is None or widget.message.role == "user":
                if last is not None:
                    last.sources.set_sources(sources, question)
                if widget is None:
                    break
                sources = tuple(p for p in widget.message.parts if isinstance(p, Source))
                question = widget.message.content  # what the passages were searched for
                last = None
            elif widget.message.role == "assistant":
                if last is not None:
                    last.sources.set_sources(())
                last = widget

    def show_passage(self, source: Source) -> PassageDialog:
        """The passage in full, with "Open file"."""
        self.passage = PassageDialog(source, self)
        self.passage.show()
        return self.passage

    def _link_results(self, widgets: list[MessageWidget]) -> None:
        """Each ``tool`` row's result goes into the card of the call it answers (in the
        reply above it)."""
        for widget in widgets:
            for result in widget.message.parts:
                if not isinstance(result, ToolResult):
                    continue
                card = self.tool_card(result.call_id, before=widget)
                if card is not None:
                    card.set_result(result)

    def tool_card(self, call_id: str, before: MessageWidget | None = None
                  ) -> ToolCallCard | None:
        """The card of the call ``call_id`` (the latest one above ``before``)."""
        widgets = self._widgets
        if before is not None and before in widgets:
            widgets = widgets[: widgets.index(before)]
        for widget in reversed(widgets):
            card = widget.tool_cards.get(call_id)
            if card is not None:
                return card
        return None

    def on_rows_inserted(self, parent: QModelIndex, first: int, last: int) -> None:
        if first != self._first + len(self._widgets) or last != self._model.rowCount() - 1:
            self.render_all()
            return
        for row in range(first, last + 1):
            self._add_widget(row)
        self.stack.setCurrentWidget(self.scroll)

    def on_rows_removed(self, parent: QModelIndex, first: int, last: int) -> None:
        """Rows removed at the end (regenerate, edit, a failed reply) drop the tail widgets;
        anything else re-renders."""
        local = first - self._first
        if local < 0 or last != self._first + len(self._widgets) - 1:
            self.render_all()
            return
        self._stream_timer.stop()
        for widget in self._widgets[local:]:
            self._column_layout.removeWidget(widget)
            widget.hide()
            widget.deleteLater()
        del self._widgets[local:]
        if not self._model.rowCount():
            self.stack.setCurrentWidget(self.welcome)

    def on_data_changed(self, top_left: QModelIndex, bottom_right: QModelIndex, roles) -> None:
        last = self._model.rowCount() - 1
        if top_left.row() == last == bottom_right.row() and roles and (
            ChatModel.ContentRole in roles or ChatModel.ReasoningRole in roles
        ):
            if not self._stream_timer.isActive():
                self._stream_timer.start()
            return
        for row in range(top_left.row(), bottom_right.row() + 1):
            if row == last:
                self._stream_timer.stop()
            self._update_row(row)

    def _update_row(self, row: int) -> None:
        local = row - self._first
        if not 0 <= local < len(self._widgets):
            return
        widget = self._widgets[local]
        was_streaming = widget.message.status == "streaming"
        message = self._model.message(row)
        widget.set_message(message, row)
        if message.role == "user":  # its sources arrived
            self._link_sources()
        if was_streaming and message.status != "streaming" and message.role == "assistant":
            self._announce(widget)

    def _announce(self, widget: MessageWidget) -> None:
        """Tell screen readers once that a reply is finished (never per token)."""
        note = {"stopped": " (stopped)", "failed": " (failed)"}.get(widget.message.status, "")
        text = f"Reply finished{note}: {widget.message.content}"
        if _announcement_event is not None:
            QAccessible.updateAccessibility(_announcement_event(widget, text))
        self.announced.emit(text)

    def on_stream_timer(self) -> None:
        self.rerender_last()

    def rerender_last(self) -> None:
        """Re-render only the last message's widget."""
        self._stream_timer.stop()
        count = self._model.rowCount()
        if not count or self._first + len(self._widgets) != count or not self._widgets:
            return
        started = time.perf_counter()
        self._widgets[-1].set_message(self._model.message(count - 1), count - 1)
        self.stream_render_count += 1
        # A very long reply costs more per render: back off so the UI thread stays mostly free.
        spent_ms = (time.perf_counter() - started) * 1000
        self._stream_timer.setInterval(max(STREAM_INTERVAL_MS, int(spent_ms * 4)))

    def flush(self) -> None:
        """Render a pending streaming update now and lay the column out (the scroll range
        is then final: a finished reply is in view at once)."""
        if self._stream_timer.isActive():
            self.rerender_last()
        QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)

    # scrolling ----------------------------------------------------------------------------

    def scroll_to_end(self) -> None:
        self._follow = True
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def on_scroll_range_changed(self, _minimum: int, maximum: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(maximum)

    def on_scroll_value_changed(self, value: int) -> None:
        self._follow = value >= self.verticalScrollBar().maximum() - 8

    # interaction --------------------------------------------------------------------------

    def on_link_activated(self, url: str) -> None:
        self.anchorClicked.emit(QUrl(url))

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
            local = row - self._first
            if not 0 <= local < len(self._widgets):
                return
            blocks = self._widgets[local].rendered().code_blocks
            index = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else -1
            if 0 <= index < len(blocks):
                QGuiApplication.clipboard().setText(blocks[index])
                self.copied.emit("code")
        elif action in ROW_ACTIONS:
            self.action_requested.emit(action, row)

    def on_focus_changed(self, old: QWidget | None, new: QWidget | None) -> None:
        """Actions show on the message that holds the focus (and hide on the one it left)."""
        for widget in (self._message_of(old), self._message_of(new)):
            if widget is not None:
                widget.set_actions_shown(widget.has_focus_inside() or widget.underMouse())
        focused = self._message_of(new)
        if focused is not None and new is not None:
            self.scroll.ensureWidgetVisible(new, 0, 24)

    def _message_of(self, widget: QWidget | None) -> MessageWidget | None:
        while widget is not None and widget is not self:
            if isinstance(widget, MessageWidget):
                return widget if widget in self._widgets else None
            widget = widget.parentWidget()
        return None

    def _apply_colors(self) -> None:
        points = self.text_points()
        self.setStyleSheet(chat_stylesheet(self._colors) + zoom_stylesheet(points))

    def text_points(self) -> float:
        """The size every message, code block, table and thinking block is written in."""
        return self._text_points if self._text_points is not None else system_points()

    def set_text_points(self, points: float | None) -> None:
        """Zoom the conversation (None: follow the system's text size)."""
        self._text_points = points
        self._apply_colors()
        self._fit_column()

    def on_palette_changed(self, *_args: object) -> None:
        """The app's palette decides the theme (a stylesheet pins a widget's own palette, so
        the view listens to the application rather than to its own PaletteChange)."""
        colors = colors_for(QGuiApplication.palette())
        if colors != self._colors:
            self._colors = colors
            self._apply_colors()
            for widget in self._widgets:
                widget.set_colors(colors)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_column()

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._fit_column()

    def _fit_column(self) -> None:
        """About COLUMN_CHARS characters of the text size wide (wider text, wider column),
        never wider than the view: no sideways scrolling at any zoom."""
        metrics = self.fontMetrics()
        self.column.setMaximumWidth(metrics.horizontalAdvance("x" * COLUMN_CHARS) + 120)

    def keyPressEvent(self, event) -> None:
        if (
            event.key() == Qt.Key.Key_End
            and event.modifiers() & Qt.KeyboardModifier.ControlModifier
        ):
            self.scroll_to_end()
            return
        super().keyPressEvent(event)
