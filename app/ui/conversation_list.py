"""The conversation list: a Qt model over the history database and its side-bar widget.

Chats are grouped by date (Pinned, Today, Yesterday, Previous 7 days, Older); a group's name
is painted above its first chat by ``GroupDelegate``, so every row is a chat and the arrow
keys never land on a header. The list's selection is always the chat on screen.

No row can stop the list from being built: a chat whose row could not be read as written
(``Conversation.damaged``: damaged text, a time no calendar can show) is listed with
"(damaged)" after its title and says why in its tooltip, and a date that still cannot be
shown puts it under "Older".

The chat whose message is in flight (``ChatController.busy_conversation``: answering, waiting
for the model, or having its files read) carries a mark at the right of its row, "answering…"
(``BUSY_MARKS``; only its dot where the words would take over half the row), in its tooltip
and accessible name too, and a "Stop the reply" item in its menu: a reply written in a chat
that is not on screen can be seen, and stopped by name. The mark is the controller's
(``set_busy``), kept in memory only. A chat whose message waits its turn behind it is
marked "queued…" (``set_line``), with "Don't send the waiting message" in its menu.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import (
    QColor,
    QFont,
    QGuiApplication,
    QIcon,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPalette,
)
from PySide6.QtWidgets import (
    QInputDialog,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QMessageBox,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from app.storage.history import Conversation, History
from app.ui.icons import icon
from app.ui.theme import colors_for

Index = QModelIndex | QPersistentModelIndex

GROUPS = ("Pinned", "Today", "Yesterday", "Previous 7 days", "Older")
HEADER_HEIGHT = 26  # at the 9-10 pt system size; it grows with the chat text size


def header_height(option: QStyleOptionViewItem) -> int:
    """Room for a group name above a row, in the list's (zoomed) font."""
    return max(HEADER_HEIGHT, option.fontMetrics.height() + 12)
DAMAGED_SUFFIX = " (damaged)"
#: the mark on the busy chat's row, by what its message is doing (ChatController._busy_now)
BUSY_MARKS = {"answering": "answering…", "waiting": "waiting…", "reading": "reading…",
              "queued": "queued…"}
#: the most of a row the mark's words may take; past it (large text) only its dot shows
MARK_SHARE = 0.5
BUSY_TIPS = {
    "answering": "The model is answering in this chat.",
    "waiting": "A message in this chat waits for the model to load.",
    "reading": "The files of a message in this chat are being read; it is answered next.",
    "queued": "A message in this chat waits for the reply in another chat; it is answered "
              "after it, in the order it was sent.",
}
DAMAGED_TIP = ("Part of this chat could not be read from the history (damaged text, or a "
               "date no calendar can show). Open it to see what is readable, and export it "
               "to keep that.")


def date_group(conv: Conversation, now: float | None = None) -> str:
    """The sidebar group of a chat: pinned, or by the local date it was last used."""
    if conv.pinned:
        return "Pinned"
    try:
        today = dt.date.fromtimestamp(time.time() if now is None else now)
        day = dt.date.fromtimestamp(conv.updated_at)
    except (OverflowError, OSError, ValueError):  # a time outside what the platform can show
        return "Older"
    age = (today - day).days
    if age <= 0:
        return "Today"
    if age == 1:
        return "Yesterday"
    if age <= 7:
        return "Previous 7 days"
    return "Older"


