"""The chat settings panel and the settings the controller sends: model defaults arrive
through GenerationSettings.from_model (a greedy config is greedy in the window too), and
every sampling control reaches the engine."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import Qt

from app.engine.types import GenerationSettings
from app.ui.settings_panel import generation_settings, model_chat_values
from tests.workers.fake_engine import FakeLoader

GREEDY_CONFIG = {"do_sample": False, "temperature": 0.9, "top_p": 0.8}


@pytest.fixture
def greedy_app(make_app, model_dir):
    app = make_app(FakeLoader(generation_defaults=GREEDY_CONFIG))
    app.load(model_dir)
    return app


def test_a_greedy_config_shows_temperature_zero_in_a_new_chat_and_after_reset(greedy_app):
    panel = greedy_app.window.settings_panel
    assert greedy_app.controller.current_id is None
    assert panel.values()["temperature"] == 0.0
    assert panel.values()["top_p"] == pytest.approx(0.8)
    panel.editors["temperature"].setValue(1.1)
    greedy_app.qtbot.mouseClick(panel.reset_button, Qt.MouseButton.LeftButton)
    assert panel.values()["temperature"] == 0.0


def test_a_greedy_config_makes_the_controllers_request_greedy(greedy_app):
    greedy_app.send("hi")
    sent = greedy_app.loader.last.settings[-1]
    assert sent.sampling.greedy and sent.sampling.top_p == pytest.approx(0.8)
    assert sent == GenerationSettings.from_model(
        GREEDY_CONFIG, {"seed": sent.sampling.seed, "max_new_tokens": 512,
                        "context_policy": "stop"})


def test_the_user_can_still_sample_a_greedy_model(greedy_app):
    greedy_app.window.settings_panel.editors["temperature"].setValue(0.5)
    greedy_app.send("hi")
    assert greedy_app.loader.last.settings[-1].sampling.temperature == pytest.approx(0.5)


def test_min_p_and_penalties_set_in_the_panel_reach_the_engine(app, loader):
    panel = app.window.settings_panel
    panel.editors["min_p"].setValue(0.05)
    panel.editors["repetition_penalty"].setValue(1.15)
    panel.editors["presence_penalty"].setValue(0.4)
    panel.editors["frequency_penalty"].setValue(-0.3)
    app.send("hi")
    sampling = loader.last.settings[-1].sampling
    assert sampling.min_p == pytest.approx(0.05)
    assert sampling.repetition_penalty == pytest.approx(1.15)
    assert sampling.presence_penalty == pytest.approx(0.4)
    assert sampling.frequency_penalty == pytest.approx(-0.3)
    # ... and stay with the chat: the next reply runs with them too.
    app.send("again")
    again = loader.last.settings[-1].sampling
    assert again == dataclasses.replace(sampling, seed=again.seed)


def test_model_chat_values_names_only_what_the_model_suggests():
    assert model_chat_values({}) == {}
    assert model_chat_values({"do_sample": False}) == {"temperature": 0.0}
    assert model_chat_values({"top_k": 50, "max_new_tokens": 100, "min_p": 5}) == {
        "top_k": 50, "max_tokens": 100}  # min_p 5 is invalid: left out


def test_stored_chat_values_win_and_fill_from_the_model():
    values = {"temperature": 0.4, "max_tokens": 7, "context_policy": "truncate_oldest"}
    settings = generation_settings(values, {"do_sample": False, "repetition_penalty": 1.2},
                                   seed=11)
    assert settings.sampling.temperature == pytest.approx(0.4)
    assert settings.sampling.repetition_penalty == pytest.approx(1.2)  # an older chat
    assert (settings.max_new_tokens, settings.context_policy) == (7, "truncate_oldest")
    assert settings.sampling.seed == 11


@pytest.fixture
def thinking_app(make_app, model_dir):
    app = make_app(FakeLoader(thinking_control="enable_thinking", think=["Hmm."]))
    app.load(model_dir)
    return app


def test_the_think_switch_reaches_the_engine_and_stays_with_the_chat(thinking_app):
    app = thinking_app
    panel = app.window.settings_panel
    think = panel.editors["thinking"]
    assert think.isEnabled() and panel.think_label.isEnabled()
    assert [think.itemText(i) for i in range(think.count())] == ["Model default", "On", "Off"]
    assert panel.values()["thinking"] == "default"
    app.send("hi")
    assert app.loader.last.settings[-1].thinking == "default"
    think.setCurrentIndex(think.findData("off"))
    app.send("again")
    assert app.loader.last.settings[-1].thinking == "off"
    stored = app.history.get_conversation(app.controller.current_id)
    assert stored.settings["thinking"] == "off"
    # another chat starts from the model's default; reopening the first shows "Off" again
    first = app.controller.current_id
    app.controller.new_conversation()
    assert panel.values()["thinking"] == "default"
    app.controller.open_conversation(first)
    assert panel.values()["thinking"] == "off"


def test_the_think_switch_is_disabled_with_a_reason_for_a_model_without_one(make_app,
                                                                            model_dir):
    app = make_app()
    think = app.window.settings_panel.editors["thinking"]
    assert not think.isEnabled() and "Load a model" in think.toolTip()
    app.load(model_dir)  # the fake's template has no switch
    assert not think.isEnabled()
    assert think.toolTip() == think.accessibleDescription()
    assert "no switch for thinking" in think.toolTip()
    assert not app.window.settings_panel.think_label.isEnabled()


def test_thinking_goes_through_generation_settings():
    assert generation_settings({"thinking": "on"}, {}).thinking == "on"
    assert generation_settings({}, {}).thinking == "default"


def test_the_speculation_choice_reaches_the_engine_and_stays_with_the_chat(app, loader):
    """The chat setting that forces speculation (the issue's "a chat setting and
    --speculation off|lookup|draft"): Automatic by default, each choice sent with the reply."""
    panel = app.window.settings_panel
    combo = panel.editors["speculation"]
    assert combo.currentData() == "auto" and combo.itemText(combo.currentIndex()) == "Automatic"
    assert "same" in combo.toolTip()
    app.send("hi")
    assert loader.last.settings[-1].speculation == "auto"
    for mode in ("off", "lookup", "draft"):
        combo.setCurrentIndex(combo.findData(mode))
        app.send(f"again with {mode}")
        assert loader.last.settings[-1].speculation == mode
    stored = app.history.get_conversation(app.controller.current_id)
    assert stored.settings["speculation"] == "draft"
    app.controller.new_conversation()
    assert panel.values()["speculation"] == "auto"
