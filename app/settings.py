"""App settings: one declarative table drives defaults, validation, labels and the panel.

Stored as JSON at ``app.paths.settings_path()``. Unknown keys in the file are kept (a newer
Hearth may have written them); invalid values fall back to the default.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.fileio import write_json_atomic
from app.machine import PROVIDERS
from app.options import CACHE_BUDGET_MB, SPECULATION_MODES
from app.paths import settings_path


@dataclass(frozen=True)
class Setting:
    key: str
    type: type
    default: Any
    label: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    per_chat: bool = False  # also overridable per conversation (side panel)
    section: str = ""  # the settings window's tab ("general", "models", "hardware"); "" = hidden
    help: str = ""  # one sentence under the control in the settings window
    choice_labels: tuple[str, ...] = ()  # what the user sees for each of ``choices``

    def validate(self, value: Any) -> Any:
        """Return ``value`` coerced to this setting's type; raise ValueError if invalid."""
        if self.type is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{self.key} must be true or false")
            return value
        if self.type in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{self.key} must be a number")
            value = self.type(value)
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"{self.key} must be at least {self.minimum}")
            if self.maximum is not None and value > self.maximum:
                raise ValueError(f"{self.key} must be at most {self.maximum}")
            return value
        if self.type is str:
            if value is None:
                value = ""
            if not isinstance(value, str):
                raise ValueError(f"{self.key} must be text")
            if self.choices and value not in self.choices:
                raise ValueError(f"{self.key} must be one of {', '.join(self.choices)}")
            return value
        raise TypeError(f"unsupported setting type {self.type}")


CONTEXT_POLICIES = ("stop", "truncate_oldest", "sliding_window")
THINKING_CHOICES = ("default", "on", "off")
SPECULATION_CHOICES = SPECULATION_MODES  # the engine's modes (app/options.py)
THEMES = ("system", "light", "dark")
SEND_KEYS = ("enter", "ctrl+enter")
#: how a new chat is named after its first reply: by the loaded model (local or remote), by a
#: local model only (a remote one is not sent the chat again), or from the first message
CHAT_TITLES = ("model", "local", "off")
PROVIDER_CHOICES = ("auto", *PROVIDERS)  # labelled in this order below
SECTIONS = (("general", "General"), ("models", "Models"), ("hardware", "Hardware"),
            ("server", "Local server"), ("privacy", "Privacy"))

