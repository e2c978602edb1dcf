"""One message of the conversation as a widget: a card with the text, and its actions.

The user's turn sits in a tinted card; the assistant's answer is set on the page like a
document, with the model's thinking (if any) folded in a ``ThinkingBlock`` above it. Below
each card: the ``‹ i / n ›`` branch control (shown whenever the turn has
variants) and the action icons (copy, edit or regenerate, delete, and an info button that
holds the reply's provenance), which appear while the pointer is over the message or focus
is inside it. A failed reply also shows a Retry button beside its "failed" note, always
(``hearth:retry/<row>``), and a message a quit left unsent a Send now button beside its
"not sent" note (``hearth:send/<row>``). Every click is reported as a ``hearth:`` URL, the
same words the Markdown's code-copy links use, so the view has one place that acts on them.
"""

from __future__ import annotations

import itertools

from PySide6.QtCore import QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QToolButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from app.chat.parts import ToolCall
from app.storage.records import StoredMessage
from app.storage.transfer import provenance_line
from app.ui.attachment_tray import attachment_chips
from app.ui.icons import icon
from app.ui.markdown_render import Rendered, render_markdown
from app.ui.message_body import MessageBody
from app.ui.sources_list import SourcesList
from app.ui.speculation_text import info_text, off_reason, speculation_figures
from app.ui.theme import Colors
from app.ui.thinking_block import ThinkingBlock
from app.ui.tool_card import ToolCallCard

__all__ = ["MessageBody", "MessageWidget"]

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System"}
TYPING_FRAMES = ("•", "• •", "• • •")
TYPING_INTERVAL_MS = 350

_ACTION_ROW_HEIGHT: int | None = None  # one icon button's height, measured once

_STATUS_NOTES = {
    "streaming": ("replying…", ""),
    "stopped": ("stopped", "warning"),
    "failed": ("failed", "error"),
    "reading": ("reading its files…", ""),  # a user message held while its files are read
    "waiting": ("waiting for its turn…", ""),  # sent while another chat's reply is written
    "model": ("waiting for the model to load…", ""),  # its files read; the budget waits
}


def _retain_size(widget: QWidget) -> None:
    policy = widget.sizePolicy()
    policy.setRetainSizeWhenHidden(True)
    widget.setSizePolicy(policy)


class _WrappedNote(QLabel):
    """A word-wrapped note as tall as its lines at its width (a wrapped label's own size
    hint guesses a narrower width, and the card would share the extra height out)."""

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        height = self.heightForWidth(self.width())
        if height > 0 and height != self.height():
            self.setFixedHeight(height)


