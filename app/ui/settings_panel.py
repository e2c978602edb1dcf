"""Side panel: the open chat's system prompt and sampling settings, built from app.settings."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.engine.types import GenerationSettings
from app.settings import PER_CHAT, Setting, defaults

POLICY_LABELS = {
    "stop": "Stop and tell me",
    "truncate_oldest": "Drop the oldest messages",
    "sliding_window": "Sliding window",
}

#: per-chat setting key -> GenerationSettings field (sampling fields by their own name)
SETTING_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "max_tokens": "max_new_tokens",
    "context_policy": "context_policy",
    "thinking": "thinking",
    "speculation": "speculation",
}
#: why the Think switch is off, by the loaded model's ``ModelInfo.thinking_control``
THINK_UNAVAILABLE = "This model has no switch for thinking: its chat template does not offer one."
THINK_NO_MODEL = "Load a model to see whether it can switch its thinking on and off."
THINK_AVAILABLE = ("Whether the model thinks before it answers: on, off, or as the model "
                   "does by default.")
#: one line in a narrow panel; the tooltip (and the accessible description) says more
DRAFT_MISSING = "No draft installed: uses lookup."
DRAFT_MISSING_TIP = ("No draft model is installed for this model, so “Always: draft model” "
                     "guesses from the chat instead (as “Always: look up the chat”). The model "
                     "manager offers a draft where the catalog has one.")
_SUGGESTED = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens")


def model_chat_values(generation_defaults: dict) -> dict[str, Any]:
    """The per-chat values a model suggests, read through ``GenerationSettings.from_model``
    (so a greedy config shows temperature 0): only the keys the model's config sets to a
    valid value other than Hearth's default, and none outside the panel's ranges."""
    settings = GenerationSettings.from_model(generation_defaults)
    plain = GenerationSettings()
    named = {key for key, value in generation_defaults.items()
             if GenerationSettings.from_model({key: value}) != plain}  # valid, not a no-op
    if generation_defaults.get("do_sample") is False:
        named.add("temperature")
    by_key = {s.key: s for s in PER_CHAT}
    result: dict[str, Any] = {}
    for key in _SUGGESTED:
        field = SETTING_FIELDS[key]
        if field not in named:
            continue
        value = (settings.max_new_tokens if field == "max_new_tokens"
                 else getattr(settings.sampling, field))
        try:
            result[key] = by_key[key].validate(value)
        except ValueError:
            continue
    return result


def generation_settings(values: dict[str, Any], generation_defaults: dict, *,
                        seed: int | None = None) -> GenerationSettings:
    """The settings one reply runs with: the chat's values over the model's defaults."""
    overrides: dict[str, Any] = {field: values.get(key) for key, field in SETTING_FIELDS.items()}
    overrides["seed"] = seed
    return GenerationSettings.from_model(generation_defaults, overrides)


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
        # a narrow panel (an 800 px window) puts each field under its label
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        for setting in PER_CHAT:
            editor = self._make_editor(setting)
            editor.setAccessibleName(setting.label)
            editor.setAccessibleDescription(f"{setting.label} for this chat")
            editor.setObjectName(f"setting_{setting.key}")
            self.editors[setting.key] = editor
            if setting.help and setting.key != "system_prompt":
                editor.setToolTip(setting.help)
            label = QLabel(setting.label, self)
            label.setBuddy(editor)
            if isinstance(editor, QPlainTextEdit):  # a text box: the panel's width, below
                form.addRow(label)
                form.addRow(editor)
            else:
                form.addRow(label, editor)
        self.think_label = form.labelForField(self.editors["thinking"])
        self.set_thinking_control(None, loaded=False)
        self._draft: str | None = None
        self._model_loaded = False
        self.draft_note = QLabel(self)
        self.draft_note.setObjectName("draftNote")
        self.draft_note.setWordWrap(True)
        self.draft_note.setAccessibleName("Draft model")
        self.draft_note.setAccessibleDescription(DRAFT_MISSING_TIP)
        self.draft_note.hide()
        form.addRow(self.draft_note)
        self.editors["speculation"].currentIndexChanged.connect(self._update_draft_note)
        self.reset_button = QPushButton("Reset to model defaults", self)
        self.reset_button.setAccessibleName("Reset to model defaults")
        self.reset_button.setAccessibleDescription(
            "Set this chat's sampling settings back to what the model suggests."
        )
        self.reset_button.clicked.connect(self.on_reset)
        # the settings and the sections below them scroll: at 800x600 they are taller than
        # the window
        content = QWidget(self)
        content.setObjectName("chatSettingsContent")
        inner = QVBoxLayout(content)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.addLayout(form)
        inner.addWidget(self.reset_button)
        inner.addStretch(1)
        self._layout = inner
        self.scroll = QScrollArea(self)
        self.scroll.setObjectName("chatSettingsScroll")
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setWidget(content)
        self.content = content
        layout = QVBoxLayout(self)
        title = QLabel("<b>Chat settings</b>", self)
        layout.addWidget(title)
        layout.addWidget(self.scroll, 1)
        self._fit_width()
        self._prompt_timer = QTimer(self)
        self._prompt_timer.setSingleShot(True)
        self._prompt_timer.setInterval(400)
        self._prompt_timer.timeout.connect(self.on_edited)

    def add_section(self, widget: QWidget) -> None:
        """A section below the settings, e.g. the chat's document libraries (its owner
        keeps it up to date; ``changed`` does not carry it)."""
        self._layout.insertWidget(self._layout.count() - 1, widget)
        self._fit_width()

    def _fit_width(self) -> None:
        """The panel is never narrower than its content (it scrolls only up and down)."""
        bar = self.scroll.verticalScrollBar().sizeHint().width()
        self.scroll.setMinimumWidth(self.content.minimumSizeHint().width() + bar)

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
            labels = setting.choice_labels or tuple(POLICY_LABELS.get(c, c)
                                                    for c in setting.choices)
            for choice, label in zip(setting.choices, labels, strict=True):
                combo.addItem(label, choice)
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
        self._model_defaults = model_chat_values(generation_defaults)

    def set_thinking_control(self, control: str | None, *, loaded: bool = True) -> None:
        """Enable the Think switch for a model whose template has one (``control`` as in
        ``ModelInfo.thinking_control``); otherwise disable it, with a tooltip saying why."""
        editor = self.editors["thinking"]
        editor.setEnabled(control is not None)
        why = THINK_AVAILABLE if control is not None else (
            THINK_UNAVAILABLE if loaded else THINK_NO_MODEL)
        editor.setToolTip(why)
        editor.setAccessibleDescription(why)
        if self.think_label is not None:
            self.think_label.setEnabled(control is not None)
            self.think_label.setToolTip(why)

    def set_draft(self, draft: str | None, *, loaded: bool = True) -> None:
        """The loaded model's draft model (its name; None: it has none installed)."""
        self._draft, self._model_loaded = draft, loaded
        self._update_draft_note()

    def _update_draft_note(self, *_: object) -> None:
        """"Always: draft model" without a draft says what happens instead."""
        wants_draft = self.editors["speculation"].currentData() == "draft"
        show = wants_draft and self._model_loaded and self._draft is None
        if show:
            self.draft_note.setText(DRAFT_MISSING)
            self.draft_note.setToolTip(DRAFT_MISSING_TIP)
        self.draft_note.setVisible(show)

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

    def take_pending(self) -> dict[str, Any] | None:
        """The values with a system-prompt edit still waiting to be emitted (None: none);
        it is not emitted then: the caller stores it where it belongs (another chat may be
        opening)."""
        if not self._prompt_timer.isActive():
            return None
        self._prompt_timer.stop()
        return self.values()

    def flush(self) -> None:
        """Emit a pending system-prompt edit now (before sending a message)."""
        if self._prompt_timer.isActive():
            self.on_edited()

    def on_reset(self) -> None:
        values = self.defaults()
        values["system_prompt"] = self.values()["system_prompt"]
        self.set_values(values)
        self.changed.emit(self.values())
