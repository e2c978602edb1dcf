"""The settings window (Ctrl+, / Preferences…), built from the settings table.

Every control comes from a row of ``app.settings.SETTINGS`` with a ``section``: the table
gives the label, the type, the range, the choices and the help line, so a new setting needs
no widget code. A few rows need more than a plain editor, and get it here: the models folder
(Browse and Move), the Hub token (kept in the OS keyring, never shown), the provider (only
what this machine can run is enabled, the others say why). Changes apply at once (theme,
text size, send key) and are saved when the window closes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.secrets import HUB_TOKEN, SERVER_API_KEY, SecretStore
from app.settings import SECTIONS, SETTINGS, Setting, Settings
from app.ui.model_controller import ModelController
from app.ui.server_controller import ServerController

PROVIDER_NAMES = {"cpu": "CPU", "dml": "DirectML", "cuda": "CUDA", "coreml": "CoreML"}


LABEL_PX = 240  # the widest a setting's label gets before it wraps


class PreferencesDialog(QDialog):
    """Signals: changed(str key, object value): a setting changed (already validated and
    stored in ``settings``; saved when the window closes)."""

    changed = Signal(str, object)

    def __init__(
        self,
        settings: Settings,
        models: ModelController,
        *,
        provider_reasons: dict[str, str | None] | None = None,
        server: ServerController | None = None,
        pages: list[tuple[str, Callable[[QWidget], QWidget]]] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setAccessibleName("Settings")
        self.settings = settings
        self.models = models
        self.provider_reasons = provider_reasons
        self.server = server
        self.editors: dict[str, QWidget] = {}
        self.tabs = QTabWidget(self)
        for section, title in SECTIONS:
            rows = [s for s in SETTINGS if s.section == section]
            if rows:
                self.tabs.addTab(self._page(section, rows), title)
        for title, make in pages or ():  # pages with their own widgets (Tools, Documents)
            self.tabs.addTab(make(self), title)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(buttons)
        self.resize(620, 520)
        models.connection_tested.connect(self.on_connection_tested)

    # pages ---------------------------------------------------------------------------------

    def _page(self, section: str, rows: list[Setting]) -> QWidget:
        page = QWidget(self)
        outer = QVBoxLayout(page)
        form = QFormLayout()
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        outer.addLayout(form)
        outer.addStretch(1)  # rows keep their natural height; the space goes below them
        for setting in rows:
            editor = self._editor(setting)
            self.editors[setting.key] = editor
            label = QLabel(setting.label + ":", page)
            label.setBuddy(editor)
            label.setWordWrap(True)  # a long label takes two lines, not the field's room
            label.setMinimumWidth(min(label.fontMetrics().horizontalAdvance(label.text()) + 2,
                                      LABEL_PX))
            label.setMaximumWidth(LABEL_PX)
            if setting.help:
                holder = QWidget(page)
                column = QVBoxLayout(holder)
                column.setContentsMargins(0, 0, 0, 0)
                column.addWidget(editor)
                # the note's height follows its width (never clipped): no Maximum policy
                note = QLabel(setting.help, holder)
                note.setWordWrap(True)
                note.setEnabled(False)  # the palette's secondary text colour
                column.addWidget(note)
                form.addRow(label, holder)
            else:
                form.addRow(label, editor)
            if setting.key == "models_folder":
                form.addRow("", self._folder_buttons(page))
            if setting.key == "hub_endpoint":
                form.addRow(QLabel("Hugging Face token:", page), self._token_row(page))
        if section == "hardware":
            self.provider_note = QLabel(self._provider_text(), page)
            self.provider_note.setWordWrap(True)
            self.provider_note.setTextInteractionFlags(
                Qt.TextInteractionFlag.TextSelectableByMouse
            )
            form.addRow("", self.provider_note)
        if section == "server":
            form.addRow(QLabel("API key:", page), self._server_key_row(page))
            self.server_status = QLabel(page)
            self.server_status.setWordWrap(True)
            self.server_status.setTextInteractionFlags(
                Qt.TextInteractionFlag.TextSelectableByMouse
            )
            self.copy_address = QPushButton("Copy address", page)
            self.copy_address.clicked.connect(self.on_copy_address)
            form.addRow("", self.server_status)
            form.addRow("", self.copy_address)
            if self.server is not None:
                self.server.started.connect(self.on_server_state)
                self.server.stopped.connect(self.on_server_state)
                self.server.failed.connect(self.on_server_failed)
                self.server.requests_changed.connect(self.on_server_requests)
            self.on_server_state()
        if section == "privacy":
            log = QPushButton("Show network activity…", page)
            log.clicked.connect(self.on_show_network_log)
            form.addRow("", log)
        return page

    def _editor(self, setting: Setting) -> QWidget:
        value = self.settings.get(setting.key)
        key = setting.key
        if setting.key == "provider":
            return self._provider_combo(value)
        if setting.type is bool:
            box = QCheckBox(self)
            box.setChecked(bool(value))
            box.setAccessibleName(setting.label)
            box.toggled.connect(lambda v, k=key: self._set(k, v))
            return box
        if setting.choices:
            combo = QComboBox(self)
            labels = setting.choice_labels or setting.choices
            for choice, label in zip(setting.choices, labels, strict=True):
                combo.addItem(label, choice)
            combo.setCurrentIndex(max(0, combo.findData(value)))
            combo.setAccessibleName(setting.label)
            combo.currentIndexChanged.connect(
                lambda _i, c=combo, k=key: self._set(k, c.currentData())
            )
            return combo
        if setting.type in (int, float):
            spin = QSpinBox(self) if setting.type is int else QDoubleSpinBox(self)
            if setting.minimum is not None:
                spin.setMinimum(setting.minimum)  # type: ignore[arg-type]
            if setting.maximum is not None:
                spin.setMaximum(setting.maximum)  # type: ignore[arg-type]
            spin.setValue(value)
            if key == "font_size":  # 0 follows the system: say so rather than "0"
                spin.setSpecialValueText("The system's size")
            spin.setAccessibleName(setting.label)
            spin.valueChanged.connect(lambda v, k=key: self._set(k, v))
            return spin
        if setting.key == "system_prompt":
            text = QPlainTextEdit(value, self)
            text.setMaximumHeight(90)
            text.setAccessibleName(setting.label)
            text.setTabChangesFocus(True)
            text.textChanged.connect(lambda t=text, k=key: self._set(k, t.toPlainText()))
            return text
        line = QLineEdit(str(value), self)
        line.setAccessibleName(setting.label)
        if setting.key == "models_folder":
            line.setPlaceholderText(str(self.models.library().root))
        elif setting.key == "hub_endpoint":
            line.setPlaceholderText("https://huggingface.co")
        line.editingFinished.connect(lambda ln=line, k=key: self._set(k, ln.text().strip()))
        return line

    def _provider_combo(self, value: str) -> QComboBox:
        combo = QComboBox(self)
        combo.setAccessibleName("Run models on")
        combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        combo.setMinimumContentsLength(24)
        reasons = self.provider_reasons
        if reasons is None:
            from app.machine import provider_choices

            reasons = self.provider_reasons = provider_choices()
        setting = next(s for s in SETTINGS if s.key == "provider")
        for choice, label in zip(setting.choices, setting.choice_labels, strict=True):
            reason = reasons.get(choice) if choice != "auto" else None
            combo.addItem(label if reason is None else f"{label} — {reason}", choice)
            item = combo.model().item(combo.count() - 1)
            if reason is not None:
                item.setEnabled(False)
                item.setToolTip(reason)
        combo.setCurrentIndex(max(0, combo.findData(value)))
        combo.currentIndexChanged.connect(lambda _i: self._set("provider", combo.currentData()))
        return combo

    def _folder_buttons(self, parent: QWidget) -> QWidget:
        row = QWidget(parent)
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        self.move_button = QPushButton("Move models to another folder…", row)
        self.move_button.setToolTip(
            "Copies each installed model to the new folder, then deletes the old copy."
        )
        self.move_button.clicked.connect(self.on_move_models)
        layout.addWidget(self.move_button)
        layout.addStretch(1)
        return row

    def _token_row(self, parent: QWidget) -> QWidget:
        row = QWidget(parent)
        column = QVBoxLayout(row)
        column.setContentsMargins(0, 0, 0, 0)
        line = QHBoxLayout()
        self.token_edit = QLineEdit(row)
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setAccessibleName("Hugging Face token")
        self.secrets = SecretStore(what="The token")
        saved = self.secrets.get(HUB_TOKEN) or self.settings.get("hub_token")
        self.token_edit.setPlaceholderText(
            "A token is saved (type a new one to replace it)" if saved else "hf_…"
        )
        self.token_edit.editingFinished.connect(self.on_token_entered)
        self.test_button = QPushButton("Test connection", row)
        self.test_button.clicked.connect(self.on_test_connection)
        line.addWidget(self.token_edit, 1)
        line.addWidget(self.test_button)
        column.addLayout(line)
        self.token_note = QLabel(row)
        self.token_note.setWordWrap(True)
        self.token_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.token_note)
        self.token_note.setText(self.secrets.describe())
        return row

    def show_token(self) -> None:
        """Open on the Models page with the Hugging Face token field focused."""
        token = getattr(self, "token_edit", None)  # absent only without a Models page
        if token is None:
            return
        for index in range(self.tabs.count()):
            if self.tabs.widget(index).isAncestorOf(token):
                self.tabs.setCurrentIndex(index)
        token.setFocus()

    def showEvent(self, event) -> None:
        """Opened again (the window keeps it): every control from the settings as they are
        now (Ctrl+0 may have reset the text size meanwhile), the server line too."""
        self.refresh_values()
        super().showEvent(event)

    def refresh_values(self) -> None:
        for key, editor in self.editors.items():
            value = self.settings.get(key)
            editor.blockSignals(True)
            try:
                if isinstance(editor, QCheckBox):
                    editor.setChecked(bool(value))
                elif isinstance(editor, QComboBox):
                    editor.setCurrentIndex(max(0, editor.findData(value)))
                elif isinstance(editor, QSpinBox | QDoubleSpinBox):
                    editor.setValue(value)
                elif isinstance(editor, QPlainTextEdit):
                    if editor.toPlainText() != value:
                        editor.setPlainText(str(value))
                elif isinstance(editor, QLineEdit):
                    editor.setText(str(value))
            finally:
                editor.blockSignals(False)
        if getattr(self, "server_status", None) is not None:
            self.on_server_state()

    def show_server(self) -> None:
        """Open on the Local server page."""
        status = getattr(self, "server_status", None)
        for index in range(self.tabs.count()):
            if status is not None and self.tabs.widget(index).isAncestorOf(status):
                self.tabs.setCurrentIndex(index)

    def _server_key_row(self, parent: QWidget) -> QWidget:
        self.server_key = QLineEdit(parent)
        self.server_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.server_key.setAccessibleName("Server API key")
        saved = SecretStore().get(SERVER_API_KEY)
        self.server_key.setPlaceholderText(
            "A key is saved (type a new one to replace it)" if saved
            else "Needed to accept other computers"
        )
        self.server_key.editingFinished.connect(self.on_server_key_entered)
        return self.server_key

    def on_server_key_entered(self) -> None:
        key = self.server_key.text().strip()
        if not key:
            return
        SecretStore(what="The API key").set(SERVER_API_KEY, key)
        self.server_key.clear()
        self.server_key.setPlaceholderText("A key is saved (type a new one to replace it)")
        self.changed.emit("server_lan", self.settings.get("server_lan"))  # restart with it

    def on_server_state(self, *_: object) -> None:
        server = self.server
        running = server is not None and server.running
        self.copy_address.setEnabled(running)
        if not running:
            self.server_status.setText("The server is off.")
            return
        model = server.model_id or "no model loaded yet"
        self.server_status.setText(f"Serving {model} at {server.address}")

    def on_server_failed(self, message: str) -> None:
        self.server_status.setText("✗ " + message)

    def on_server_requests(self, active: int, served: int) -> None:
        if self.server is not None and self.server.running:
            self.server_status.setText(
                f"Serving {self.server.model_id or 'no model loaded yet'} at "
                f"{self.server.address} · {active} running or waiting, {served} answered"
            )

    def on_copy_address(self) -> None:
        from PySide6.QtGui import QGuiApplication

        if self.server is not None and self.server.address:
            QGuiApplication.clipboard().setText(self.server.address)

    def _provider_text(self) -> str:
        """What the loaded model really runs on, and why the others were not used."""
        info = self.models.chat.model_info
        if info is None:
            return "No model is loaded."
        lines = [f"The model in use runs on {info.provider_summary}."]
        lines += [f"{PROVIDER_NAMES.get(p, p)}: {why}" for p, why in info.provider_reasons.items()]
        return "\n".join(lines)

    # changes -------------------------------------------------------------------------------

    def _set(self, key: str, value: Any) -> None:
        try:
            self.settings.set(key, value)
        except ValueError:
            return  # the editor's range keeps values valid; text fields may be mid-edit
        self.changed.emit(key, self.settings.get(key))

    def on_token_entered(self) -> None:
        token = self.token_edit.text().strip()
        if not token:
            return
        self.secrets.set(HUB_TOKEN, token)
        self.settings.set("hub_token", "")  # a token older versions kept there goes away
        self.token_note.setText(self.secrets.describe())
        self.token_edit.clear()
        self.token_edit.setPlaceholderText("A token is saved (type a new one to replace it)")
        self.changed.emit("hub_token", "")

    def on_test_connection(self) -> None:
        self.on_token_entered()
        self.settings.save()
        self.token_note.setText("Testing…")
        self.test_button.setEnabled(False)
        self.models.test_connection()

    def on_connection_tested(self, ok: bool, sentence: str) -> None:
        self.test_button.setEnabled(True)
        self.token_note.setText(("✓ " if ok else "✗ ") + sentence)

    def on_move_models(self) -> None:
        folder = self.ask_folder()
        if folder:
            self.models.move_models_folder(folder)

    def on_show_network_log(self) -> None:
        from app.ui.network_log import NetworkLogDialog

        NetworkLogDialog.show_for(self)

    def ask_folder(self) -> str:  # tests replace this
        return QFileDialog.getExistingDirectory(self, "Move models to")

    def closeEvent(self, event) -> None:
        self.settings.save()
        super().closeEvent(event)
