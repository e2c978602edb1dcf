"""A message sent while the model loads waits for it; a long prompt shows how far it is read
and can be stopped (the real window and controller over the fake engine)."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import Qt

from app.ui.status_bar import WAITING_TEXT
from tests.bounds import AT_ONCE_S
from tests.ui.conftest import make_model_folder
from tests.workers.fake_engine import FakeLoader

pytestmark = [pytest.mark.qt_log_level_fail("WARNING")]


def _start_loading(app, path, seconds: float) -> None:
    app.loader.load_delay = seconds
    app.controller.load_model(path)
    assert app.controller.loading_path is not None


def test_message_sent_while_the_model_loads_is_queued_then_answered(make_app):
    app = make_app()
    _start_loading(app, make_model_folder("slow-model", "Slow"), 0.5)
    app.send("hello while loading", wait=False)
    # queued, saved, and the window says it waits
    assert app.controller.queued and app.controller.generating
    assert app.rows() == [("user", "hello while loading", "complete")]
    stored = app.history.messages(app.controller.current_id)
    assert [(m.role, m.content) for m in stored] == [("user", "hello while loading")]
    assert app.window.status.activity_label.text() == WAITING_TEXT
    assert app.window.status.activity_label.isVisibleTo(app.window)
    assert "Waiting for the model" in app.window.composer.edit.placeholderText()
    assert app.window.composer.button.text() == "Stop"
    assert "No model is loaded" not in app.window.banner.text()
    app.qtbot.waitUntil(lambda: app.controller.model_info is not None, timeout=5000)
    app.wait_idle()
    assert app.rows() == [("user", "hello while loading", "complete"),
                          ("assistant", "You said: hello while loading", "complete")]
    assert not app.controller.queued
    assert not app.window.status.activity_label.isVisibleTo(app.window)
    assert "Waiting" not in app.window.composer.edit.placeholderText()
    assert app.window.composer.button.text() == "Send"
    # the reply ran with the loaded model's settings
    assert app.loader.last.settings[-1].sampling.temperature == pytest.approx(0.6)


def test_load_failure_turns_the_queued_send_into_the_load_error(make_app):
    app = make_app()
    _start_loading(app, make_model_folder("broken-model"), 0.3)
    app.send("hello?", wait=False)
    assert app.controller.queued
    app.qtbot.waitUntil(lambda: app.controller.loading_path is None, timeout=5000)
    assert not app.controller.queued and not app.controller.generating
    assert "has no model.onnx" in app.window.banner.text()
    assert app.rows() == [("user", "hello?", "complete")]  # kept, unanswered, saying so
    stored = app.history.active_path(app.controller.current_id)[-1]
    assert stored.provenance["unsent"] == ("Not sent: the model did not load. Pick a "
                                           "model, then press Send now.")
    widget = app.window.chat_view.message_widget(0)
    assert widget.send_button.isVisibleTo(widget) and widget.status_note.text() == "not sent"
    assert app.window.composer.button.text() == "Send"
    assert not app.window.status.activity_label.isVisibleTo(app.window)
    assert app.loader.engines == []


def test_quit_during_a_load_does_not_wait_for_it(make_app):
    """Reading a model cannot be stopped part way and saves nothing: shutdown leaves it after
    LOAD_WAIT_ON_QUIT_MS instead of waiting the seconds it takes (launch.py then exits
    without destroying the thread)."""
    from app.ui.controller import LOAD_WAIT_ON_QUIT_MS

    app = make_app()
    _start_loading(app, make_model_folder("slow-model", "Slow"), 3.0)
    app.send("hello while loading", wait=False)
    app.qtbot.waitUntil(app.controller.worker.loading.is_set, timeout=2000)
    started = time.monotonic()
    assert app.controller.shutdown() is False
    waited = time.monotonic() - started
    assert app.controller.abandoned_load
    assert waited < LOAD_WAIT_ON_QUIT_MS / 1000 + 1.5, waited  # the load takes 3 s
    assert app.controller.shutdown() is False  # twice: no second wait
    assert time.monotonic() - started < LOAD_WAIT_ON_QUIT_MS / 1000 + 1.6
    stored = app.history.messages(app.controller.current_id)
    assert [(m.role, m.content) for m in stored] == [("user", "hello while loading")]
    assert stored[0].provenance == {  # the next start says why, and offers Send now
        "unsent": "Not sent: Hearth was closed while the model loaded. Press Send now to ask.",
        "resend": True}
    # the test's own clean-up: let the load end so that no running thread is destroyed
    assert app.controller.host.thread.wait(10_000)
    app.controller.worker.close_engine()


def test_quit_during_a_reply_waits_for_it_to_stop(app):
    """A reply is not a load: shutdown waits until the thread has stopped it."""
    app.loader.last.delay = 0.05
    app.send("tell me a long story " * 5, wait=False)
    app.qtbot.waitUntil(lambda: app.rows()[-1][1] != "", timeout=5000)
    assert app.controller.shutdown() is True
    assert not app.controller.abandoned_load
    assert not app.controller.host.thread.isRunning()
    assert app.history.messages(app.controller.current_id)[-1].status == "stopped"


def test_stop_while_queued_drops_the_send_and_keeps_the_message(make_app):
    app = make_app()
    _start_loading(app, make_model_folder("slow-model"), 0.3)
    app.send("never mind", wait=False)
    app.qtbot.mouseClick(app.window.composer.button, Qt.MouseButton.LeftButton)
    assert not app.controller.queued and not app.controller.generating
    app.qtbot.waitUntil(lambda: app.controller.model_info is not None, timeout=5000)
    app.qtbot.wait(100)
    assert app.rows() == [("user", "never mind", "complete")]
    assert app.loader.last.calls == []


def test_long_prompt_shows_progress_in_the_status_bar_and_stop_ends_it(make_app, model_dir):
    loader = FakeLoader(prefill_tokens=200_000, prefill_chunk=512, prefill_delay=0.01)
    app = make_app(loader)
    app.load(model_dir)
    label = app.window.status.activity_label
    seen: list[str] = []
    app.controller.prefill_progress.connect(lambda d, t: seen.append(label.text()))
    app.send("a very long message", wait=False)
    app.qtbot.waitUntil(lambda: len(seen) >= 3, timeout=5000)
    assert label.isVisibleTo(app.window)
    assert label.text().startswith("Reading your message… ")
    assert label.text().endswith(" / 200,000 tokens")
    stopped = time.perf_counter()
    app.qtbot.keyClick(app.window.composer.edit, Qt.Key.Key_Escape)
    app.wait_idle()
    assert time.perf_counter() - stopped < AT_ONCE_S
    assert not label.isVisibleTo(app.window)
    assert app.rows() == [("user", "a very long message", "complete"),
                          ("assistant", "", "stopped")]
    assert 0 < loader.last.prefill_done < 200_000


def test_progress_clears_when_the_reply_starts(make_app, model_dir):
    loader = FakeLoader(prefill_tokens=2048, prefill_chunk=256, prefill_delay=0.02)
    app = make_app(loader)
    app.load(model_dir)
    shown: list[tuple[int, int]] = []
    app.controller.prefill_progress.connect(lambda d, t: shown.append((d, t)))
    app.send("long enough")
    assert shown[0] == (0, 2048) and shown[-1] == (0, 0)
    assert all(0 <= d < t for d, t in shown[:-1])
    assert not app.window.status.activity_label.isVisibleTo(app.window)
    assert app.rows()[-1] == ("assistant", "You said: long enough", "complete")
