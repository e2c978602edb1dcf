"""Settings ▸ Documents: the libraries (named collections of files and folders), each with
its files and chunks; make one from files or a folder, add more, re-index, remove. Indexing
runs as a job: its row shows files done / total, and Cancel stops it; removing runs as one
too (its row says "Removing…" and is disabled until it is gone). The first time, the
library opens in the background ("Opening the document library…"); the list fills when
it is open."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.jobs import Progress
from app.ui.attachment_tray import DOCUMENT_FILTER
from app.ui.documents_controller import OPENING_TEXT, REMOVING_TEXT, DocumentsController

ROLE_NAME = Qt.ItemDataRole.UserRole + 1


class DocumentsPage(QWidget):
    def __init__(self, documents: DocumentsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.documents = documents
        self.tree = QTreeWidget(self)
        self.tree.setObjectName("libraries")
        self.tree.setHeaderLabels(["Library", "Files", "Passages"])
        self.tree.setAccessibleName("Document libraries")
        self.tree.setColumnWidth(0, 380)
        self.name_edit = QLineEdit(self)
        self.name_edit.setPlaceholderText("library name, e.g. Manuals")
        self.name_edit.setAccessibleName("Library name")
        self.add_files_button = QPushButton("Add files…", self)
        self.add_folder_button = QPushButton("Add folder…", self)
        self.refresh_button = QPushButton("Re-index", self)
        self.remove_button = QPushButton("Remove", self)
        self.job_label = QLabel(self)
        self.job_bar = QProgressBar(self)
        self.job_bar.setAccessibleName("Indexing progress")
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setAccessibleName("Cancel indexing")
        self.note = QLabel("A chat searches the libraries switched on in the composer's "
                           "Libraries menu or in its chat settings; the passages it used are "
                           "listed under the reply.", self)
        self.note.setWordWrap(True)
        self.note.setEnabled(False)

        add_row = QHBoxLayout()
        add_row.addWidget(self.name_edit, 1)
        add_row.addWidget(self.add_files_button)
        add_row.addWidget(self.add_folder_button)
        buttons = QHBoxLayout()
        buttons.addWidget(self.refresh_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        job_row = QHBoxLayout()
        job_row.addWidget(self.job_label, 1)
        job_row.addWidget(self.job_bar, 1)
        job_row.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tree, 1)
        layout.addLayout(add_row)
        layout.addLayout(buttons)
        layout.addLayout(job_row)
        layout.addWidget(self.note)

        self.add_files_button.clicked.connect(lambda: self.on_add(self.ask_files()))
        self.add_folder_button.clicked.connect(lambda: self.on_add(self.ask_folder()))
        self.refresh_button.clicked.connect(self.on_refresh)
        self.remove_button.clicked.connect(self.on_remove)
        self.cancel_button.clicked.connect(documents.cancel_indexing)
        self.tree.currentItemChanged.connect(self.on_current_changed)
        documents.libraries_changed.connect(self.refresh)
        documents.index_progress.connect(self.on_progress)
        documents.index_finished.connect(self.job_label.setText)
        documents.activity.connect(self.on_activity)
        self.on_progress(None)
        self.on_activity()
        if documents.is_open:
            self.refresh()

    def showEvent(self, event) -> None:
        """The tab shown: its libraries (the first time, this opens the library; the
        Settings window opened for another tab does not)."""
        super().showEvent(event)
        self.refresh()

    def refresh(self) -> None:
        current = self.selected()
        self.tree.clear()
        for row in self.documents.libraries():
            removing = row["name"] == self.documents.removing
            item = QTreeWidgetItem([f"{row['name']} · {REMOVING_TEXT}" if removing
                                    else row["name"], f"{row['files']:,}",
                                    f"{row['chunks']:,}"])
            item.setData(0, ROLE_NAME, row["name"])
            item.setDisabled(removing)  # removed on the documents thread
            for root in row["roots"]:
                child = QTreeWidgetItem([root])
                child.setToolTip(0, root)
                item.addChild(child)
            self.tree.addTopLevelItem(item)
            item.setExpanded(True)
            if row["name"] == current:
                self.tree.setCurrentItem(item)
        self._update_buttons()

    def library_item(self, name: str) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, ROLE_NAME) == name:
                return item
        return None

    def selected(self) -> str | None:
        item = self.tree.currentItem()
        while item is not None and item.parent() is not None:
            item = item.parent()
        return item.data(0, ROLE_NAME) if item is not None else None

    def on_current_changed(self, *_: object) -> None:
        name = self.selected()
        if name:
            self.name_edit.setText(name)
        self._update_buttons()

    def _update_buttons(self) -> None:
        name = self.selected()
        usable = name is not None and name != self.documents.removing
        self.refresh_button.setEnabled(usable)
        self.remove_button.setEnabled(usable and self.documents.removing is None)

    def on_add(self, paths: list[Path]) -> None:
        if paths:
            self.documents.index(self.name_edit.text(), paths)

    def on_refresh(self) -> None:
        name = self.selected()
        if name:
            self.documents.refresh(name)

    def on_remove(self) -> None:
        name = self.selected()
        if name:
            self.documents.remove(name)

    def on_activity(self, *_: object) -> None:
        """"Opening the document library…" while it opens (the buttons wait for it)."""
        opening = self.documents.opening
        if opening:
            self.job_label.setText(OPENING_TEXT)
        elif self.job_label.text() == OPENING_TEXT:
            self.job_label.setText("")
        self.job_bar.setVisible(opening or self.documents.indexing is not None)
        if opening:
            self.job_bar.setRange(0, 0)

    def on_progress(self, progress: Progress | None) -> None:
        running = progress is not None
        self.job_bar.setVisible(running)
        self.cancel_button.setVisible(running)
        if progress is None:
            return
        self.job_label.setText(progress.message)
        if progress.fraction is None:
            self.job_bar.setRange(0, 0)
        else:
            self.job_bar.setRange(0, 100)
            self.job_bar.setValue(progress.percent)

    def ask_files(self) -> list[Path]:  # tests replace these
        names, _ = QFileDialog.getOpenFileNames(self, "Add files to the library", "",
                                                DOCUMENT_FILTER)
        return [Path(n) for n in names]

    def ask_folder(self) -> list[Path]:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder to the library")
        return [Path(folder)] if folder else []
