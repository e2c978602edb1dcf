"""The model manager's details of the selected catalog model: what it is and, where the
catalog names a draft sibling (``CatalogEntry.draft``), which small model speeds it up, with
a button to download that one. The widget only shows rows; the panel turns its request into
a download on the model controller like any catalog model's."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.ui.model_manager_model import CatalogRow
from app.units import format_bytes, format_parameters

DRAFT_INSTALLED = "Draft installed: replies that quote the chat come out faster"


def draft_offer(row: CatalogRow, draft: CatalogRow) -> str:
    """The line for a model whose draft is not installed: which model speeds it up, how."""
    size = format_bytes(draft.variant.size_bytes) if draft.variant.size_bytes else "a small"
    return (
        f"{draft.entry.name} ({size} download) speeds it up: this smaller sibling shares its "
        f"tokenizer and guesses the next words; {row.entry.name} checks several guesses in "
        "one step."
    )


class CatalogDetails(QWidget):
    """Signals:
    download_draft_requested(str catalog_id): the user asked for the shown model's draft.
    reload_requested(str catalog_id): load the shown model again (its draft was installed
        after it was loaded, so the engine has none yet).
    """

    download_draft_requested = Signal(str)
    reload_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Model details")
        self.draft_id: str | None = None
        self.model_id: str | None = None
        self._reload = False  # the button loads the model again instead of downloading
        self.title = QLabel(self)
        self.title.setAccessibleName("Model")
        self.description = QLabel(self)
        self.description.setWordWrap(True)
        self.draft_label = QLabel(self)
        self.draft_label.setWordWrap(True)
        self.draft_label.setAccessibleName("Draft model")
        self.draft_button = QPushButton(self)
        self.draft_button.clicked.connect(self.on_draft_clicked)
        draft_row = QHBoxLayout()
        draft_row.setContentsMargins(0, 0, 0, 0)
        draft_row.addWidget(self.draft_label, 1)
        draft_row.addWidget(self.draft_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 4)
        layout.addWidget(self.title)
        layout.addWidget(self.description)
        layout.addLayout(draft_row)
        self.show_row(None, None)

    def show_row(self, row: CatalogRow | None, draft: CatalogRow | None, *,
                 draft_downloading: bool = False, reload_for_draft: bool = False) -> None:
        """Show ``row`` (None: nothing selected) and its draft's row (None: it has none).
        ``reload_for_draft``: the model is loaded without its (since installed) draft."""
        self.title.setVisible(row is not None)
        self.description.setVisible(row is not None)
        if row is not None:
            parameters = format_parameters(row.entry.parameters)
            self.title.setText(f"<b>{row.entry.name}</b> · {parameters} · {row.entry.license}")
            self.description.setText(row.entry.description)
        self.draft_id = draft.entry.id if draft is not None else None
        self.model_id = row.entry.id if row is not None else None
        self._reload = False
        if row is None or draft is None:
            self.draft_label.hide()
            self.draft_button.hide()
            return
        self.draft_label.show()
        if draft.installed:
            again = " Load the model again to use it." if reload_for_draft else ""
            self.draft_label.setText(f"{DRAFT_INSTALLED} ({draft.entry.name} drafts for "
                                     f"{row.entry.name}).{again}")
            self._reload = reload_for_draft
            self.draft_button.setText("Load again")
            self.draft_button.setAccessibleName(f"Load {row.entry.name} again with its draft")
            self.draft_button.setEnabled(True)
            self.draft_button.setVisible(reload_for_draft)
            return
        self.draft_label.setText(draft_offer(row, draft))
        self.draft_button.setText("Downloading…" if draft_downloading
                                  else f"Download {draft.entry.name}")
        self.draft_button.setAccessibleName(f"Download the draft model {draft.entry.name}")
        self.draft_button.setEnabled(not draft_downloading)
        self.draft_button.show()

    def on_draft_clicked(self) -> None:
        if self._reload and self.model_id is not None:
            self.reload_requested.emit(self.model_id)
        elif self.draft_id is not None:
            self.download_draft_requested.emit(self.draft_id)
