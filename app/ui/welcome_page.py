"""The empty chat: the model in use, example prompts that send on click, the shortcuts."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

EXAMPLE_PROMPTS = (
    "Explain how a transformer language model works, in three short paragraphs.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Give me five ideas for a relaxing weekend at home.",
    "Summarise the pros and cons of working remotely in a table.",
)

def shortcuts_text(send_key: str = "enter") -> str:
    """The keys line, as the "send_key" setting has them ("enter" or "ctrl+enter")."""
    keys = ("Ctrl+Enter sends · Enter adds a line" if send_key == "ctrl+enter"
            else "Enter sends · Shift+Enter adds a line")
    return f"{keys} · Esc stops a reply · Ctrl+N new chat · Ctrl+F find chats"


SHORTCUTS = shortcuts_text()


class PromptCard(QPushButton):
    """An example prompt: a button whose wrapped label sets its height (a narrow column
    gives it more lines and a taller card, never cut text)."""

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def hasHeightForWidth(self) -> bool:
        return self.layout() is not None

    def heightForWidth(self, width: int) -> int:
        inner = self.layout()
        needed = inner.heightForWidth(width) if inner is not None else -1
        return max(self.minimumHeight(), needed)

    def sizeHint(self) -> QSize:
        inner = self.layout()
        if inner is None:
            return super().sizeHint()
        return inner.sizeHint().expandedTo(QSize(0, self.minimumHeight()))

    def minimumSizeHint(self) -> QSize:
        inner = self.layout()
        if inner is None:
            return super().minimumSizeHint()
        return inner.minimumSize().expandedTo(QSize(0, self.minimumHeight()))


class WelcomePage(QWidget):
    """Shown in an empty chat.

    Signals:
        prompt_chosen(str text): the user clicked an example prompt.
    """

    prompt_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("welcomePage")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setAccessibleName("New chat")
        self.title = QLabel("What can I help with?", self)
        self.title.setObjectName("welcomeTitle")
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.title.setWordWrap(True)  # a narrow chat column: two lines, never cut
        self.model_label = QLabel(self)
        self.model_label.setObjectName("welcomeModel")
        self.model_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.model_label.setWordWrap(True)
        self.prompt_buttons: list[QPushButton] = []
        grid = QGridLayout()
        grid.setSpacing(10)
        for i, prompt in enumerate(EXAMPLE_PROMPTS):
            button = PromptCard(prompt, self)
            button.setObjectName("examplePrompt")
            button.setAccessibleName(f"Example prompt: {prompt}")
            button.setAccessibleDescription("Sends this message to the model.")
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            button.setMinimumHeight(64)
            button.setMaximumWidth(340)
            button.clicked.connect(self.on_prompt_clicked)
            # QPushButton does not wrap: a label inside it does
            button.setText("")
            label = QLabel(prompt, button)
            label.setWordWrap(True)
            label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, True)
            inner = QVBoxLayout(button)
            inner.setContentsMargins(12, 8, 12, 8)
            inner.addWidget(label)
            button.setProperty("prompt", prompt)
            grid.addWidget(button, i // 2, i % 2)
            self.prompt_buttons.append(button)
        self.hints = QLabel(SHORTCUTS, self)
        self.hints.setObjectName("welcomeHints")
        self.hints.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hints.setWordWrap(True)
        # a short window (a tall composer, 150% text) scrolls the page, never squeezes it
        content = QWidget(self)
        content.setObjectName("welcomeContent")
        self.scroll = QScrollArea(self)
        self.scroll.setObjectName("welcomeScroll")
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.scroll)
        for widget in (self.title, self.model_label, *self.prompt_buttons, self.hints):
            widget.setParent(content)
        layout = QVBoxLayout(content)
        layout.setContentsMargins(24, 24, 24, 24)
        layout.setSpacing(14)
        layout.addStretch(2)
        layout.addWidget(self.title)
        layout.addWidget(self.model_label)
        layout.addSpacing(10)
        layout.addLayout(grid)
        layout.addSpacing(10)
        layout.addWidget(self.hints)
        layout.addStretch(3)
        self.scroll.setWidget(content)
        self.set_model(None)

    def set_model(self, name: str | None) -> None:
        """The model that will answer (None: none is loaded yet)."""
        if name:
            self.model_label.setText(f"You are chatting with {name}, running on this computer.")
        else:
            self.model_label.setText("No model is loaded yet: pick one in the toolbar.")
        for button in self.prompt_buttons:
            button.setEnabled(bool(name))
        self.setAccessibleDescription(self.model_label.text())

    def set_send_key(self, send_key: str) -> None:
        self.hints.setText(shortcuts_text(send_key))

    def on_prompt_clicked(self) -> None:
        button = self.sender()
        if button is not None:
            self.prompt_chosen.emit(button.property("prompt"))
