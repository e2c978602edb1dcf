"""The "Add a remote engine" dialog: name, base URL, optional API key (password echo),
model ids for servers that cannot list theirs, and "Test connection", which says exactly
what failed (DNS, refused, TLS, 401, no /v1/models, timeout). Plain http:// to another
machine is warned about, and neither tested nor added until "Send over plain http:// anyway"
is ticked; a user name and password in the address are said to go to the key store. It only
shows and asks the ``ModelController`` (``test_remote``, ``add_remote``); the network work
runs on the controller's remotes job thread."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
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
from app.remote.urls import is_cleartext_remote, normalize_base_url, split_login
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
        self.url_note = QLabel("", self)
        self.url_note.setWordWrap(True)
        self.url_note.setAccessibleName("About this address")
        self.url_note.setProperty("state", "error")
        self.cleartext_ok = QCheckBox("Send over plain http:// anyway (this network is "
                                      "trusted)", self)
        self.cleartext_ok.toggled.connect(self.on_url_changed)
        self.url.textChanged.connect(self.on_url_changed)
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
        layout.addWidget(self.url_note)
        layout.addWidget(self.cleartext_ok)
        layout.addWidget(self.key_note)
        layout.addWidget(self.test_button)
        layout.addWidget(self.result)
        layout.addWidget(self.buttons)
        controller.remote_tested.connect(self.on_remote_tested)
        self.on_url_changed()

    def typed_models(self) -> list[str]:
        return [m.strip() for m in self.models.text().replace(";", ",").split(",") if m.strip()]

    def cleartext(self) -> bool:
        """Whether the address is plain http:// to another machine."""
        try:
            return is_cleartext_remote(self.url.text())
        except RemoteError:
            return False

    def on_url_changed(self, *_args: object) -> None:
        """Warn about plain http:// to another machine (Test and Add wait for the tick) and
        say where a password in the address goes."""
        risky = self.cleartext()
        notes = []
        if risky:
            notes.append("This address is plain http:// to another machine: your chats and "
                         "the API key would cross the network unencrypted, readable by anyone "
                         "on the way. Use https:// if the server offers it.")
        if split_login(self.url.text())[1] is not None:
            notes.append("The user name and password in the address are kept with the API "
                         "keys, not in the address Hearth saves or shows.")
        self.url_note.setText(" ".join(notes))
        self.url_note.setVisible(bool(notes))
        self.cleartext_ok.setVisible(risky)
        allowed = not risky or self.cleartext_ok.isChecked()
        self.add_button.setEnabled(allowed)
        self.test_button.setEnabled(allowed)

    def _checked_url(self) -> str | None:
        try:
            url = normalize_base_url(self.url.text())
        except RemoteError as exc:
            self.show_result(False, str(exc))
            return None
        if self.cleartext() and not self.cleartext_ok.isChecked():
            self.show_result(False, "Tick “Send over plain http:// anyway” to use an "
                                    "unencrypted address on another machine.")
            return None
        return url

    def on_test_clicked(self) -> None:
        if self._checked_url() is None:
            return
        self.test_button.setEnabled(False)
        self.show_result(True, "Testing…")
        self.controller.test_remote(self.url.text(), self.key.text().strip() or None)

    def on_remote_tested(self, test: ConnectionTest) -> None:
        self.on_url_changed()  # enables Test again where the address allows it
        self.show_result(test.ok, test.message)

    def on_add_clicked(self) -> None:
        if self._checked_url() is None:
            return
        source = self.controller.add_remote(self.name.text(), self.url.text(),
                                            self.key.text().strip() or None, self.typed_models(),
                                            cleartext_ok=self.cleartext_ok.isChecked())
        if source is not None:
            self.source = source
            self.accept()

    def show_result(self, ok: bool, message: str) -> None:
        self.result.setText(message)
        self.result.setProperty("state", "ok" if ok else "error")
