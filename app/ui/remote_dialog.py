"""The "Add a remote engine" dialog: name, base URL, optional API key (password echo),
model ids for servers that cannot list theirs, and "Test connection", which says exactly
what failed (DNS, refused, TLS, 401, no /v1/models, timeout). It only shows and asks the
``ModelController`` (``test_remote``, ``add_remote``); the network work runs on the
controller's remotes job thread."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.remote.errors import RemoteError
from app.remote.listing import ConnectionTest
from app.remote.sources import RemoteSource, remote_keys
from app.remote.urls import normalize_base_url
from app.ui.model_controller import ModelController


class RemoteEngineDialog(QDialog):
    """Signals: none of its own; ``source`` holds the saved source once accepted."""

    def __init__(self, controller: ModelController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.source: RemoteSource | None = None
        self.setWindowTitle("Add a remote engine")
        self.setAccessibleName("Add a remote engine")
        self.name = QLineEdit(self)
        self.name.setPlaceholderText("GPU box")
        self.url = QLineEdit(self)
        self.url.setPlaceholderText("http://localhost:8000/v1")
        self.url.setAccessibleDescription(
            "The server's OpenAI-compatible API: vLLM, llama-server, Ollama (/v1), TGI, "
            "LM Studio or hearth serve.")
        self.key = QLineEdit(self)
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("optional")
        self.models = QLineEdit(self)
        self.models.setPlaceholderText("only if the server cannot list its models")
        self.key_note = QLabel(remote_keys().describe(), self)
        self.key_note.setWordWrap(True)
        self.key_note.setAccessibleName("Where the key is kept")
        self.result = QLabel("", self)
        self.result.setWordWrap(True)
        self.result.setAccessibleName("Connection test result")
        self.test_button = QPushButton("Test connection", self)
        self.test_button.clicked.connect(self.on_test_clicked)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        self.add_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.add_button.setText("Add")
        self.buttons.accepted.connect(self.on_add_clicked)
        self.buttons.rejected.connect(self.reject)
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Address", self.url)
        form.addRow("API key", self.key)
        form.addRow("Model ids", self.models)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.key_note)
        layout.addWidget(self.test_button)
        layout.addWidget(self.result)
        layout.addWidget(self.buttons)
        controller.remote_tested.connect(self.on_remote_tested)

    def typed_models(self) -> list[str]:
        return [m.strip() for m in self.models.text().replace(";", ",").split(",") if m.strip()]

    def _checked_url(self) -> str | None:
        try:
            return normalize_base_url(self.url.text())
        except RemoteError as exc:
            self.show_result(False, str(exc))
            return None

    def on_test_clicked(self) -> None:
        if self._checked_url() is None:
            return
        self.test_button.setEnabled(False)
        self.show_result(True, "Testing…")
        self.controller.test_remote(self.url.text(), self.key.text().strip() or None)

    def on_remote_tested(self, test: ConnectionTest) -> None:
        self.test_button.setEnabled(True)
        self.show_result(test.ok, test.message)

    def on_add_clicked(self) -> None:
        if self._checked_url() is None:
            return
        source = self.controller.add_remote(self.name.text(), self.url.text(),
                                            self.key.text().strip() or None, self.typed_models())
        if source is not None:
            self.source = source
            self.accept()

    def show_result(self, ok: bool, message: str) -> None:
        self.result.setText(message)
        self.result.setProperty("state", "ok" if ok else "error")
