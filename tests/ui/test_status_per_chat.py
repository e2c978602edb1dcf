"""The status bar shows the open chat's own figures (issue 28 item 4): after a switch, a new
chat or a restart, never the previous chat's tok/s, TTFT or context."""

from __future__ import annotations

import pytest

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def figures(app) -> tuple[str, str, str]:
    status = app.window.status
    return status.speed_label.text(), status.ttft_label.text(), status.context_label.text()


def test_figures_follow_the_open_chat_through_switch_new_chat_and_restart(make_app, model_dir):
    app = make_app()
    app.load(model_dir)
    app.send("Hello there, a first chat")
    first_id = app.controller.current_id
    first = figures(app)
    assert first[0].endswith("tok/s") and first[1].startswith("TTFT")
    used = app.controller.last_stats.context_used
    assert used > 0 and first[2].startswith(f"Context {used:,} / ")

    app.window.new_action.trigger()  # File ▸ New chat
    speed, ttft, context = figures(app)
    assert (speed, ttft) == ("", "")
    assert context.startswith("Context 0 / ")

    app.send("A second chat, with a much longer first message than the first one had")
    second = figures(app)
    assert second[2] != first[2]
    app.controller.open_conversation(first_id)  # back to the first chat
    assert figures(app) == (first[0], first[1], first[2])
    app.close()

    again = make_app()  # a restart: the first chat reopens, the model loads after it
    assert again.controller.current_id == first_id
    again.load(model_dir)
    assert figures(again) == (first[0], first[1], first[2])
