"""The messages of the open conversation as a Qt list model (UI thread only)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt

from app.storage.history import StoredMessage

Index = QModelIndex | QPersistentModelIndex

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System"}


class ChatModel(QAbstractListModel):
    """Rows are ``StoredMessage`` values. Change it only on the UI thread.

    Signals: the standard QAbstractItemModel ones; streaming text arrives as ``dataChanged``
    on the last row with the ``ContentRole``, streaming thinking with the ``ReasoningRole``.
    """

    MessageRole = Qt.ItemDataRole.UserRole + 1
    RoleRole = Qt.ItemDataRole.UserRole + 2
    ContentRole = Qt.ItemDataRole.UserRole + 3
    StatusRole = Qt.ItemDataRole.UserRole + 4
    ProvenanceRole = Qt.ItemDataRole.UserRole + 5
    IdRole = Qt.ItemDataRole.UserRole + 6
    ReasoningRole = Qt.ItemDataRole.UserRole + 7

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._rows: list[StoredMessage] = []

    # Qt API -------------------------------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        msg = self._rows[index.row()]
        if role in (Qt.ItemDataRole.DisplayRole, self.ContentRole):
            return msg.content
        if role == Qt.ItemDataRole.AccessibleTextRole:
            return f"{ROLE_NAMES.get(msg.role, msg.role)}: {msg.content}"
        if role == self.MessageRole:
            return msg
        if role == self.RoleRole:
            return msg.role
        if role == self.StatusRole:
            return msg.status
        if role == self.ProvenanceRole:
            return msg.provenance
        if role == self.IdRole:
            return msg.id
        if role == self.ReasoningRole:
            return msg.reasoning
        return None

    def roleNames(self) -> dict[int, bytes]:
        names = super().roleNames()
        names.update(
            {
                self.MessageRole: b"message",
                self.RoleRole: b"role",
                self.ContentRole: b"content",
                self.StatusRole: b"status",
                self.ProvenanceRole: b"provenance",
                self.IdRole: b"messageId",
                self.ReasoningRole: b"reasoning",
            }
        )
        return names

    # editing ------------------------------------------------------------------------------

    def messages(self) -> list[StoredMessage]:
        return list(self._rows)

    def message(self, row: int) -> StoredMessage:
        return self._rows[row]

    def row_of(self, message_id: int) -> int:
        for i, msg in enumerate(self._rows):
            if msg.id == message_id:
                return i
        return -1

    def set_messages(self, messages: list[StoredMessage]) -> None:
        self.beginResetModel()
        self._rows = list(messages)
        self.endResetModel()

    def append(self, message: StoredMessage) -> int:
        row = len(self._rows)
        self.beginInsertRows(QModelIndex(), row, row)
        self._rows.append(message)
        self.endInsertRows()
        return row

    def append_text(self, row: int, delta: str) -> None:
        msg = self._rows[row]
        self._rows[row] = replace(msg, content=msg.content + delta)
        self._changed(row, [self.ContentRole, Qt.ItemDataRole.DisplayRole])

    def append_reasoning(self, row: int, delta: str) -> None:
        msg = self._rows[row]
        self._rows[row] = replace(msg, reasoning=msg.reasoning + delta)
        self._changed(row, [self.ReasoningRole])

    def update_message(self, row: int, **changes: Any) -> None:
        self._rows[row] = replace(self._rows[row], **changes)
        self._changed(row, [])

    def truncate(self, row: int) -> None:
        """Remove ``row`` and every row after it."""
        if row >= len(self._rows):
            return
        self.beginRemoveRows(QModelIndex(), row, len(self._rows) - 1)
        del self._rows[row:]
        self.endRemoveRows()

    def remove_rows(self, first: int, last: int) -> None:
        self.beginRemoveRows(QModelIndex(), first, last)
        del self._rows[first : last + 1]
        self.endRemoveRows()

    def _changed(self, row: int, roles: list[int]) -> None:
        index = self.index(row, 0)
        self.dataChanged.emit(index, index, roles)
