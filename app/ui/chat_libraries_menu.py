"""The composer's "Libraries" button: which document libraries this chat searches."""

from __future__ import annotations

from PySide6.QtWidgets import QMenu, QToolButton, QWidget

from app.ui.documents_controller import DocumentsController


class ChatLibrariesButton(QToolButton):
    def __init__(self, documents: DocumentsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.documents = documents
        self.setObjectName("chatLibrariesButton")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setStyleSheet("QToolButton::menu-indicator { image: none; width: 0px; }")
        self.setAccessibleDescription("Choose the document libraries this chat searches.")
        self.menu_ = QMenu(self)
        self.menu_.aboutToShow.connect(self.rebuild)
        self.setMenu(self.menu_)
        documents.choice_changed.connect(self.update_label)
        self.update_label()

    def update_label(self, *_: object) -> None:
        on = sorted(self.documents.choice())
        self.setText((f"Libraries: {len(on)}" if on else "Libraries: off") + " ▾")
        self.setToolTip("Libraries this chat searches: " + (", ".join(on) or "none"))
        self.setAccessibleName(self.text())

    def rebuild(self) -> None:
        menu = self.menu_
        menu.clear()
        chosen = self.documents.choice()
        rows = self.documents.libraries()
        if not rows:
            none = menu.addAction("No libraries yet: make one in Settings ▸ Documents")
            none.setEnabled(False)
            return
        for row in rows:
            action = menu.addAction(f"{row['name']} ({row['files']:,} files)")
            action.setCheckable(True)
            action.setChecked(row["name"] in chosen)
            action.toggled.connect(
                lambda on, n=row["name"]: self.documents.set_library_on(n, on))
