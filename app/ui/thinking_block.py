"""A reply's thinking as a collapsible block above its answer.

While the model thinks, the block reads "Thinking… 4 s" and shows the thoughts as they come;
once the answer starts it folds to "Thought for 12 s" (the wording is
``app.storage.transfer.thought_summary``'s, shared with the Markdown export). A click, or
Space / Enter on the focused header, opens and closes it. Screen readers get the header as a
checkable button named "Reasoning: Thought for 12 s" whose description says whether it is
expanded or collapsed; the seconds that tick while it thinks stay out of the name, so they
are not read out every second.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QFrame, QToolButton, QVBoxLayout, QWidget

from app.storage.transfer import thought_summary
from app.ui.icons import icon
from app.ui.message_body import MessageBody
from app.ui.theme import Colors

TICK_MS = 500  # how often "Thinking… N s" counts while the model thinks


class ThinkingToggle(QToolButton):
    """The block's header: a checkable button that Enter toggles as well as Space."""

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.click()
            return
        super().keyPressEvent(event)


class ThinkingBlock(QWidget):
    """The thinking of one reply (hidden when it has none).

    Signals:
        toggled(bool expanded): the block opened or closed (by the user or on its own).
    """

    toggled = Signal(bool)

    def __init__(self, colors: Colors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("thinkingBlock")
        self._colors = colors
        self._look: tuple[bool, Colors] | None = None  # the arrow icon now shown
        self._reasoning = ""
        self._reasoning_ms = 0.0
        self._thinking = False
        self._since: float | None = None  # when this widget first saw the model thinking
        self._choice: bool | None = None  # the user's open / closed, for the current phase
        self._shown_text: str | None = None  # what the body holds (filled only when open)
        self.render_count = 0

        self.toggle = ThinkingToggle(self)
        self.toggle.setObjectName("thinkingToggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.clicked.connect(self.on_toggle_clicked)
        self.frame = QFrame(self)
        self.frame.setObjectName("thinkingFrame")
        self.body = MessageBody(self.frame)
        self.body.setObjectName("thinkingBody")
        self.body.setAccessibleName("The model's reasoning")
        frame_layout = QVBoxLayout(self.frame)
        frame_layout.setContentsMargins(12, 2, 0, 4)
        frame_layout.addWidget(self.body)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 4)
        layout.setSpacing(2)
        layout.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.frame)
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.on_tick)
        self.frame.setVisible(False)
        self.setVisible(False)

    # state --------------------------------------------------------------------------------

    @property
    def expanded(self) -> bool:
        """Open while the model thinks, folded after, unless the user chose otherwise."""
        return self._choice if self._choice is not None else self._thinking

    @property
    def thinking(self) -> bool:
        return self._thinking

    def title(self) -> str:
        """What the header says (without its arrow)."""
        if self._thinking:
            elapsed = int(time.monotonic() - self._since) if self._since is not None else 0
            return f"Thinking… {elapsed} s" if elapsed else "Thinking…"
        return thought_summary(self._reasoning_ms)

    def set_reasoning(self, reasoning: str, reasoning_ms: float, *, thinking: bool) -> None:
        """Show ``reasoning``; ``thinking``: the model is still at it (no answer yet)."""
        if thinking and self._since is None:
            self._since = time.monotonic()
        if thinking != self._thinking:
            self._choice = None  # a new phase starts from its own default
        self._reasoning, self._reasoning_ms, self._thinking = reasoning, reasoning_ms, thinking
        self.setVisible(bool(reasoning) or thinking)
        if thinking and not self._timer.isActive():
            self._timer.start()
        elif not thinking:
            self._timer.stop()
        self._update()

    def set_expanded(self, expanded: bool) -> None:
        self._choice = expanded
        self._update()

    def set_colors(self, colors: Colors) -> None:
        self._colors = colors
        self._update_header()

    def plain_text(self) -> str:
        """The header, and the thoughts when the block is open."""
        if self.isHidden():
            return ""
        text = self.title()
        return f"{text}\n{self._reasoning.strip()}" if self.expanded else text

    # slots --------------------------------------------------------------------------------

    def on_toggle_clicked(self) -> None:
        self.set_expanded(not self.expanded)

    def on_tick(self) -> None:
        self._update_header()

    # helpers ------------------------------------------------------------------------------

    def _update(self) -> None:
        expanded = self.expanded
        was_expanded = not self.frame.isHidden()
        if expanded and self._shown_text != self._reasoning:
            self.body.set_plain_text(self._reasoning.strip())
            self._shown_text = self._reasoning
            self.render_count += 1
        self.frame.setVisible(expanded)
        self._update_header()
        if expanded != was_expanded:
            self.toggled.emit(expanded)

    def _update_header(self) -> None:
        expanded = self.expanded
        self.toggle.setText(self.title())
        look = (expanded, self._colors)
        if look != self._look:
            self._look = look
            self.toggle.setIcon(icon("expanded" if expanded else "collapsed", self._colors))
        if self.toggle.isChecked() != expanded:
            self.toggle.setChecked(expanded)
        name = "Thinking" if self._thinking else thought_summary(self._reasoning_ms)
        self.toggle.setAccessibleName(f"Reasoning: {name}")
        state = "Expanded" if expanded else "Collapsed"
        action = "hide" if expanded else "show"
        description = f"{state}. Press Space to {action} the model's reasoning."
        self.toggle.setAccessibleDescription(description)
        self.toggle.setToolTip(f"Click to {action} the model's reasoning.")
