"""The conversation list: a Qt model over the history database and its side-bar widget."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    Qt,
    Signal,
)
from PySide6.QtWidgets import (
    QInputDialog,
    QLineEdit,
    QListView,
    QMenu,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.storage.history import Conversation, History

Index = QModelIndex | QPersistentModelIndex


class ConversationListModel(QAbstractListModel):
    """Conversations, most recent first, optionally filtered by a search query.

    Reads from ``History`` on ``refresh``; ``touch``/``upsert`` keep it in step after writes
    without a reload. UI thread only.
    """

    IdRole = Qt.ItemDataRole.UserRole + 1
    ConversationRole = Qt.ItemDataRole.UserRole + 2

    def __init__(self, history: History, parent=None) -> None:
        super().__init__(parent)
        self._history = history
        self._rows: list[Conversation] = []
        self._query = ""
        self.refresh()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        conv = self._rows[index.row()]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            return conv.title or "New chat"
        if role == Qt.ItemDataRole.ToolTipRole:
            return conv.title or "New chat"
        if role == Qt.ItemDataRole.AccessibleTextRole:
            return f"Chat: {conv.title or 'New chat'}"
        if role == self.IdRole:
            return conv.id
        if role == self.ConversationRole:
            return conv
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
        self.endResetModel()

    def row_of(self, conversation_id: str) -> int:
        for i, conv in enumerate(self._rows):
            if conv.id == conversation_id:
                return i
        return -1

    def conversation(self, row: int) -> Conversation:
        return self._rows[row]

    def upsert(self, conversation_id: str) -> None:
        """Re-read one conversation and move it to the top (it was just used)."""
        conv = self._history.get_conversation(conversation_id)
        row = self.row_of(conversation_id)
        if conv is None:
            if row >= 0:
                self.beginRemoveRows(QModelIndex(), row, row)
                del self._rows[row]
                self.endRemoveRows()
            return
        if row < 0:
            if self._query and conv not in self._history.list_conversations(self._query):
                return
            self.beginInsertRows(QModelIndex(), 0, 0)
            self._rows.insert(0, conv)
            self.endInsertRows()
            return
        if row > 0:
            self.beginMoveRows(QModelIndex(), row, row, QModelIndex(), 0)
            self._rows.insert(0, self._rows.pop(row))
            self.endMoveRows()
        self._rows[0] = conv
        index = self.index(0, 0)
        self.dataChanged.emit(index, index, [])

    def remove(self, conversation_id: str) -> None:
        row = self.row_of(conversation_id)
        if row >= 0:
            self.beginRemoveRows(QModelIndex(), row, row)
            del self._rows[row]
            self.endRemoveRows()


class ConversationList(QWidget):
    """Side bar: new chat, search, the list, rename/delete from the context menu.

    Signals:
        selected(str conversation_id): the user picked a conversation.
        new_requested(): the user asked for a new chat.
        rename_requested(str conversation_id, str title)
        delete_requested(str conversation_id): confirmed by the user already.
    """

    selected = Signal(str)
    new_requested = Signal()
    rename_requested = Signal(str, str)
    delete_requested = Signal(str)

    def __init__(self, model: ConversationListModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.new_button = QPushButton("New chat", self)
        self.new_button.setAccessibleName("New chat")
        self.new_button.setAccessibleDescription("Start a new conversation (Ctrl+N).")
        self.search = QLineEdit(self)
        self.search.setPlaceholderText("Search chats…")
        self.search.setClearButtonEnabled(True)
        self.search.setAccessibleName("Search chats")
        self.search.setAccessibleDescription("Filter chats by title and message text (Ctrl+F).")
        self.view = QListView(self)
        self.view.setModel(model)
        self.view.setObjectName("conversationList")
        self.view.setAccessibleName("Chats")
        self.view.setAccessibleDescription("Your conversations, most recent first.")
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.setUniformItemSizes(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        layout.addWidget(self.view, 1)
        self.setAccessibleName("Conversation list")
        self.new_button.clicked.connect(self.new_requested)
        self.search.textChanged.connect(self.model.set_query)
        self.view.clicked.connect(self.on_clicked)
        self.view.activated.connect(self.on_clicked)
        self.view.customContextMenuRequested.connect(self.on_context_menu)

    def select(self, conversation_id: str | None) -> None:
        """Highlight a conversation without emitting ``selected``."""
        row = self.model.row_of(conversation_id) if conversation_id else -1
        sel = self.view.selectionModel()
        if row < 0:
            sel.clearSelection()
            return
        index = self.model.index(row, 0)
        self.view.setCurrentIndex(index)
        self.view.scrollTo(index)

    def on_clicked(self, index: QModelIndex) -> None:
        if index.isValid():
            self.selected.emit(index.data(ConversationListModel.IdRole))

    def on_context_menu(self, pos: QPoint) -> None:
        index = self.view.indexAt(pos)
        if not index.isValid():
            return
        menu = QMenu(self)
        rename = menu.addAction("Rename…")
        delete = menu.addAction("Delete…")
        chosen = menu.exec(self.view.viewport().mapToGlobal(pos))
        conv_id = index.data(ConversationListModel.IdRole)
        if chosen is rename:
            self.rename(conv_id)
        elif chosen is delete:
            self.delete(conv_id)

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
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes
