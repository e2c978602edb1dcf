"""The panel shown when no model is installed: offers the starter model."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.jobs import Progress
from app.paths import models_dir


class FirstRunPanel(QWidget):
    """Signals:
    setup_requested(): the user wants the starter model set up.
    browse_requested(): the user wants the model manager.
    """

    setup_requested = Signal()
    browse_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Welcome")
        title = QLabel("<h2>Welcome to Hearth</h2>", self)
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        text = QLabel(
            "Hearth runs language models on this computer: your chats never leave it.<br>"
            "No model is installed yet. The starter model (SmolLM2 135M Instruct) is small "
            "and works offline on any computer.<br><br>"
            f"You can also copy an ONNX model folder into <tt>{models_dir()}</tt> and pick it "
            "in the toolbar.",
            self,
        )
        text.setWordWrap(True)
        text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.button = QPushButton("Set up the starter model", self)
        self.button.setAccessibleName("Set up the starter model")
        self.button.setAccessibleDescription("Prepare the small built-in model for offline chat.")
        self.browse_button = QPushButton("Browse models…", self)
        self.browse_button.setAccessibleName("Browse models")
        self.browse_button.setAccessibleDescription("Download or import another model.")
        self.status = QLabel("", self)
        self.status.setWordWrap(True)
        self.status.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.status.setAccessibleName("Setup status")
        self.progress = QProgressBar(self)
        self.progress.setAccessibleName("Setup progress")
        self.progress.hide()
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        for widget in (title, text, self.button, self.browse_button, self.progress, self.status):
            layout.addWidget(widget, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addStretch(2)
        text.setMaximumWidth(560)
        self.status.setMaximumWidth(560)
        self.progress.setMinimumWidth(320)
        self.button.clicked.connect(self.on_clicked)
        self.browse_button.clicked.connect(self.browse_requested)

    def on_clicked(self) -> None:
        self.button.setEnabled(False)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.status.setText("Setting up the starter model…")
        self.setup_requested.emit()

    def on_progress(self, progress: Progress) -> None:
        if progress.percent < 0:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(progress.percent)
        self.status.setText(progress.message or "Setting up the starter model…")

    def on_failed(self, message: str) -> None:
        self.button.setEnabled(True)
        self.progress.hide()
        self.status.setText(message)

    def on_done(self) -> None:
        self.progress.hide()
        self.button.setEnabled(True)
        self.status.setText("The starter model is ready.")
