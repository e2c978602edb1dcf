"""Side panel: the open chat's system prompt and sampling settings, built from app.settings."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.settings import PER_CHAT, Setting, defaults

POLICY_LABELS = {
    "stop": "Stop and tell me",
    "truncate_oldest": "Drop the oldest messages",
    "sliding_window": "Sliding window",
}

# generation_defaults keys (genai_config "search" / generation_config.json) -> our keys
MODEL_DEFAULT_KEYS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_new_tokens": "max_tokens",
    "max_tokens": "max_tokens",
}


def model_defaults(generation_defaults: dict) -> dict[str, Any]:
    """The per-chat values a model suggests, validated; unknown or invalid keys dropped."""
    result: dict[str, Any] = {}
    by_key = {s.key: s for s in PER_CHAT}
    for source, key in MODEL_DEFAULT_KEYS.items():
        if source in generation_defaults:
            try:
                result[key] = by_key[key].validate(generation_defaults[source])
            except (ValueError, TypeError):
                continue
    return result


class SettingsPanel(QWidget):
    """Per-chat settings editor.

    Signals:
        changed(dict values): the user changed a value; ``values`` holds every per-chat key.
    """

    changed = Signal(dict)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Chat settings")
        self._model_defaults: dict[str, Any] = {}
        self._updating = False
        self.editors: dict[str, QWidget] = {}
        form = QFormLayout()
        for setting in PER_CHAT:
            editor = self._make_editor(setting)
            editor.setAccessibleName(setting.label)
            editor.setAccessibleDescription(f"{setting.label} for this chat")
            editor.setObjectName(f"setting_{setting.key}")
            self.editors[setting.key] = editor
            label = QLabel(setting.label, self)
            label.setBuddy(editor)
            form.addRow(label, editor)
        self.reset_button = QPushButton("Reset to model defaults", self)
        self.reset_button.setAccessibleName("Reset to model defaults")
        self.reset_button.setAccessibleDescription(
            "Set this chat's sampling settings back to what the model suggests."
        )
        self.reset_button.clicked.connect(self.on_reset)
        layout = QVBoxLayout(self)
        title = QLabel("<b>Chat settings</b>", self)
        layout.addWidget(title)
        layout.addLayout(form)
        layout.addWidget(self.reset_button)
        layout.addStretch(1)
        self._prompt_timer = QTimer(self)
        self._prompt_timer.setSingleShot(True)
        self._prompt_timer.setInterval(400)
        self._prompt_timer.timeout.connect(self.on_edited)

    def _make_editor(self, setting: Setting) -> QWidget:
        if setting.key == "system_prompt":
            edit = QPlainTextEdit(self)
            edit.setPlaceholderText("Optional instructions for the model in this chat")
            edit.setMaximumHeight(120)
            edit.setTabChangesFocus(True)
            edit.textChanged.connect(self.on_prompt_changed)
            return edit
        if setting.choices:
            combo = QComboBox(self)
            for choice in setting.choices:
                combo.addItem(POLICY_LABELS.get(choice, choice), choice)
            combo.currentIndexChanged.connect(self.on_edited)
            return combo
        if setting.type is float:
            spin = QDoubleSpinBox(self)
            spin.setDecimals(2)
            spin.setSingleStep(0.05)
        else:
            spin = QSpinBox(self)
        spin.setRange(setting.minimum or 0, setting.maximum or 1_000_000)
        spin.valueChanged.connect(self.on_edited)
        return spin

    # values -------------------------------------------------------------------------------

    def values(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for setting in PER_CHAT:
            editor = self.editors[setting.key]
            if isinstance(editor, QPlainTextEdit):
                result[setting.key] = editor.toPlainText()
            elif isinstance(editor, QComboBox):
                result[setting.key] = editor.currentData()
            elif isinstance(editor, (QSpinBox, QDoubleSpinBox)):
                result[setting.key] = setting.type(editor.value())
        return result

    def set_values(self, values: dict[str, Any]) -> None:
        """Show ``values`` without emitting ``changed``."""
        self._updating = True
        try:
            for setting in PER_CHAT:
                value = values.get(setting.key, setting.default)
                editor = self.editors[setting.key]
                if isinstance(editor, QPlainTextEdit):
                    if editor.toPlainText() != value:
                        editor.setPlainText(value)
                elif isinstance(editor, QComboBox):
                    editor.setCurrentIndex(max(0, editor.findData(value)))
                elif isinstance(editor, (QSpinBox, QDoubleSpinBox)):
                    editor.setValue(value)
        finally:
            self._updating = False
        self._prompt_timer.stop()

    def set_model_defaults(self, generation_defaults: dict) -> None:
        self._model_defaults = model_defaults(generation_defaults)

    def defaults(self) -> dict[str, Any]:
        """App defaults with the model's suggestions on top (the system prompt is kept)."""
        base = {s.key: defaults()[s.key] for s in PER_CHAT}
        base.update(self._model_defaults)
        return base

    # slots --------------------------------------------------------------------------------

    def on_prompt_changed(self) -> None:
        if not self._updating:
            self._prompt_timer.start()

    def on_edited(self, *_: object) -> None:
        if not self._updating:
            self._prompt_timer.stop()
            self.changed.emit(self.values())

    def flush(self) -> None:
        """Emit a pending system-prompt edit now (before sending a message)."""
        if self._prompt_timer.isActive():
            self.on_edited()

    def on_reset(self) -> None:
        values = self.defaults()
        values["system_prompt"] = self.values()["system_prompt"]
        self.set_values(values)
        self.changed.emit(self.values())
