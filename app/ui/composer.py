"""The message composer: Enter sends, Shift+Enter adds a line, Send turns into Stop.

While a message is being edited a banner above the text box says so ("Editing a message —
Save & submit / Cancel"); Esc cancels the edit and brings back what was being written.

While the model answers in another chat (``set_busy_elsewhere``) a note above the text box
names that chat, with a "Stop that reply" button of its own; Send still sends: the message
waits its turn (``ChatController.in_line``), the note says so, and the button is "Don't
send" (Esc too) until it goes.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QMimeData, Qt, Signal
from PySide6.QtGui import QGuiApplication, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.text import clean_text
from app.ui.theme import colors_for, edit_banner_stylesheet
from app.ui.zoom import set_font_points, system_points, zoom_stylesheet

EDIT_LINES = 5  # the text box grows up to this many lines, then scrolls


def local_files(mime: QMimeData) -> list[Path]:
    """The local files a paste or a drop carries (none: it is text)."""
    if not mime.hasUrls():
        return []
    return [Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile()]


class ComposerEdit(QPlainTextEdit):
    """Text box. Signals: send_pressed(), stop_pressed(), up_in_empty(), files_added(list
    of Path): files were pasted or dropped on it (they are attached, not written in)."""

    send_pressed = Signal()
    stop_pressed = Signal()
    up_in_empty = Signal()  # Up with nothing written: edit the last message
    files_added = Signal(list)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return bool(local_files(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        files = local_files(source)
        if files:
            self.files_added.emit(files)
            return
        super().insertFromMimeData(source)
    #: The "send_key" setting: "enter" (Shift+Enter adds a line) or "ctrl+enter" (Enter does).
    send_key = "enter"

    def event(self, event: QEvent) -> bool:
        """Ctrl+Z with nothing to undo in the text goes to the window (Undo delete)."""
        if (event.type() == QEvent.Type.ShortcutOverride
                and isinstance(event, QKeyEvent)
                and event.matches(QKeySequence.StandardKey.Undo)
                and not self.document().isUndoAvailable()):
            event.ignore()
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        mods = event.modifiers()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            ctrl = bool(mods & Qt.KeyboardModifier.ControlModifier)
            shift = bool(mods & Qt.KeyboardModifier.ShiftModifier)
            sends = ctrl if self.send_key == "ctrl+enter" else not shift
            if sends:
                self.send_pressed.emit()
            else:
                self.insertPlainText("\n")
            return
        if key == Qt.Key.Key_Up and not self.toPlainText():
            self.up_in_empty.emit()
            return
        if key == Qt.Key.Key_Escape:
            self.stop_pressed.emit()
            return
        super().keyPressEvent(event)


_HINTS = {
    "enter": ("Message the model…  (Enter sends, Shift+Enter adds a line)",
              "Type a message. Enter sends, Shift+Enter adds a line, Escape stops a reply."),
    "ctrl+enter": ("Message the model…  (Ctrl+Enter sends, Enter adds a line)",
                   "Type a message. Ctrl+Enter sends, Enter adds a line, Escape stops a reply."),
}


class EditBanner(QFrame):
    """ "Editing a message — Save & submit / Cancel" above the text box."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("editBanner")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.label = QLabel("Editing a message — the original is kept as an earlier version.",
                            self)
        self.label.setWordWrap(True)
        self.save_button = QPushButton("Save && submit", self)
        self.save_button.setObjectName("saveEdit")
        self.save_button.setAccessibleName("Save and submit")
        self.save_button.setAccessibleDescription("Send the edited message as a new version.")
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setAccessibleName("Cancel editing")
        self.cancel_button.setAccessibleDescription("Stop editing (Esc); nothing changes.")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 4, 6, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.cancel_button)
        layout.addWidget(self.save_button)
        self.setAccessibleName("Editing a message")
        self.set_text_points(None)
        self.hide()

    def set_text_points(self, points: float | None) -> None:
        """The banner's text size (its stylesheet owns its font); None: the system's."""
        sheet = edit_banner_stylesheet(colors_for(QGuiApplication.palette()))
        self.setStyleSheet(sheet + zoom_stylesheet(points or system_points()))


