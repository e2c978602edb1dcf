"""The status bar's speculation figures after a reply (acceptance, model steps saved, what
they mean on hover), and nothing when the reply did not speculate; the same counts in the
reply's info."""

from __future__ import annotations

import pytest

from app.engine.types import GenerationStats
from app.ui.status_bar import ChatStatusBar

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
    bar.show()
    assert bar.speculation_label.isHidden()
    bar.set_stats(GenerationStats(**SPECULATED, decode_tok_s=30.0))
    label = bar.speculation_label
    assert label.isVisible()
    assert label.text() == "Speculation: 75% accepted · 1.6× fewer steps"
    tip = label.toolTip()
    assert "prompt lookup" in tip and "30 of 40 guessed tokens were accepted" in tip
    assert "25 model steps instead of 40" in tip and "not measured time" in tip
    assert label.accessibleDescription() == tip
    bar.set_stats(GenerationStats(decode_tok_s=30.0, generated_tokens=12, target_steps=11))
    assert label.isHidden() and label.text() == ""  # no speculation ran: nothing shown
    bar.set_stats(GenerationStats(speculation="draft", proposed=0, target_steps=5))
    assert label.isHidden()  # speculation switched itself off before guessing


def test_the_chat_shows_speculation_after_a_reply_and_hides_it_after_a_plain_one(app, loader):
    bar = app.window.status
    loader.last.stats_extra = dict(SPECULATED, speculation="draft")
    app.send("quote me")
    assert bar.speculation_label.isVisible()
    assert bar.speculation_label.text() == "Speculation: 75% accepted · 1.6× fewer steps"
    assert "a draft model" in bar.speculation_label.toolTip()
    info = app.window.chat_view.message_widget(1).action_buttons["info"]
    assert "speculation draft: 30 of 40 guesses accepted, 1.6× fewer steps" in info.toolTip()
    loader.last.stats_extra = {}
    app.send("plain")
    assert bar.speculation_label.isHidden()
    plain = app.window.chat_view.message_widget(3).action_buttons["info"]
    assert "tok/s" in plain.toolTip() and "speculation" not in plain.toolTip()
    # the first reply keeps its own figures (they are stored with it)
    assert "30 of 40 guesses accepted" in info.toolTip()
