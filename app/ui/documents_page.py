"""Settings ▸ Documents: the libraries (named collections of files and folders), each with
its files, chunks and embedder; make one from files or a folder, add more, re-index, remove.
The Embedder box names the selected library's embedder, or the one a new library gets;
choosing another for an existing library asks first, then indexes it again with that one
(downloading it when needed). Indexing runs as a job: its row shows files done / total, and
Cancel stops it; removing runs as one too (its row says "Removing…" and is disabled until it
is gone). The first time, the library opens in the background ("Opening the document
library…"); the list fills when it is open."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.documents.attach import is_chat_collection
from app.jobs import Progress
from app.ui.attachment_tray import DOCUMENT_FILTER
from app.ui.documents_controller import (
    INDEXING_TEXT,
    OPENING_TEXT,
    REMOVING_TEXT,
    DocumentsController,
)

ROLE_NAME = Qt.ItemDataRole.UserRole + 1


class DocumentsPage(QWidget):
    def __init__(self, documents: DocumentsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.documents = documents
        self.tree = QTreeWidget(self)
        self.tree.setObjectName("libraries")
        self.tree.setHeaderLabels(["Library", "Files", "Passages", "Embedder"])
        self.tree.setAccessibleName("Document libraries")
        self.tree.setColumnWidth(0, 380)
        self.name_edit = QLineEdit(self)
        self.name_edit.setPlaceholderText("library name, e.g. Manuals")
        self.name_edit.setAccessibleName("Library name")
        self.embedder_box = QComboBox(self)
        self.embedder_box.setObjectName("embedder")
        self.embedder_box.setAccessibleName("Library embedder")
        self.embedder_box.setToolTip("The model that turns this library's passages into "
                                     "vectors; its queries use the same one.")
        self.add_files_button = QPushButton("Add files…", self)
        self.add_folder_button = QPushButton("Add folder…", self)
        self.refresh_button = QPushButton("Re-index", self)
        self.remove_button = QPushButton("Remove", self)
        self.job_label = QLabel(self)
        self.job_label.setWordWrap(True)  # a long file name or problem never widens it
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
        buttons.addWidget(QLabel("Embedder:", self))
        buttons.addWidget(self.embedder_box, 1)
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
        self.embedder_box.activated.connect(self.on_embedder_chosen)
        documents.libraries_changed.connect(self.refresh)
        documents.index_progress.connect(self.on_progress)
        documents.index_finished.connect(self.job_label.setText)
        self._names: dict[str, str] = {}
        self._new_embedder: str | None = None  # picked for a library not made yet
        documents.activity.connect(self.on_activity)
        self.on_progress(None)
        self.on_activity()
        self.fill_embedders()
        if documents.is_open:
            self.refresh()

    def showEvent(self, event) -> None:
        """The tab shown: its libraries (the first time, this opens the library; the
        Settings window opened for another tab does not)."""
        super().showEvent(event)
        self.refresh()

    def fill_embedders(self) -> None:
        self.embedder_box.clear()
        for choice in self.documents.embedders():
            label = choice.name
            if not choice.installed and choice.entry is not None:
                label += f" (downloads {choice.entry.variant.size_bytes / 1e6:,.0f} MB)"
            self.embedder_box.addItem(label, choice.id)
            if choice.entry is not None:
                entry = choice.entry
                terms = f" ({entry.license_url})" if entry.license_url else ""
                self.embedder_box.setItemData(
                    self.embedder_box.count() - 1,
                    f"{entry.description}\nFrom {entry.repo}; licence {entry.license}{terms}.",
                    Qt.ItemDataRole.ToolTipRole)
            self._names[choice.id] = choice.name
        self.embedder_box.setEnabled(self.embedder_box.count() > 0)

    def chosen_embedder(self) -> str | None:
        return self.embedder_box.currentData()

    def show_embedder(self, embedder_id: str | None) -> None:
        at = self.embedder_box.findData(embedder_id) if embedder_id else -1
        if at >= 0:
            self.embedder_box.setCurrentIndex(at)

    def refresh(self) -> None:
        current = self.selected()
        self.tree.clear()
        for row in self.documents.libraries():
            embedder = row.get("embedder") or ""
            removing = row["name"] == self.documents.removing
            item = QTreeWidgetItem([f"{row['name']} · {REMOVING_TEXT}" if removing
                                    else row["name"], f"{row['files']:,}",
                                    f"{row['chunks']:,}", self._names.get(embedder, embedder)])
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
        self._show_indexing()
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
            self.show_embedder(self.documents.embedder_of(name))
        self._update_buttons()

    def _update_buttons(self) -> None:
        name = self.selected()
        usable = name is not None and name != self.documents.removing
        self.refresh_button.setEnabled(usable)
        self.remove_button.setEnabled(usable and self.documents.removing is None)

    def on_add(self, paths: list[Path]) -> None:
        if paths:
            name = self.name_edit.text().strip()
            new = self.documents.embedder_of(name) is None
            self.documents.index(name, paths, self._new_embedder if new else None)

    def on_embedder_chosen(self, _index: int) -> None:
        """Another embedder for the library named above: ask, then index it again with it;
        for a name that is no library yet, the embedder it will be made with."""
        name, chosen = self.name_edit.text().strip(), self.chosen_embedder()
        current = self.documents.embedder_of(name) if name else None
        if current is None:
            self._new_embedder = chosen
            return
        if chosen is None or chosen == current:
            return
        if self.confirm_reindex(name, self._names.get(chosen, chosen)):
            self.documents.set_embedder(name, chosen)
        else:
            self.show_embedder(current)

    def confirm_reindex(self, name: str, embedder: str) -> bool:  # tests replace this
        answer = QMessageBox.question(
            self, "Change the embedder",
            f"Index “{name}” again with {embedder}? Its passages are embedded again (the "
            "embedder is downloaded first if needed); until that is done, searches of this "
            "library find words only.")
        return answer == QMessageBox.StandardButton.Yes

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
        self._show_indexing()
        self.job_label.setText(progress.message)
        if progress.fraction is None:
            self.job_bar.setRange(0, 0)
        else:
            self.job_bar.setRange(0, 100)
            self.job_bar.setValue(progress.percent)

    def _show_indexing(self) -> None:
        """The library being indexed says so in the list; a new one is listed at once (its
        counts once it is done), not only when its job ends."""
        name = self.documents.indexing
        if name is None or is_chat_collection(name) or not self.documents.is_open:
            return  # (a chat's own files are not listed)
        item = self.library_item(name)
        if item is None:
            item = QTreeWidgetItem([name, "…", "…", ""])
            item.setData(0, ROLE_NAME, name)
            self.tree.addTopLevelItem(item)
        item.setText(0, f"{name} · {INDEXING_TEXT}")

    def ask_files(self) -> list[Path]:  # tests replace these
        names, _ = QFileDialog.getOpenFileNames(self, "Add files to the library", "",
                                                DOCUMENT_FILTER)
        return [Path(n) for n in names]

    def ask_folder(self) -> list[Path]:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder to the library")
        return [Path(folder)] if folder else []