class BusyBanner(QFrame):
    """ "The model is answering in “…”" above the text box, with "Stop that reply"."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("busyBanner")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.label = QLabel(self)
        self.label.setObjectName("busyNote")
        self.label.setWordWrap(True)
        self.stop_button = QPushButton("Stop that reply", self)
        self.stop_button.setObjectName("stopElsewhere")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 4, 6, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.stop_button)
        self.setAccessibleName("The model is busy in another chat")
        self.set_text_points(None)
        self.hide()

    def set_text_points(self, points: float | None) -> None:
        """The banner's text size (its stylesheet owns its font); None: the system's."""
        sheet = edit_banner_stylesheet(colors_for(QGuiApplication.palette()))
        self.setStyleSheet(sheet + zoom_stylesheet(points or system_points()))


#: what the note above the text box says, by what the other chat's message does
BUSY_NOTES = {
    "answering": "The model is answering in “{title}”. A message sent here waits for that "
                 "reply, then goes.",
    "waiting": "A message in “{title}” waits for the model to load. A message sent here "
               "goes after it.",
    "reading": "The files of a message in “{title}” are being read; the model answers it "
               "next. A message sent here goes after it.",
}
#: the note when this chat's own message waits its turn behind that chat's
WAITING_NOTE = "Your message waits for the reply in “{title}”; it is sent when that ends."
#: the button (and Esc) while this chat's message waits its turn: it is taken out
DONT_SEND = "Don't send"
#: a longer title is cut in the note (two lines at 800 px); its button's name has it whole
NOTE_TITLE_CHARS = 60
BUSY_STOPS = {"answering": "Stop that reply", "waiting": "Don't send it",
              "reading": "Don't send it"}


class Composer(QWidget):
    """Where the user writes.

    Signals:
        submitted(str text): the user sent a non-empty message.
        stop_requested(): the user asked to stop the streaming reply (Stop button or Esc).
        edit_cancelled(): the user left edit mode (Cancel or Esc) without sending.
        stop_elsewhere_requested(): "Stop that reply": stop the reply in the other chat that
            the busy note names (``set_busy_elsewhere``).
    """

    submitted = Signal(str)
    stop_requested = Signal()
    edit_cancelled = Signal()
    stop_elsewhere_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._generating = False
        self._editing = False
        self._draft = ""  # what was being written before an edit began
        self._elsewhere: str | None = None  # the title of the chat the model is busy in
        self.banner = EditBanner(self)
        self.busy_banner = BusyBanner(self)
        self.edit = ComposerEdit(self)
        self.edit.setObjectName("composerEdit")
        self.edit.setAccessibleName("Message")
        self.set_send_key("enter")
        self.edit.setTabChangesFocus(True)
        self._fit_edit_height()
        self.button = QPushButton("Send", self)
        self.button.setObjectName("sendButton")
        self.button.setAccessibleName("Send")
        self.button.setAccessibleDescription("Send the message, or stop the reply being written.")
        self.button.setDefault(True)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.edit, 1)
        row.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 8)
        layout.setSpacing(4)
        layout.addWidget(self.busy_banner)
        layout.addWidget(self.banner)
        layout.addLayout(row)
        #: below the text box: attachments and the chat's tools / libraries menus
        self.accessories = QHBoxLayout()
        self.accessories.setContentsMargins(0, 0, 0, 0)
        self.accessories.setSpacing(6)
        self.accessories.addStretch(1)
        layout.addLayout(self.accessories)
        self.banner.save_button.clicked.connect(self.on_send)
        self.banner.cancel_button.clicked.connect(self.on_cancel_edit)
        self.busy_banner.stop_button.clicked.connect(self.stop_elsewhere_requested)
        self.edit.send_pressed.connect(self.on_send)
        self.edit.stop_pressed.connect(self.on_stop)
        self.button.clicked.connect(self.on_button_clicked)
        self.setAccessibleName("Composer")
        self.setAcceptDrops(True)  # files dropped anywhere on it are attached

    def dragEnterEvent(self, event) -> None:
        if local_files(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        files = local_files(event.mimeData())
        if files:
            self.edit.files_added.emit(files)
            event.acceptProposedAction()

    def add_accessory(self, widget: QWidget, *, end: bool = False) -> None:
        """Put ``widget`` in the row below the text box: at its start, after the ones put
        there before (``end``: at its end, after the stretch between the two)."""
        stretch = next(i for i in range(self.accessories.count())
                       if self.accessories.itemAt(i).spacerItem() is not None)
        self.accessories.insertWidget(self.accessories.count() if end else stretch, widget)

    @property
    def generating(self) -> bool:
        return self._generating

    def set_generating(self, generating: bool, label: str = "Stop") -> None:
        """A reply is in flight in this chat (or its message waits its turn: ``label``
        "Don't send"): the button is ``label``, and it and Esc stop it."""
        self._generating = generating
        self.button.setText(label if generating else "Send")
        self.button.setAccessibleName(label if generating else "Send")

    @property
    def busy_elsewhere(self) -> str | None:
        """The title of the other chat the model is busy in (None: it is not)."""
        return self._elsewhere

    def set_busy_elsewhere(self, title: str | None, what: str = "answering", *,
                           waiting_here: bool = False) -> None:
        """The model is busy in the chat ``title`` (None: not in another chat): the note
        names it and offers to stop it; a message sent here waits its turn
        (``waiting_here``: this chat's does now)."""
        self._elsewhere = title
        if title is not None:
            short = title if len(title) <= NOTE_TITLE_CHARS else \
                title[:NOTE_TITLE_CHARS - 1].rstrip() + "…"
            note = (WAITING_NOTE if waiting_here else
                    BUSY_NOTES.get(what, BUSY_NOTES["answering"])).format(title=short)
            self.busy_banner.label.setText(note)
            stop = self.busy_banner.stop_button
            stop.setText(BUSY_STOPS.get(what, BUSY_STOPS["answering"]))
            stop.setAccessibleName(f"Stop the reply in {title}")
            stop.setAccessibleDescription(f"Stop what the model does in the chat “{title}”; "
                                          "this chat is not changed.")
            self.busy_banner.setAccessibleDescription(note)
        self.busy_banner.setVisible(title is not None)
        self.button.setToolTip(
            f"The model is busy in “{self._elsewhere}”: a message sent now waits its turn."
            if title is not None and not self._generating else "")

    @property
    def editing(self) -> bool:
        return self._editing

    def begin_edit(self, text: str) -> None:
        """Show the banner and put the message being edited in the box."""
        if not self._editing:
            self._draft = self.edit.toPlainText()
        self._editing = True
        self.banner.show()
        self.button.hide()  # the banner's Save & submit sends: one button, not two
        self.set_text(text)

    def end_edit(self) -> None:
        """Edit mode is over (the edit was sent, cancelled, or the chat changed)."""
        if not self._editing:
            return
        self._editing = False
        self.banner.hide()
        self.button.show()

    def on_cancel_edit(self) -> None:
        if not self._editing:
            return
        self.end_edit()
        self.set_text(self._draft)
        self._draft = ""
        self.edit_cancelled.emit()

    def set_text(self, text: str) -> None:
        self.edit.setPlainText(text)
        self.edit.moveCursor(self.edit.textCursor().MoveOperation.End)
        self.edit.setFocus()

    def text(self) -> str:
        return self.edit.toPlainText()

    def on_button_clicked(self) -> None:
        if self._generating:
            self.on_stop()
        else:
            self.on_send()

    def on_send(self) -> None:
        if self._generating:
            return
        text = clean_text(self.edit.toPlainText()).strip()
        if not text:
            return
        self.edit.clear()
        if self._editing:  # the controller turns it into a new version
            self._draft = ""
        self.submitted.emit(text)

    def on_stop(self) -> None:
        """Esc: stop a streaming reply, else leave edit mode."""
        if self._generating:
            self.stop_requested.emit()
        elif self._editing:
            self.on_cancel_edit()

    def set_text_points(self, points: float | None) -> None:
        """Zoom the text box, the Send button and the edit banner (None: the system's)."""
        self._points = points
        set_font_points(self, points or system_points())
        self.banner.set_text_points(points)
        self.busy_banner.set_text_points(points)
        self._style_button()
        self._fit_edit_height()

    def set_button_stylesheet(self, sheet: str) -> None:
        """Send's look (theme colours, focus ring); its text size stays the composer's. The
        banners above the text box take the theme's colours again with it."""
        self._button_sheet = sheet
        self._style_button()
        points = getattr(self, "_points", None)
        self.banner.set_text_points(points)
        self.busy_banner.set_text_points(points)

    def _style_button(self) -> None:
        sheet = getattr(self, "_button_sheet", "")
        if sheet:  # a stylesheet owns the button's font: give it the zoomed size too
            points = getattr(self, "_points", None) or system_points()
            sheet += f"\nQPushButton#sendButton {{ font-size: {points:g}pt; }}"
        self.button.setStyleSheet(sheet)

    def _fit_edit_height(self) -> None:
        metrics = self.edit.fontMetrics()
        margins = self.edit.contentsMargins()
        frame = 2 * self.edit.frameWidth() + margins.top() + margins.bottom()
        doc = 2 * int(self.edit.document().documentMargin())
        self.edit.setMaximumHeight(EDIT_LINES * metrics.lineSpacing() + frame + doc)

    def set_send_key(self, send_key: str) -> None:
        """"enter" or "ctrl+enter" (the "send_key" setting); the hint says which."""
        self.edit.send_key = send_key
        placeholder, description = _HINTS[send_key]
        self.edit.setPlaceholderText(placeholder)
        self.edit.setAccessibleDescription(description)
