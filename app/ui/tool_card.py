"""A tool call in a reply, as a collapsible card: the tool, its arguments, its result and
how long it ran.

The header is one button (``▸ get_time · 12 ms``, or "waiting for your answer", "refused",
"failed"); clicking it folds the arguments and the result in or out. The card starts
folded; a refused or failed call shows its state in the header, so nothing has to be opened
to see that a call did not run.
"""

from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QFrame, QLabel, QToolButton, QVBoxLayout, QWidget

from app.chat.parts import ToolCall, ToolResult
from app.chat.turn import DENIED

#: how much of a result or of the arguments the card shows (the model read it all)
SHOWN_CHARS = 4000


def pretty_arguments(arguments: str) -> str:
    """The call's JSON arguments indented; as written when they are not JSON."""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def call_state(result: ToolResult | None) -> str:
    """"waiting", "refused", "failed" or "done"."""
    if result is None:
        return "waiting"
    if result.is_error and result.content == DENIED:
        return "refused"
    return "failed" if result.is_error else "done"


def format_duration(ms: float | None) -> str:
    if ms is None:
        return ""
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _cut(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return text[:SHOWN_CHARS] + f"\n… ({len(text) - SHOWN_CHARS:,} more characters)"


class ToolCallCard(QFrame):
    """One call; ``set_result`` fills in what the tool answered."""

    def __init__(self, call: ToolCall, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.call = call
        self.result: ToolResult | None = None
        self.asking = False  # the call waits for the user's answer (the approval bar)
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("toolCardToggle")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setAutoRaise(True)
        self.toggle.toggled.connect(self.set_expanded)
        self.details = QWidget(self)
        self.arguments_label = QLabel(self.details)
        self.arguments_label.setObjectName("toolArguments")
        self.result_label = QLabel(self.details)
        self.result_label.setObjectName("toolResult")
        fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        for label in (self.arguments_label, self.result_label):
            label.setFont(fixed)
            label.setWordWrap(True)
            label.setTextFormat(Qt.TextFormat.PlainText)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column = QVBoxLayout(self.details)
        column.setContentsMargins(22, 0, 6, 6)
        column.setSpacing(4)
        column.addWidget(QLabel("Arguments", self.details))
        column.addWidget(self.arguments_label)
        self.result_heading = QLabel("Result", self.details)
        column.addWidget(self.result_heading)
        column.addWidget(self.result_label)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(0)
        layout.addWidget(self.toggle)
        layout.addWidget(self.details)
        self.details.setVisible(False)
        self.arguments_label.setText(_cut(pretty_arguments(call.arguments)) or "{}")
        self._update()

    @property
    def state(self) -> str:
        if self.result is None:
            return "asking" if self.asking else "waiting"
        return call_state(self.result)

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def set_expanded(self, expanded: bool) -> None:
        if self.toggle.isChecked() != expanded:
            self.toggle.setChecked(expanded)
            return
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        self.details.setVisible(expanded)

    def set_result(self, result: ToolResult) -> None:
        self.result = result
        self.asking = False
        self._update()

    def set_asking(self, asking: bool) -> None:
        self.asking = asking
        self._update()

    def header_text(self) -> str:
        state = self.state
        words = {
            "asking": "waiting for your answer",
            "waiting": "running…",
            "refused": "refused",
            "failed": "failed",
            "done": "",
        }[state]
        duration = format_duration(self.result.duration_ms) if self.result else ""
        if state == "refused":
            duration = ""
        bits = [b for b in (words, duration) if b]
        return f"Tool: {self.call.name}" + (f" · {' · '.join(bits)}" if bits else "")

    def _update(self) -> None:
        text = self.header_text()
        self.toggle.setText(text)
        self.toggle.setAccessibleName(text)
        self.setProperty("state", self.state)
        self.style().polish(self)
        has_result = self.result is not None
        self.result_heading.setVisible(has_result)
        self.result_label.setVisible(has_result)
        if self.result is not None:
            self.result_label.setText(_cut(self.result.content))

    def plain_text(self) -> str:
        text = self.header_text()
        if self.expanded:
            text += f"\nArguments\n{self.arguments_label.text()}"
            if self.result is not None:
                text += f"\nResult\n{self.result_label.text()}"
        return text
