"""The question a tool call puts to the user, in a bar above the composer:
"Run get_time (server time) with {…}?" — Allow once / Always allow this tool / Deny. A
reply running in a chat that is not on screen names its chat in the question.

It shows while the turn waits (the call's card says "waiting for your answer") and goes
once it is answered, or when the reply ends (Stop is a no).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.tools.consent import Decision
from app.tools.spec import Tool
from app.ui.tool_card import pretty_arguments

ARGUMENTS_SHOWN = 300  # characters of the arguments in the question


class ApprovalBar(QFrame):
    """Signals: decided(Decision)."""

    decided = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("approvalBar")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAccessibleName("A tool call waits for your answer")
        self.question = QLabel(self)
        self.question.setWordWrap(True)
        self.question.setTextFormat(Qt.TextFormat.PlainText)
        self.allow_once = QPushButton("Allow once", self)
        self.always = QPushButton("Always allow this tool", self)
        self.deny = QPushButton("Deny", self)
        self.allow_once.setAccessibleDescription("Run this call, and ask again next time.")
        self.always.setAccessibleDescription(
            "Run this call and every later call of this tool without asking.")
        self.deny.setAccessibleDescription("Do not run it; the model is told it was refused.")
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for button, decision in ((self.deny, Decision.DENY), (self.always, Decision.ALWAYS),
                                 (self.allow_once, Decision.ALLOW_ONCE)):
            buttons.addWidget(button)
            button.clicked.connect(lambda _=False, d=decision: self.decided.emit(d))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.question)
        layout.addLayout(buttons)
        self.hide()

    def ask(self, name: str, arguments: str, tool: Tool | None, *, can_run: bool = True,
            chat: str = "") -> None:
        """Show the question for a call of ``name`` (``tool``: the MCP tool it names, which
        "always" remembers; None: not an MCP server's). ``can_run`` False: nothing offers
        the tool, so only Deny makes sense. ``chat``: the title of the chat whose reply
        asks, when that is not the chat on screen ("": it is)."""
        shown = pretty_arguments(arguments)
        if len(shown) > ARGUMENTS_SHOWN:
            shown = shown[:ARGUMENTS_SHOWN] + "…"
        where = f" (server {tool.server})" if tool is not None else ""
        asker = f"In the chat “{chat}”, the model" if chat else "The model"
        self.question.setText(f"{asker} wants to run the tool {name}{where} with:\n{shown}")
        self.allow_once.setEnabled(can_run)
        self.always.setEnabled(can_run and tool is not None)
        self.show()
        (self.allow_once if can_run else self.deny).setFocus()