class MessageWidget(QWidget):
    """A message card with hover / focus actions.

    Signals:
        link_activated(str url): a ``hearth:<action>/<row>[/<n>]`` URL (action icons, branch
            arrows, code-copy links) or an ordinary link in the text.
    """

    link_activated = Signal(str)

    def __init__(self, message: StoredMessage, row: int, colors: Colors,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("message")
        self.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.setAttribute(Qt.WidgetAttribute.WA_Hover, True)
        self.row = row
        self.message = message
        self._colors = colors
        self._rendered: Rendered | None = None
        self._rendered_text: str | None = None
        self.render_count = 0
        self._shown_html: str | None = None

        self.card = QFrame(self)
        self.card.setObjectName("messageCard")
        self.card.setProperty("role", "user" if message.role == "user" else "assistant")
        self.role_label = QLabel(ROLE_NAMES.get(message.role, message.role), self.card)
        self.role_label.setObjectName("roleLabel")
        self.status_note = QLabel(self.card)
        self.status_note.setObjectName("statusNote")
        self.retry_button = QToolButton(self.card)  # a failed reply's: ask again, same turn
        self.retry_button.setObjectName("retryButton")
        self.retry_button.setText("Retry")
        self.retry_button.setIcon(icon("regenerate", colors))
        self.retry_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.retry_button.setToolTip("Ask for this reply again")
        self.retry_button.setAccessibleName("Retry")
        self.retry_button.setAccessibleDescription(
            "Ask the model again for the reply to the message above.")
        self.retry_button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.retry_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.retry_button.setVisible(False)
        self.retry_button.clicked.connect(
            lambda: self.link_activated.emit(f"hearth:retry/{self.row}"))
        self.send_button = QToolButton(self.card)  # an unsent message's: answer it now
        self.send_button.setObjectName("retryButton")  # styled as Retry is
        self.send_button.setText("Send now")
        self.send_button.setIcon(icon("send", colors))
        self.send_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.send_button.setToolTip("Send this message to the model now")
        self.send_button.setAccessibleName("Send now")
        self.send_button.setAccessibleDescription(
            "Ask the model to answer this message, which was not sent.")
        self.send_button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.send_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.send_button.setVisible(False)
        self.send_button.clicked.connect(
            lambda: self.link_activated.emit(f"hearth:send/{self.row}"))
        self.typing = QLabel(self.card)
        self.typing.setObjectName("typingIndicator")
        self.typing.setAccessibleName("The assistant is writing")
        self.thinking = ThinkingBlock(colors, self.card)
        self.body = MessageBody(self.card)
        self.body.link_activated.connect(self.link_activated)

        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.setSpacing(8)
        header.addWidget(self.role_label)
        header.addWidget(self.status_note)
        header.addWidget(self.retry_button)
        header.addWidget(self.send_button)
        header.addStretch(1)
        card_layout = QVBoxLayout(self.card)
        pad = 14 if message.role == "user" else 2
        card_layout.setContentsMargins(pad, 10, pad, 6)
        card_layout.setSpacing(4)
        card_layout.addLayout(header)
        card_layout.addWidget(self.thinking)
        card_layout.addWidget(self.typing)
        card_layout.addWidget(self.body)
        self._card_layout = card_layout
        self.chips: QWidget | None = None  # the files sent with it (``_update_chips``)
        self._chips_of: tuple | None = None
        #: why a user message was kept unanswered (its files could not be read, Stop, quit)
        self.unsent_note = _WrappedNote(self.card)
        self.unsent_note.setObjectName("statusNote")
        self.unsent_note.setProperty("level", "warning")
        self.unsent_note.setWordWrap(True)
        self.unsent_note.setVisible(False)
        card_layout.addWidget(self.unsent_note)
        self.sources = SourcesList(self.card)  # a reply's: the passages its turn used
        self.sources.changed.connect(self.chain_focus)
        card_layout.addWidget(self.sources)
        #: the reply's tool calls by id (a ``tool`` row's result fills its card in)
        self.tool_cards: dict[str, ToolCallCard] = {}

        # branch control: always visible when the turn has variants
        self.branch = QWidget(self)
        self.previous_button = self._button("previous", "Previous version",
                                            "Show the previous version of this turn.")
        self.variant_label = QLabel(self.branch)
        self.variant_label.setObjectName("variantLabel")
        self.next_button = self._button("next", "Next version",
                                        "Show the next version of this turn.")
        branch_layout = QHBoxLayout(self.branch)
        branch_layout.setContentsMargins(0, 0, 0, 0)
        branch_layout.setSpacing(0)
        for w in (self.previous_button, self.variant_label, self.next_button):
            w.setParent(self.branch)
            branch_layout.addWidget(w)

        # actions: shown on hover or focus; they keep their room while hidden
        self.actions = QWidget(self)
        self.actions.setObjectName("messageActions")
        _retain_size(self.actions)
        actions_layout = QHBoxLayout(self.actions)
        actions_layout.setContentsMargins(0, 0, 0, 0)
        actions_layout.setSpacing(2)
        # The icons are made on first hover / focus: a chat opens with 100 messages, and
        # 600 buttons nobody points at cost more than the messages themselves.
        self._buttons: dict[str, QToolButton] | None = None
        global _ACTION_ROW_HEIGHT
        if _ACTION_ROW_HEIGHT is None:
            _ACTION_ROW_HEIGHT = self.previous_button.sizeHint().height()
        self.actions.setFixedHeight(_ACTION_ROW_HEIGHT)  # its room is kept from the start

        footer = QHBoxLayout()
        footer.setContentsMargins(0, 0, 0, 0)
        footer.setSpacing(6)
        if message.role == "user":
            footer.addStretch(1)
        footer.addWidget(self.branch)
        footer.addWidget(self.actions)
        if message.role != "user":
            footer.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 2)
        layout.setSpacing(2)
        layout.addWidget(self.card)
        layout.addLayout(footer)
        for w in (self.previous_button, self.next_button):
            w.clicked.connect(self.on_button_clicked)

        self._typing_frame = 0
        self._typing_timer = QTimer(self)
        self._typing_timer.setInterval(TYPING_INTERVAL_MS)
        self._typing_timer.timeout.connect(self.on_typing_timer)
        self.actions.setVisible(False)
        if message.role == "tool":  # its result shows in the calling reply's card
            self.setVisible(False)
        self.set_message(message, row)

    # content ------------------------------------------------------------------------------

    def set_message(self, message: StoredMessage, row: int | None = None) -> None:
        """Show ``message`` (its text, status, variants and provenance)."""
        if row is not None:
            self.row = row
        self.message = message
        note, level = _STATUS_NOTES.get(message.status, ("", ""))
        unsent = message.provenance.get("unsent") if message.role == "user" else None
        if isinstance(unsent, str) and unsent:  # kept in its chat, never answered
            note, level = "not sent", "warning"
        if message.damaged:
            note, level = "could not be read in full", "warning"
        self.status_note.setText(note)
        self.status_note.setProperty("level", level)
        self.status_note.setVisible(bool(note) and not self.is_typing)
        self.style().polish(self.status_note)
        self.retry_button.setVisible(message.role == "assistant" and message.status == "failed")
        self.send_button.setVisible(bool(unsent) and bool(message.provenance.get("resend")))
        error = message.provenance.get("error") if message.status == "failed" else unsent
        self.status_note.setToolTip(str(error) if error else "")
        shown_unsent = unsent if isinstance(unsent, str) else ""
        self.unsent_note.setText(shown_unsent)
        self.unsent_note.setVisible(bool(shown_unsent))
        self._update_chips()
        self.thinking.set_reasoning(message.reasoning, message.reasoning_ms,
                                    thinking=self.is_thinking)
        self._render_body()
        self._update_tool_cards()
        self._update_typing()
        self._update_variants()
        self._update_info()
        if message.status != "streaming":
            self._update_accessible()

    @property
    def shown_in_column(self) -> bool:
        """False for a ``tool`` row: its result is shown in the card of the call."""
        return self.message.role != "tool"

    def _update_chips(self) -> None:
        """The attachment chips, below the text (rebuilt when the files or their reading
        state change: a held message's files become its parts once read)."""
        status = self.message.status
        key = (self.message.parts,
               status if status in ("reading", "model", "waiting") else "")
        if key == self._chips_of:
            return
        self._chips_of = key
        if self.chips is not None:
            self._card_layout.removeWidget(self.chips)
            self.chips.hide()
            self.chips.deleteLater()
        self.chips = attachment_chips(self.message.parts, self.card,
                                      reading=key[1] == "reading",
                                      undecided=key[1] == "model",
                                      waiting=key[1] == "waiting")
        if self.chips is not None:
            self._card_layout.insertWidget(self._card_layout.indexOf(self.body) + 1,
                                           self.chips)
        self.chain_focus()

    def chain_focus(self) -> None:
        """Tab reaches the message's file chips and sources within the message (after its
        branch arrows), not after every other widget of the window: they are made after the
        rest of it, and a widget made later joins the end of the focus chain."""
        chips = self.chips.findChildren(QToolButton) if self.chips is not None else []
        chain = [self.next_button, *chips, *self.sources.buttons]
        for first, second in itertools.pairwise(chain):
            QWidget.setTabOrder(first, second)

    def _update_tool_cards(self) -> None:
        for part in self.message.parts:
            if isinstance(part, ToolCall) and part.id not in self.tool_cards:
                card = ToolCallCard(part, self.card)
                self._card_layout.addWidget(card)
                self.tool_cards[part.id] = card

    def hasHeightForWidth(self) -> bool:
        """No: the body fixes its own height to its text (see ``MessageBody``)."""
        return False

    def set_colors(self, colors: Colors) -> None:
        self._colors = colors
        self._rendered_text = None
        self._shown_html = None
        for name, button in self._all_buttons():
            button.setIcon(icon(name, colors))
        self.retry_button.setIcon(icon("regenerate", colors))
        self.send_button.setIcon(icon("send", colors))
        self.thinking.set_colors(colors)
        self._render_body()

    @property
    def is_typing(self) -> bool:
        """A reply whose first token is still pending."""
        m = self.message
        return m.status == "streaming" and not m.content and not m.reasoning

    @property
    def is_thinking(self) -> bool:
        """A reply whose model is thinking and has not started its answer."""
        m = self.message
        return m.status == "streaming" and not m.content and bool(m.reasoning)

    def rendered(self) -> Rendered:
        if self._rendered is None or self._rendered_text != self.message.content:
            self._rendered = render_markdown(self.message.content, self._colors, self.row)
            self._rendered_text = self.message.content
        return self._rendered

    def html(self) -> str:
        return self.rendered().html

    def plain_text(self) -> str:
        """What the card shows, as text (role, status note, thinking block, body)."""
        head = self.role_label.text()
        if self.status_note.text() and self.status_note.isVisibleTo(self):
            head += f" · {self.status_note.text()}"
        thinking = self.thinking.plain_text()
        if thinking:
            head += f"\n{thinking}"
        body = self.body.toPlainText() if self.message.content else ""
        cards = "".join(f"\n{card.plain_text()}" for card in self.tool_cards.values())
        sources = f"\n{self.sources.plain_text()}" if self.sources.sources else ""
        return f"{head}\n{body}{cards}{sources}"

    def _render_body(self) -> None:
        if self._rendered_text == self.message.content and self._shown_html is not None:
            return
        self._shown_html = self.html() if self.message.content else ""
        self.body.set_html(self._shown_html)
        self.body.setVisible(bool(self.message.content))
        self.render_count += 1

    def _update_typing(self) -> None:
        typing = self.is_typing
        self.typing.setVisible(typing)
        if typing and not self._typing_timer.isActive():
            self._typing_frame = 0
            self.typing.setText(TYPING_FRAMES[-1])
            self._typing_timer.start()
        elif not typing:
            self._typing_timer.stop()

    def on_typing_timer(self) -> None:
        self._typing_frame = (self._typing_frame + 1) % len(TYPING_FRAMES)
        self.typing.setText(TYPING_FRAMES[self._typing_frame])

    def _update_variants(self) -> None:
        m = self.message
        many = m.variant_count > 1
        self.branch.setVisible(many)
        if many:
            self.variant_label.setText(f"{m.variant_index + 1} / {m.variant_count}")
            self.variant_label.setAccessibleName(
                f"Version {m.variant_index + 1} of {m.variant_count}"
            )
            self.previous_button.setEnabled(m.variant_index > 0)
            self.next_button.setEnabled(m.variant_index < m.variant_count - 1)

    @property
    def action_buttons(self) -> dict[str, QToolButton]:
        """The action icons by name (made now if they were not yet)."""
        if self._buttons is None:
            self._buttons = self._make_action_buttons()
            self._update_info()
        return self._buttons

    def _make_action_buttons(self) -> dict[str, QToolButton]:
        m = self.message
        specs = [("copy", "Copy", "Copy this message's text.")]
        if m.role == "user":
            specs.append(("edit", "Edit", "Edit this message and send it again as a new "
                          "version; the old one is kept."))
        elif m.role == "assistant":
            specs.append(("regenerate", "Regenerate", "Write a new version of this reply; "
                          "the old one is kept."))
            specs.append(("info", "Details", "Model, speed, tokens and seed of this reply."))
        specs.append(("delete", "Delete", "Delete this message (Undo brings it back)."
                      if m.role == "assistant" else
                      "Delete this message and its reply (Undo brings them back)."))
        buttons: dict[str, QToolButton] = {}
        layout = self.actions.layout()
        for name, label, description in specs:
            button = self._button(name, label, description)
            button.setParent(self.actions)
            layout.addWidget(button)
            button.clicked.connect(self.on_button_clicked)
            buttons[name] = button
        # Tab order: the message, its branch arrows, then its actions
        chain = [self, self.thinking.toggle, self.previous_button, self.next_button,
                 *buttons.values()]
        for first, second in itertools.pairwise(chain):
            QWidget.setTabOrder(first, second)
        return buttons

    def _update_info(self) -> None:
        if self._buttons is None:
            return
        info = self._buttons.get("info")
        if info is None:
            return
        line = provenance_line(self.message.provenance) if self.message.provenance else ""
        figures = speculation_figures(self.message.provenance.get("stats"))
        if figures is not None:
            line = f"{line} · {info_text(figures)}".lstrip(" ·")
        elif (off := off_reason(self.message.provenance.get("stats"))) is not None:
            line = f"{line} · {off[0].lower()}{off[1:]}".lstrip(" ·")
        if self.message.provenance.get("error"):
            line = f"{line} · error: {self.message.provenance['error']}".lstrip(" ·")
        info.setVisible(bool(line) and self.message.status != "streaming")
        info.setToolTip(line)
        info.setAccessibleDescription(line)

    def _update_accessible(self) -> None:
        m = self.message
        name = ROLE_NAMES.get(m.role, m.role)
        if m.variant_count > 1:
            name += f", version {m.variant_index + 1} of {m.variant_count}"
        if self.status_note.text():
            name += f", {self.status_note.text()}"
        self.setAccessibleName(name)
        self.setAccessibleDescription(m.content)

    # actions ------------------------------------------------------------------------------

    def _button(self, name: str, label: str, description: str) -> QToolButton:
        button = QToolButton(self)
        button.setObjectName("actionButton")
        button.setProperty("action", name)
        button.setIcon(icon(name, self._colors))
        button.setToolTip(label)
        button.setAccessibleName(label)
        button.setAccessibleDescription(description)
        button.setAutoRaise(True)
        button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        return button

    def _all_buttons(self) -> list[tuple[str, QToolButton]]:
        return [("previous", self.previous_button), ("next", self.next_button),
                *(self._buttons or {}).items()]

    def on_button_clicked(self) -> None:
        button = self.sender()
        name = button.property("action") if button is not None else None
        if not name:
            return
        if name == "info":
            QToolTip.showText(button.mapToGlobal(QPoint(0, button.height())),
                              button.toolTip(), button)
            return
        self.link_activated.emit(f"hearth:{name}/{self.row}")

    def set_actions_shown(self, shown: bool) -> None:
        """Show or hide the action icons (hover and focus decide; see ChatView)."""
        if shown:
            _ = self.action_buttons  # made on first use
        if self.actions.isVisible() != shown:
            self.actions.setVisible(shown)
        self.card.setProperty("focused", "true" if self.hasFocus() else "false")
        self.style().polish(self.card)

    def enterEvent(self, event) -> None:
        super().enterEvent(event)
        self.set_actions_shown(True)

    def leaveEvent(self, event) -> None:
        super().leaveEvent(event)
        self.set_actions_shown(self.has_focus_inside())

    def has_focus_inside(self) -> bool:
        from PySide6.QtWidgets import QApplication

        focused = QApplication.focusWidget()
        return focused is not None and (focused is self or self.isAncestorOf(focused))

    def keyPressEvent(self, event) -> None:
        """Ctrl+C on a focused message copies it."""
        if event.matches(QKeySequence.StandardKey.Copy):
            self.link_activated.emit(f"hearth:copy/{self.row}")
            return
        super().keyPressEvent(event)
