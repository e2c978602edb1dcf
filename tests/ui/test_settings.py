"""The declarative settings table: defaults, validation, persistence, per-chat overlay."""

from __future__ import annotations

import json

import pytest

from app.paths import settings_path
from app.settings import SETTINGS, Settings, chat_settings, defaults


def test_defaults_and_round_trip():
    s = Settings()
    assert s.as_dict() == defaults()
    s.set("temperature", 1.2)
    s.set("last_model", "/models/x")
    s.save()
    again = Settings()
    assert again.get("temperature") == 1.2 and again.get("last_model") == "/models/x"


def test_validation_rejects_bad_values():
    s = Settings()
    with pytest.raises(ValueError, match="at most"):
        s.set("temperature", 5)
    with pytest.raises(ValueError, match="one of"):
        s.set("context_policy", "explode")
    with pytest.raises(ValueError, match="number"):
        s.set("top_k", "ten")


def test_bad_file_values_fall_back_and_unknown_keys_survive():
    settings_path().write_text(json.dumps({"temperature": "hot", "future_key": 3, "top_k": 7}))
    s = Settings()
    assert s.get("temperature") == 0.7 and s.get("top_k") == 7
    s.save()
    assert json.loads(settings_path().read_text())["future_key"] == 3


def test_corrupt_file_gives_defaults():
    settings_path().write_text("{oops")
    assert Settings().as_dict() == defaults()


def test_chat_overlay_only_per_chat_keys():
    values = chat_settings(defaults(), {"temperature": 0.1, "last_model": "x", "top_p": 9})
    assert values["temperature"] == 0.1 and values["top_p"] == 1.0
    assert "last_model" not in values
    assert {s.key for s in SETTINGS if s.per_chat} == set(values)
