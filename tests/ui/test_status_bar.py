"""The status bar's speculation figures after a reply (acceptance, model steps saved, what
they mean on hover), and nothing when the reply did not speculate; the same counts in the
reply's info."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.engine.types import GenerationStats
from app.ui.status_bar import ChatStatusBar
from tests.ui.conftest import make_model_folder

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

# 30 of 40 guesses kept; 41 tokens in 25 model steps where a plain reply takes 40
SPECULATED = {"speculation": "lookup", "proposed": 40, "accepted": 30, "target_steps": 25,
              "generated_tokens": 41}


def test_a_reply_that_speculated_shows_acceptance_and_steps_saved(qtbot):
    bar = ChatStatusBar()
    qtbot.addWidget(bar)
    bar.resize(1400, 30)
    bar.show()
    assert bar.speculation_label.isHidden()
    bar.set_stats(GenerationStats(**SPECULATED, decode_tok_s=30.0, context_max=8192))
    label = bar.speculation_label
    assert label.isVisible()
    assert label.text() == "Guessed ahead: 75% of guesses right · 1.6× fewer model passes"
    tip = label.toolTip()
    assert tip.startswith("Guessed ahead: 75% of guesses right · 1.6× fewer model passes\n")
    assert "prompt lookup" in tip and "30 of 40 guessed tokens were right" in tip
    assert "25 model passes instead of 40" in tip and "not measured time" in tip
    assert label.accessibleDescription() == tip
    bar.resize(800, 30)  # a narrow window keeps room for messages: the short form
    qtbot.waitUntil(lambda: label.text() == "Guesses 75% right")
    assert label.isVisible() and label.toolTip() == tip
    bar.set_prefill(100, 900)  # a new reply is being read: the last one's figures step aside
    assert label.isHidden() and bar.activity_label.isVisible()
    bar.set_prefill(0, 0)
    assert label.isVisible()
    bar.showMessage("Copied the reply")  # a message takes the room while it shows
    assert label.isHidden()
    bar.clearMessage()
    assert label.isVisible()
    bar.resize(1400, 30)
    qtbot.waitUntil(lambda: label.text().startswith("Guessed ahead: "))
    bar.set_stats(GenerationStats(decode_tok_s=30.0, generated_tokens=12, target_steps=11))
    assert label.isHidden() and label.text() == ""  # no speculation ran: nothing shown
    bar.set_stats(GenerationStats(speculation="draft", proposed=0, target_steps=5))
    assert label.isHidden()  # speculation switched itself off before guessing


def test_the_chat_shows_speculation_after_a_reply_and_hides_it_after_a_plain_one(app, loader):
    bar = app.window.status
    app.window.resize(1400, 700)
    loader.last.stats_extra = dict(SPECULATED, speculation="draft")
    app.send("quote me")
    assert bar.currentMessage().startswith("Model loaded in ")  # shown for 4 s after the load
    assert bar.speculation_label.isHidden()  # it has the room meanwhile
    bar.clearMessage()
    assert bar.speculation_label.isVisible()
    assert bar.speculation_label.text() == (
        "Guessed ahead: 75% of guesses right · 1.6× fewer model passes")
    assert "a draft model" in bar.speculation_label.toolTip()
    info = app.window.chat_view.message_widget(1).action_buttons["info"]
    assert ("guessed ahead with a draft model: 30 of 40 guesses right, 1.6× fewer model passes"
            in info.toolTip())
    loader.last.stats_extra = {}
    app.send("plain")
    assert bar.speculation_label.isHidden()
    plain = app.window.chat_view.message_widget(3).action_buttons["info"]
    assert "tok/s" in plain.toolTip() and "guessed" not in plain.toolTip()
    # the first reply keeps its own figures (they are stored with it)
    assert "30 of 40 guesses right" in info.toolTip()
    loader.last.stats_extra = dict(SPECULATED)
    app.send("again")
    assert bar.speculation_label.isVisible()
    app.load(app.loader.last.spec.root)  # a model (re)loaded: the figures were the old one's
    bar.clearMessage()
    assert bar.speculation_label.isHidden()


def test_the_provider_tip_says_how_long_prompts_are_read(qtbot):
    from app.workers.generation_worker import ModelInfo

    bar = ChatStatusBar()
    qtbot.addWidget(bar)
    info = ModelInfo(path="/m", name="m", provider="cpu", provider_summary="CPU",
                     provider_reasons={"cuda": "no NVIDIA GPU"}, context_length=2048,
                     generation_defaults={}, load_ms=500.0,
                     prompt_kernels="Prompts of 64+ tokens run on fp32 kernels (a second "
                                    "session, 179.8 MB).")
    bar.set_model(info, "m")
    tip = bar.provider_label.toolTip()
    assert tip == ("Running on CPU.\nPrompts of 64+ tokens run on fp32 kernels (a second "
                   "session, 179.8 MB).\nNot used:\ncuda: no NVIDIA GPU")
    assert bar.provider_label.accessibleDescription() == tip
    bar.set_model(replace(info, prompt_kernels=None), "m")
    assert bar.provider_label.toolTip() == "Running on CPU.\nNot used:\ncuda: no NVIDIA GPU"
    bar.set_model(replace(info, prompt_kernels=None, steps_note="Exact replies: two rows."), "m")
    assert bar.provider_label.toolTip() == ("Running on CPU.\nExact replies: two rows.\n"
                                            "Not used:\ncuda: no NVIDIA GPU")


def test_at_800_px_the_load_message_fits_beside_a_long_model_name(make_app):
    long_name = "Qwen3 30B A3B Instruct 2507 Thinking (int4, 32k context)"
    app = make_app()
    app.window.resize(800, 600)
    app.load(make_model_folder("long-model", long_name))
    app.send("hello")  # speed, TTFT and context join the bar
    bar = app.window.status
    message = bar.currentMessage()
    assert message.startswith("Model loaded in ")
    label = bar.model_label
    assert label.text().endswith("…") and long_name.startswith(label.text()[:-1])
    assert label.toolTip().splitlines()[0] == long_name
    permanent = [w for w in (label, bar.provider_label, bar.speed_label, bar.ttft_label,
                             bar.context_label) if w.isVisible() and w.text()]
    assert len(permanent) == 5
    room = min(w.geometry().left() for w in permanent)
    assert bar.fontMetrics().horizontalAdvance(message) + 8 <= room


def test_a_reply_that_could_not_guess_ahead_says_why(qtbot):
    from app.engine.generation import SPECULATION_OFF_LOGPROBS
    from app.ui.speculation_text import off_reason

    bar = ChatStatusBar()
    qtbot.addWidget(bar)
    bar.resize(1400, 30)
    bar.show()
    bar.set_stats(GenerationStats(decode_tok_s=30.0, generated_tokens=12, target_steps=11,
                                  speculation_note=SPECULATION_OFF_LOGPROBS))
    label = bar.speculation_label
    assert label.isVisible()
    assert label.text() == "Not guessing ahead: log-probabilities were asked for"
    assert "one token per model pass" in label.toolTip()
    assert label.accessibleDescription() == label.toolTip()
    bar.set_stats(GenerationStats(**SPECULATED))  # the next reply guessed: its figures
    assert label.text().startswith("Guessed ahead: ")
    bar.set_stats(GenerationStats(generated_tokens=12, target_steps=11))
    assert label.isHidden()  # off by the settings: nothing to explain
    # as stored with a reply (its info line reads it)
    assert off_reason({"speculation_note": SPECULATION_OFF_LOGPROBS}) == (
        "Not guessing ahead: log-probabilities were asked for")
    assert off_reason({"speculation_note": 3}) is None and off_reason(None) is None


def test_the_reply_that_could_not_guess_ahead_says_why_in_its_info(app, loader):
    from app.engine.generation import SPECULATION_OFF_LOGPROBS

    app.window.resize(1400, 700)
    loader.last.stats_extra = {"speculation_note": SPECULATION_OFF_LOGPROBS}
    app.send("with log-probabilities")
    info = app.window.chat_view.message_widget(1).action_buttons["info"]
    assert "not guessing ahead: log-probabilities were asked for" in info.toolTip()
    app.window.status.clearMessage()
    assert app.window.status.speculation_label.text() == (
        "Not guessing ahead: log-probabilities were asked for")