class ConversationListModel(QAbstractListModel):
    """Conversations, pinned first, then most recent first, optionally filtered by a search
    query; ``GroupRole`` names each row's date group and ``HeaderRole`` is that name on the
    first row of a group (else "").

    Reads from ``History`` on ``refresh``; ``upsert`` keeps it in step after writes. UI
    thread only.
    """

    IdRole = Qt.ItemDataRole.UserRole + 1
    ConversationRole = Qt.ItemDataRole.UserRole + 2
    GroupRole = Qt.ItemDataRole.UserRole + 3
    HeaderRole = Qt.ItemDataRole.UserRole + 4
    BusyRole = Qt.ItemDataRole.UserRole + 5  # the row's busy mark ("answering…"), or ""

    def __init__(self, history: History, parent=None, *, clock=time.time) -> None:
        super().__init__(parent)
        self._history = history
        self._rows: list[Conversation] = []
        self._groups: list[str] = []
        self._query = ""
        self._clock = clock
        self._busy: tuple[str | None, str] = (None, "")  # (chat, what it does)
        self._line: tuple[str, ...] = ()  # chats whose message waits its turn
        self.refresh()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = index.row()
        conv = self._rows[row]
        title = conv.title or "New chat"
        busy = self._busy[1] if conv.id == self._busy[0] else (
            "queued" if conv.id in self._line else "")
        if role == Qt.ItemDataRole.DisplayRole:
            return title + DAMAGED_SUFFIX if conv.damaged else title
        if role == Qt.ItemDataRole.EditRole:
            return title
        if role == Qt.ItemDataRole.ToolTipRole:
            tip = f"{title}\n\n{DAMAGED_TIP}" if conv.damaged else title
            return f"{tip}\n\n{BUSY_TIPS[busy]}" if busy else tip
        if role == Qt.ItemDataRole.AccessibleTextRole:
            pinned = "Pinned chat" if conv.pinned else "Chat"
            damaged = ", damaged" if conv.damaged else ""
            mark = f", {BUSY_MARKS[busy].rstrip('…')}" if busy else ""
            return f"{pinned}: {title} ({self._groups[row]}{damaged}{mark})"
        if role == self.BusyRole:
            return BUSY_MARKS[busy] if busy else ""
        if role == Qt.ItemDataRole.DecorationRole and (conv.pinned or conv.damaged):
            name = "info" if conv.damaged else "pinned"
            return icon(name, colors_for(QGuiApplication.palette()))
        if role == self.IdRole:
            return conv.id
        if role == self.ConversationRole:
            return conv
        if role == self.GroupRole:
            return self._groups[row]
        if role == self.HeaderRole:
            first = row == 0 or self._groups[row - 1] != self._groups[row]
            return self._groups[row] if first else ""
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    @property
    def query(self) -> str:
        return self._query

    def set_query(self, query: str) -> None:
        self._query = query
        self.refresh()

    def refresh(self) -> None:
        self.beginResetModel()
        self._rows = self._history.list_conversations(self._query)
        now = self._clock()
        self._groups = [date_group(conv, now) for conv in self._rows]
        self.endResetModel()

    @property
    def busy(self) -> str | None:
        """The chat marked busy (None: none)."""
        return self._busy[0]

    def set_busy(self, conversation_id: str | None, what: str = "") -> None:
        """Mark ``conversation_id``'s row with what its message does (a ``BUSY_MARKS``
        key), the mark leaving the row it was on; None: no row is marked."""
        before = self._busy[0]
        self._busy = (conversation_id, what) if conversation_id is not None else (None, "")
        for cid in {before, conversation_id} - {None}:
            row = self.row_of(cid)  # type: ignore[arg-type]
            if row >= 0:
                index = self.index(row, 0)
                self.dataChanged.emit(index, index)

    @property
    def line(self) -> tuple[str, ...]:
        """The chats marked as waiting their turn, in order."""
        return self._line

    def set_line(self, line: tuple[str, ...]) -> None:
        """Mark the rows of the chats whose message waits its turn ("queued…")."""
        before, self._line = self._line, tuple(line)
        for cid in set(before) ^ set(self._line):
            row = self.row_of(cid)
            if row >= 0:
                index = self.index(row, 0)
                self.dataChanged.emit(index, index)

    def row_of(self, conversation_id: str) -> int:
        for i, conv in enumerate(self._rows):
            if conv.id == conversation_id:
                return i
        return -1

    def conversation(self, row: int) -> Conversation:
        return self._rows[row]

    def upsert(self, conversation_id: str) -> None:
        """Re-read the list after a write to ``conversation_id`` (it moves to its group's
        top; pinned chats stay above)."""
        self.refresh()

    def remove(self, conversation_id: str) -> None:
        row = self.row_of(conversation_id)
        if row >= 0:
            self.refresh()  # the next row may now head its group


