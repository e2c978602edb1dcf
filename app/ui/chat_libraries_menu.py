"""Which document libraries this chat searches, in two places that show one fact: the
composer's "Libraries" button (a menu) and the chat settings' Libraries list. Both read
``DocumentsController.choice()`` and write ``set_library_on``; each redraws on
``choice_changed``, so a toggle in one shows in the other.

Neither opens the document library before the user asks for it (the menu opens it when it
is shown; the list shows the chat's chosen names and a "Show libraries" button until then):
opening it loads the embedder."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QLabel,
    QMenu,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.documents_controller import OPENING_TEXT, DocumentsController
from app.ui.focus_ring import RingToolButton

NO_LIBRARIES = "No libraries yet: make one in Settings ▸ Documents"


def library_label(row: dict) -> str:
    """"Manuals (12 files)"; "Notes (1 file)"."""
    files = int(row["files"])
    return f"{row['name']} ({files:,} file{'' if files == 1 else 's'})"


class ChatLibrariesButton(RingToolButton):
    def __init__(self, documents: DocumentsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.documents = documents
        self.setObjectName("chatLibrariesButton")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.show_menu_arrow = False  # its text ends with "▾" (no sheet: it zooms, themes)
        self.setAccessibleDescription("Choose the document libraries this chat searches.")
        self.menu_ = QMenu(self)
        self.menu_.aboutToShow.connect(self.rebuild)
        self.setMenu(self.menu_)
        documents.choice_changed.connect(self.update_label)
        documents.libraries_changed.connect(self.on_libraries_changed)
        self.update_label()

    def update_label(self, *_: object) -> None:
        on = sorted(self.documents.choice())
        self.setText((f"Libraries: {len(on)}" if on else "Libraries: off") + " ▾")
        self.setToolTip("Libraries this chat searches: " + (", ".join(on) or "none"))
        self.setAccessibleName(self.text())

    def on_libraries_changed(self) -> None:
        if self.menu_.isVisible():  # it opened while the menu showed "Opening…"
            self.rebuild()

    def rebuild(self) -> None:
        menu = self.menu_
        menu.clear()
        chosen = self.documents.choice()
        rows = self.documents.libraries()  # opens the library the first time
        if not rows:
            none = menu.addAction(OPENING_TEXT if self.documents.opening else NO_LIBRARIES)
            none.setEnabled(False)
            return
        for row in rows:
            action = menu.addAction(library_label(row))
            action.setCheckable(True)
            action.setChecked(row["name"] in chosen)
            action.toggled.connect(
                lambda on, n=row["name"]: self.documents.set_library_on(n, on))


class ChatLibrariesList(QWidget):
    """The chat settings' "Libraries" section: a check box per library."""

    def __init__(self, documents: DocumentsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.documents = documents
        self.setObjectName("chatLibrariesList")
        self.setAccessibleName("Libraries this chat searches")
        self.boxes: dict[str, QCheckBox] = {}
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 6, 0, 0)
        self._layout.setSpacing(2)
        self.heading = QLabel("<b>Libraries</b>", self)
        self.note = QLabel(self)
        self.note.setObjectName("statusNote")
        self.note.setWordWrap(True)
        self.show_button = QPushButton("Show libraries", self)
        self.show_button.setAccessibleDescription(
            "Open the document library to choose which libraries this chat searches.")
        self.show_button.clicked.connect(self.on_show)
        self._layout.addWidget(self.heading)
        self._layout.addWidget(self.note)
        self._layout.addWidget(self.show_button)
        documents.choice_changed.connect(self.rebuild)
        documents.libraries_changed.connect(self.rebuild)
        documents.activity.connect(self.rebuild)
        self.rebuild()

    def on_show(self) -> None:
        self.documents.open_library()
        self.rebuild()

    def rebuild(self, *_: object) -> None:
        documents = self.documents
        chosen = documents.choice()
        if documents.is_open:
            rows = [(r["name"], library_label(r)) for r in documents.libraries()]
        else:  # not opened yet: the chat's own choice, by name
            rows = [(name, name) for name in sorted(chosen)]
        for box in self.boxes.values():
            self._layout.removeWidget(box)
            box.hide()  # gone at once, not at the next turn of the event loop
            box.deleteLater()
        self.boxes = {}
        for name, label in rows:
            box = QCheckBox(label, self)
            box.setChecked(name in chosen)
            box.setAccessibleName(f"Search the library {name}")
            box.toggled.connect(lambda on, n=name: self.documents.set_library_on(n, on))
            self._layout.insertWidget(self._layout.count() - 2, box)
            self.boxes[name] = box
        if documents.opening:
            note = OPENING_TEXT
        elif documents.is_open and not rows:
            note = NO_LIBRARIES
        elif documents.is_open:
            note = "The passages a reply used are listed under it."
        else:
            note = "" if rows else "This chat searches no document library."
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self.show_button.setVisible(not documents.is_open and not documents.opening)

    def checked(self) -> set[str]:
        return {name for name, box in self.boxes.items() if box.isChecked()}
