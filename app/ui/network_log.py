"""The network activity dialog: every connection Hearth attempted, live, with a Copy button.

Hook it into a menu with::

    from app.ui.network_log import NetworkLogDialog
    action.triggered.connect(lambda: NetworkLogDialog.show_for(window))

It reads ``app.network.network_log()`` (the process's log) unless given another one.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    QTimer,
)
from PySide6.QtGui import QBrush, QColor, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.network import ConnectionAttempt, ModeSwitch, NetworkLog, is_offline, network_log

COLUMNS = ("Time", "Feature", "Host:port", "Result", "Detail")
REFRESH_MS = 500
_Index = QModelIndex | QPersistentModelIndex


class NetworkLogModel(QAbstractTableModel):
    """A snapshot of a :class:`NetworkLog`, newest last; :meth:`refresh` re-reads it when it
    changed (cheap when it did not)."""

    def __init__(self, log: NetworkLog, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.log = log
        self._rows: list[tuple[str, ...]] = []
        self._allowed: list[bool] = []
        self._seen = -1
        self.refresh()

    def refresh(self) -> bool:
        """Re-read the log if it changed; return whether it did."""
        total = self.log.total
        entries: list[ConnectionAttempt | ModeSwitch] = self.log.timeline()
        if total == self._seen and len(entries) == len(self._rows):
            return False
        self.beginResetModel()
        self._seen = total
        self._rows = [e.as_row() for e in entries]
        self._allowed = [not isinstance(e, ConnectionAttempt) or e.allowed for e in entries]
        self.endResetModel()
        return True

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008 (Qt's signature)
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            return self._rows[index.row()][index.column()]
        if role == Qt.ItemDataRole.ForegroundRole and index.column() == 3:
            return None if self._allowed[index.row()] else QBrush(QColor("#b3261e"))
        return None

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(COLUMNS):
            return COLUMNS[section]
        return None


class NetworkLogDialog(QDialog):
    """Shows the network activity log, refreshed live. No signals of its own."""

    def __init__(self, log: NetworkLog | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Network activity")
        self.resize(760, 420)
        self.log = log if log is not None else network_log()
        self.model = NetworkLogModel(self.log, self)
        self.summary = QLabel(self)
        self.summary.setWordWrap(True)
        self.table = QTableView(self)
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.copy_button = QPushButton("Copy", self)
        self.copy_button.setToolTip("Copy the whole log as tab-separated text")
        self.copy_button.clicked.connect(self.on_copy_clicked)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.on_timer)
        self.timer.start()
        self._update_summary()
        self._fit_columns()

    @classmethod
    def show_for(cls, parent: QWidget | None = None) -> NetworkLogDialog:
        """Open a non-modal dialog over ``parent`` (deleted when closed)."""
        dialog = cls(parent=parent)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def on_timer(self) -> None:
        if self.model.refresh():
            self._fit_columns()
            self.table.scrollToBottom()
        self._update_summary()

    def _fit_columns(self) -> None:
        """Widen each column (the last stretches) to what it holds, never narrow one: rows
        that arrive after the dialog opened are read whole, not as "20…" and "bloc…"."""
        for column in range(len(COLUMNS) - 1):
            wanted = max(self.table.sizeHintForColumn(column),
                         self.table.horizontalHeader().sectionSizeHint(column))
            if wanted > self.table.columnWidth(column):
                self.table.setColumnWidth(column, wanted)

    def on_copy_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self.log.as_text())

    def _update_summary(self) -> None:
        entries = self.log.entries()  # attempts only (not the offline-mode switches)
        blocked = sum(not e.allowed for e in entries)
        if is_offline():
            mode = "Offline mode is on: connections off this computer are blocked."
        else:
            mode = "Offline mode is off: connections are allowed and recorded."
        shown = f"{len(entries)} attempt{'' if len(entries) == 1 else 's'} shown"
        self.summary.setText(
            f"{mode} {shown}, {blocked} blocked (the last {self.log.capacity} are kept)."
        )