class GroupDelegate(QStyledItemDelegate):
    """Paints a row's group name above it when it is the first of its group."""

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        size = super().sizeHint(option, index)
        size.setHeight(max(size.height(), 30, option.fontMetrics.height() + 12))
        if index.data(ConversationListModel.HeaderRole):
            size.setHeight(size.height() + header_height(option))
        return size

    def paint(self, painter, option: QStyleOptionViewItem, index: Index) -> None:
        header = index.data(ConversationListModel.HeaderRole)
        if not header:
            self._paint_row(painter, option, index)
            return
        colors = colors_for(option.palette)
        painter.save()
        font = QFont(option.font)
        font.setPointSizeF(max(7.0, font.pointSizeF() * 0.85))
        font.setBold(True)
        painter.setFont(font)
        painter.setPen(QColor(colors.muted))
        top = QRect(option.rect.left() + 8, option.rect.top() + 4, option.rect.width() - 16,
                    header_height(option) - 4)
        painter.drawText(top, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, header)
        painter.restore()
        item = QStyleOptionViewItem(option)
        item.rect = option.rect.adjusted(0, header_height(option), 0, 0)
        self._paint_row(painter, item, index)

    def _paint_row(self, painter, option: QStyleOptionViewItem, index: Index) -> None:
        """The chat's row; a busy chat's mark at its right, the title eliding before it."""
        mark = index.data(ConversationListModel.BusyRole)
        if not mark:
            super().paint(painter, option, index)
            return
        option = QStyleOptionViewItem(option)
        view = option.widget
        if isinstance(view, QListView):  # never past the list's edge (a long title's row)
            option.rect = option.rect.intersected(view.viewport().rect())
        metrics = option.fontMetrics
        dot = max(6, metrics.height() // 3)
        width = metrics.horizontalAdvance(mark) + dot + 16
        if width > option.rect.width() * MARK_SHARE:  # large text, a narrow list: the dot
            mark, width = "", dot + 14  # (its tooltip and accessible name still say it)
        # the row's background (hover, selection) across its whole width first
        panel = QStyleOptionViewItem(option)
        self.initStyleOption(panel, index)
        panel.text = ""
        panel.icon = QIcon()
        style = option.widget.style() if option.widget is not None else None
        if style is not None:
            style.drawPrimitive(QStyle.PrimitiveElement.PE_PanelItemViewItem, panel, painter,
                                option.widget)
        item = QStyleOptionViewItem(option)
        item.rect = option.rect.adjusted(0, 0, -width, 0)
        super().paint(painter, item, index)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        color = option.palette.color(QPalette.ColorRole.HighlightedText) if selected \
            else QColor(colors_for(option.palette).link)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(color)
        rect = option.rect
        x = rect.right() - width + 6
        painter.drawEllipse(x, rect.center().y() - dot // 2, dot, dot)
        if mark:
            painter.setPen(color)
            text = QRect(x + dot + 4, rect.top(), width - dot - 10, rect.height())
            painter.drawText(text, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                             mark)
        painter.restore()


class ChatListView(QListView):
    """A right-click opens the menu without moving the selection off the chat on screen."""

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.RightButton:
            event.accept()
            return
        super().mousePressEvent(event)


class SearchEdit(QLineEdit):
    """The search box: Esc clears what is typed (and only then lets Esc go further)."""

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape and self.text():
            self.clear()
            return
        super().keyPressEvent(event)


class ConversationList(QWidget):
    """Side bar: new chat, search, the grouped list; rename / pin / delete from the context
    menu. The selection always shows the open chat: moving it (arrow keys) opens that chat.

    Signals:
        selected(str conversation_id): the user picked a conversation.
        new_requested(): the user asked for a new chat.
        rename_requested(str conversation_id, str title)
        pin_requested(str conversation_id, bool pinned)
        delete_requested(str conversation_id): confirmed by the user already.
        stop_requested(str conversation_id): stop the reply in that chat (its menu's
            "Stop the reply", offered on the busy chat's row).
    """

    selected = Signal(str)
    new_requested = Signal()
    rename_requested = Signal(str, str)
    pin_requested = Signal(str, bool)
    delete_requested = Signal(str)
    stop_requested = Signal(str)

    def __init__(self, model: ConversationListModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self._current_id: str | None = None
        self._selecting = False
        colors = colors_for(self.palette())
        self.new_button = QPushButton(icon("new", colors), "New chat", self)
        self.new_button.setAccessibleName("New chat")
        self.new_button.setAccessibleDescription("Start a new conversation (Ctrl+N).")
        self.search = SearchEdit(self)
        self.search.setPlaceholderText("Search chats…")
        self.search.setClearButtonEnabled(True)
        self.search.setAccessibleName("Search chats")
        self.search.setAccessibleDescription("Filter chats by title and message text (Ctrl+F).")
        self.view = ChatListView(self)
        self.view.setModel(model)
        self.view.setItemDelegate(GroupDelegate(self.view))
        self.view.setObjectName("conversationList")
        self.view.setAccessibleName("Chats")
        self.view.setAccessibleDescription(
            "Your conversations: pinned first, then by date, most recent first."
        )
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.setUniformItemSizes(False)
        # long titles end in "…" (the full title is the tooltip) instead of a sideways scroll
        self.view.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setWordWrap(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        self.no_matches = QLabel(self)
        self.no_matches.setObjectName("noMatches")
        self.no_matches.setWordWrap(True)
        self.no_matches.setEnabled(False)  # the palette's secondary text colour
        self.no_matches.setAccessibleName("Search result")
        self.no_matches.hide()
        layout.addWidget(self.no_matches)
        layout.addWidget(self.view, 1)
        self.setAccessibleName("Conversation list")
        self.new_button.clicked.connect(self.new_requested)
        self.search.textChanged.connect(self.model.set_query)
        self.view.clicked.connect(self.on_clicked)
        self.view.activated.connect(self.on_clicked)
        self.view.customContextMenuRequested.connect(self.on_context_menu)
        self.view.selectionModel().currentChanged.connect(self.on_current_changed)
        self.model.modelReset.connect(self.on_model_reset)
        for signal in (self.model.modelReset, self.model.rowsInserted, self.model.rowsRemoved):
            signal.connect(self._update_no_matches)

    def select(self, conversation_id: str | None) -> None:
        """Highlight a conversation without emitting ``selected``."""
        self._current_id = conversation_id
        row = self.model.row_of(conversation_id) if conversation_id else -1
        sel = self.view.selectionModel()
        self._selecting = True
        try:
            if row < 0:
                sel.clearSelection()
                sel.setCurrentIndex(QModelIndex(), sel.SelectionFlag.Clear)
                return
            index = self.model.index(row, 0)
            self.view.setCurrentIndex(index)
            self.view.scrollTo(index)
        finally:
            self._selecting = False

    def on_model_reset(self) -> None:
        self.select(self._current_id)

    def _update_no_matches(self, *_: object) -> None:
        query = self.search.text().strip()
        empty = bool(query) and self.model.rowCount() == 0
        if empty:
            self.no_matches.setText(f"No chats match “{query}”. Esc clears the search.")
        self.no_matches.setVisible(empty)

    def on_clicked(self, index: QModelIndex) -> None:
        if index.isValid():
            self.selected.emit(index.data(ConversationListModel.IdRole))

    def on_current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        """The arrow keys moved the selection: open that chat, so list and screen agree."""
        if self._selecting or not current.isValid():
            return
        conv_id = current.data(ConversationListModel.IdRole)
        if conv_id != self._current_id:
            self.selected.emit(conv_id)

    def on_context_menu(self, pos: QPoint) -> None:
        index = self.view.indexAt(pos)
        if not index.isValid():
            return
        conv: Conversation = index.data(ConversationListModel.ConversationRole)
        chosen = self.run_menu(self.context_menu(conv), self.view.viewport().mapToGlobal(pos))
        if chosen == "rename":
            self.rename(conv.id)
        elif chosen == "pin":
            self.pin_requested.emit(conv.id, not conv.pinned)
        elif chosen == "delete":
            self.delete(conv.id)
        elif chosen == "stop":
            self.stop_requested.emit(conv.id)
        self.select(self._current_id)  # the selection stays on the chat on screen

    def context_menu(self, conv: Conversation) -> QMenu:
        colors = colors_for(self.palette())
        menu = QMenu(self)
        if conv.id == self.model.busy:
            stop = menu.addAction(icon("stop", colors), "Stop the reply")
            stop.setData("stop")
            menu.addSeparator()
        elif conv.id in self.model.line:
            stop = menu.addAction(icon("stop", colors), "Don't send the waiting message")
            stop.setData("stop")
            menu.addSeparator()
        menu.addAction("Rename…").setData("rename")
        pin = menu.addAction(icon("unpin" if conv.pinned else "pin", colors),
                             "Unpin" if conv.pinned else "Pin to top")
        pin.setData("pin")
        menu.addSeparator()
        menu.addAction(icon("delete", colors), "Delete…").setData("delete")
        return menu

    def run_menu(self, menu: QMenu, where: QPoint) -> str | None:
        """Show the menu; the chosen action's data (a separate method so tests can answer)."""
        chosen = menu.exec(where)
        return chosen.data() if chosen is not None else None

    def rename(self, conversation_id: str) -> None:
        row = self.model.row_of(conversation_id)
        if row < 0:
            return
        current = self.model.conversation(row).title
        title, ok = self.ask_text("Rename chat", "New name:", current)
        if ok and title.strip():
            self.rename_requested.emit(conversation_id, title.strip())

    def delete(self, conversation_id: str) -> None:
        row = self.model.row_of(conversation_id)
        if row < 0:
            return
        title = self.model.conversation(row).title or "New chat"
        if self.confirm(
            "Delete chat", f"Delete “{title}” and all its messages? This cannot be undone."
        ):
            self.delete_requested.emit(conversation_id)

    # dialogs (separate methods so tests can answer them) ----------------------------------

    def ask_text(self, title: str, label: str, text: str) -> tuple[str, bool]:
        return QInputDialog.getText(self, title, label, QLineEdit.EchoMode.Normal, text)

    def confirm(self, title: str, text: str) -> bool:
        """Yes / No, No the default: Enter or a stray Space keeps the chat."""
        buttons = QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No
        box = self.confirm_box(title, text)
        box.setStandardButtons(buttons)
        box.setDefaultButton(QMessageBox.StandardButton.No)
        return box.exec() == QMessageBox.StandardButton.Yes

    def confirm_box(self, title: str, text: str) -> QMessageBox:
        box = QMessageBox(QMessageBox.Icon.Question, title, text, parent=self)
        self.last_confirm = box
        return box