SETTINGS: tuple[Setting, ...] = (
    Setting("system_prompt", str, "", "Default system prompt", per_chat=True,
            section="general", help="New chats start with these instructions for the model."),
    Setting("temperature", float, 0.7, "Temperature", 0.0, 2.0, per_chat=True),
    Setting("top_p", float, 1.0, "Top-p", 0.0, 1.0, per_chat=True),
    Setting("top_k", int, 0, "Top-k (0 = off)", 0, 1000, per_chat=True),
    Setting("min_p", float, 0.0, "Min-p (0 = off)", 0.0, 1.0, per_chat=True),
    Setting("repetition_penalty", float, 1.0, "Repetition penalty (1 = off)", 0.5, 2.0,
            per_chat=True),
    Setting("presence_penalty", float, 0.0, "Presence penalty", -2.0, 2.0, per_chat=True),
    Setting("frequency_penalty", float, 0.0, "Frequency penalty", -2.0, 2.0, per_chat=True),
    Setting("max_tokens", int, 512, "Max new tokens", 1, 32768, per_chat=True),
    Setting(
        "context_policy",
        str,
        "stop",
        "When the context is full",
        choices=CONTEXT_POLICIES,
        per_chat=True,
    ),
    # the "Think" switch of reasoning models (GenerationSettings.thinking); the panel
    # disables it for a model whose template has no switch
    Setting("thinking", str, "default", "Think", choices=THINKING_CHOICES,
            choice_labels=("Model default", "On", "Off"), per_chat=True),
    Setting("speculation", str, "auto", "Speed up replies", choices=SPECULATION_CHOICES,
            choice_labels=("Automatic", "Off", "Always: look up the chat",
                           "Always: draft model"), per_chat=True,
            help="Guesses the next words from the chat (or a small draft model) and checks "
                 "them in one step; the text is the same. Automatic does it where it pays."),
    Setting("theme", str, "system", "Theme", choices=THEMES,
            choice_labels=("Follow the system", "Light", "Dark"), section="general"),
    Setting("font_size", int, 0, "Chat text size (points, 0 = the system's)", 0, 48,
            section="general", help="Ctrl + and Ctrl − change it in the chat, Ctrl 0 resets."),
    Setting("send_key", str, "enter", "Send a message with", choices=SEND_KEYS,
            choice_labels=("Enter (Shift+Enter for a new line)",
                           "Ctrl+Enter (Enter for a new line)"), section="general"),
    Setting("chat_titles", str, "model", "Name new chats", choices=CHAT_TITLES,
            choice_labels=("With the model, after the first reply",
                           "With the model, unless it is remote",
                           "From the first message"), section="general",
            help="The model writes a short title once it has answered; a title you "
                 "changed is kept. A remote model is sent the first exchange once more."),
    Setting("restore_last_chat", bool, True, "Reopen the last chat on launch", section="general"),
    Setting("models_folder", str, "", "Models folder (empty = the default)", section="models"),
    Setting("hub_endpoint", str, "", "Model download server", section="models",
            help="A Hugging Face mirror's address; empty means huggingface.co."),
    # Kept only to read tokens saved by older versions: the token lives in the OS keyring.
    Setting("hub_token", str, "", "Hugging Face access token (when no keyring is available)"),
    Setting("kv_snapshot_budget_mb", int, CACHE_BUDGET_MB,
            "Memory for keeping other chats' caches (MB)", 0, 65536, section="models",
            help="Switching back to a recent chat is instant while its cache fits here."),
    Setting("provider", str, "auto", "Run models on", choices=PROVIDER_CHOICES,
            choice_labels=("Automatic", "CPU", "DirectML (Windows GPU)", "CUDA (NVIDIA GPU)",
                           "CoreML (Apple)"), section="hardware",
            help="Takes effect when a model is loaded."),
    Setting("cpu_threads", int, 0, "CPU threads (0 = automatic)", 0, 256, section="hardware",
            help="Takes effect when a model is loaded."),
    Setting("exact_replies", bool, True, "Same question, same answer (exact replies)",
            section="hardware",
            help="Off: 4-bit models read long prompts on faster kernels that round otherwise, "
                 "and on CPUs whose one-row kernels round otherwise (AVX2) reply tokens run "
                 "as one row instead of two, so a reply can change with what the cache held. "
                 "Takes effect when a model is loaded."),
    Setting("offline", bool, False, "Offline mode (block every network connection)",
            section="privacy",
            help="Downloads, Hub search and remote engines are refused; chats work as usual."),
    Setting("server_enabled", bool, False,
            "Serve the loaded model to other apps (OpenAI-compatible API)", section="server",
            help="Editors, agents and scripts on this computer can then use it at the address "
                 "below; the chat window and the server take turns on the model."),
    Setting("server_port", int, 8080, "Port", 1, 65535, section="server"),
    Setting("server_lan", bool, False, "Also accept other computers on this network",
            section="server",
            help="Needs an API key (below); clients send it as 'Authorization: Bearer KEY'."),
    Setting("server_allowed_hosts", str, "", "Other names of this computer", section="server",
            help="Host names (separated by spaces) that local clients may use besides "
                 "localhost and 127.0.0.1; requests addressed to any other name are refused."),
    # Window state (no control): restored on launch.
    Setting("last_model", str, "", "Last used model folder"),
    Setting("last_chat", str, "", "The chat open when Hearth was closed"),
    Setting("window_geometry", str, "", "Window position and size"),
    Setting("splitter_sizes", str, "", "Sidebar and panel widths"),
    Setting("show_side_panel", bool, False, "Show the chat settings panel"),
    # The folder each kind of file dialog opened in last ("" = Documents / Downloads).
    Setting("folder_export", str, "", "Folder of the last chat export"),
    Setting("folder_import", str, "", "Folder of the last chat import"),
    Setting("folder_gguf", str, "", "Folder of the last GGUF import"),
    Setting("folder_model", str, "", "Folder of the last model folder picked"),
)

BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
PER_CHAT: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.per_chat)


def defaults() -> dict[str, Any]:
    return {s.key: s.default for s in SETTINGS}


class Settings:
    """The user's settings, read from and written to one JSON file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or settings_path()
        self._values = defaults()
        self._extra: dict[str, Any] = {}
        self.load()

    def load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(data, dict):
            return
        for key, value in data.items():
            setting = BY_KEY.get(key)
            if setting is None:
                self._extra[key] = value
                continue
            try:
                self._values[key] = setting.validate(value)
            except ValueError:
                self._values[key] = setting.default

    def save(self) -> None:
        """Write atomically (temp file, fsync, rename) so a crash never leaves half a file."""
        write_json_atomic(self.path, {**self._extra, **self._values}, ensure_ascii=False)

    def get(self, key: str) -> Any:
        return self._values[key]

    def set(self, key: str, value: Any) -> None:
        self._values[key] = BY_KEY[key].validate(value)

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)


def chat_settings(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Per-chat values: ``overrides`` (validated) on top of ``base`` for PER_CHAT keys."""
    result = {s.key: base.get(s.key, s.default) for s in PER_CHAT}
    for key, value in overrides.items():
        setting = BY_KEY.get(key)
        if setting is None or not setting.per_chat:
            continue
        with contextlib.suppress(ValueError):
            result[key] = setting.validate(value)
    return result
