"""A reasoning model's thinking in the real window (fake engine): streamed into a block above
the answer, folded once the answer starts, stored beside the answer, per variant, and
reachable by mouse, keyboard and screen reader."""

from __future__ import annotations

import itertools

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAccessible

from tests.ui.conftest import App
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

THOUGHT = ["The user", " says hi.", " I will", " greet back."]


@pytest.fixture
def thinking_loader() -> FakeLoader:
    return FakeLoader(think=THOUGHT, thinking_control="enable_thinking")


@pytest.fixture
def tapp(make_app, model_dir, thinking_loader) -> App:
    app = make_app(thinking_loader)
    app.load(model_dir)
    return app


def _reply(app: App, row: int = 1):
    app.window.chat_view.flush()
    return app.window.chat_view.message_widget(row)


def test_thinking_streams_into_an_open_block_then_folds_when_the_answer_starts(tapp):
    engine = tapp.loader.last
    engine.hold_after = 2  # two thoughts out, then wait
    tapp.send("hi", wait=False)
    tapp.qtbot.waitUntil(engine.held.is_set, timeout=5000)
    tapp.qtbot.waitUntil(lambda: tapp.controller.chat_model.message(1).reasoning
                         == "The user says hi.")
    widget = _reply(tapp)
    block = widget.thinking
    assert block.isVisible() and block.thinking and block.expanded
    assert block.toggle.text().startswith("Thinking…")
    assert block.body.toPlainText() == "The user says hi."
    assert not widget.typing.isVisible()  # the block shows the progress instead
    assert not widget.body.isVisible()  # no answer yet, and the thoughts are not in it

    engine.release.set()
    tapp.wait_idle()
    widget = _reply(tapp)
    block = widget.thinking
    assert block.isVisible() and not block.thinking and not block.expanded
    assert not block.frame.isVisible()
    assert block.toggle.text().startswith("Thought for ")
    assert widget.body.toPlainText().strip() == "You said: hi"
    assert "greet back" not in widget.body.toPlainText()

    stored = tapp.history.active_path(tapp.controller.current_id)[1]
    assert (stored.content, stored.reasoning, stored.status) == (
        "You said: hi", "".join(THOUGHT), "complete")
    assert stored.reasoning_ms > 0
    assert stored.provenance["stats"]["reasoning_tokens"] == len(THOUGHT)


def test_the_block_opens_by_click_and_keyboard_and_tells_screen_readers(tapp):
    tapp.send("hi")
    block = _reply(tapp).thinking
    toggle = block.toggle
    assert toggle.accessibleName().startswith("Reasoning: Thought for ")
    assert toggle.accessibleDescription().startswith("Collapsed")
    a11y = QAccessible.queryAccessibleInterface(toggle)
    assert a11y.state().checkable and not a11y.state().checked

    tapp.qtbot.mouseClick(toggle, Qt.MouseButton.LeftButton)
    assert block.expanded and block.frame.isVisible()
    assert block.body.toPlainText() == "".join(THOUGHT)
    assert toggle.accessibleDescription().startswith("Expanded")
    assert QAccessible.queryAccessibleInterface(toggle).state().checked
    assert "The user says hi. I will greet back." in tapp.window.chat_view.toPlainText()

    toggle.setFocus()
    tapp.qtbot.keyClick(toggle, Qt.Key.Key_Space)
    assert not block.expanded and not block.frame.isVisible()
    assert toggle.accessibleDescription().startswith("Collapsed")
    tapp.qtbot.keyClick(toggle, Qt.Key.Key_Return)
    assert block.expanded


def test_reopening_the_chat_shows_the_block_folded(tapp, make_app, thinking_loader):
    tapp.send("hi")
    conv = tapp.controller.current_id
    tapp.close()
    again = make_app(thinking_loader)
    again.controller.open_conversation(conv)
    widget = _reply(again)
    block = widget.thinking
    assert block.isVisible() and not block.expanded and not block.frame.isVisible()
    assert block.toggle.text().startswith("Thought for ")
    assert widget.body.toPlainText().strip() == "You said: hi"
    tapp.qtbot.mouseClick(block.toggle, Qt.MouseButton.LeftButton)
    assert block.body.toPlainText() == "".join(THOUGHT)


def test_regenerate_keeps_each_variants_own_thinking(tapp):
    count = itertools.count(1)
    tapp.loader.last.think = lambda messages: [f"Thought number {next(count)}."]
    tapp.send("hi")
    tapp.controller.regenerate(1)
    tapp.wait_idle()
    path = tapp.history.active_path(tapp.controller.current_id)
    assert path[1].reasoning == "Thought number 2." and path[1].variant_count == 2
    assert tapp.controller.switch_variant(1, 0)
    widget = _reply(tapp)
    widget.thinking.set_expanded(True)
    assert widget.thinking.body.toPlainText() == "Thought number 1."
    variants = [m for m in tapp.history.all_messages(tapp.controller.current_id)
                if m.role == "assistant"]
    assert [m.reasoning for m in variants] == ["Thought number 1.", "Thought number 2."]


def test_the_next_prompt_carries_earlier_thinking_apart_for_the_template(tapp):
    tapp.send("hi")
    tapp.send("and again")
    prompt = tapp.loader.last.calls[-1]
    assert [(m.role, m.content, m.reasoning) for m in prompt] == [
        ("user", "hi", ""),
        ("assistant", "You said: hi", "".join(THOUGHT)),
        ("user", "and again", ""),
    ]
    assert prompt[1].as_dict()["reasoning_content"] == "".join(THOUGHT)


def test_stopping_while_it_thinks_keeps_the_thoughts(tapp):
    engine = tapp.loader.last
    engine.hold_after = 2
    tapp.send("hi", wait=False)
    tapp.qtbot.waitUntil(engine.held.is_set, timeout=5000)
    tapp.qtbot.waitUntil(lambda: bool(tapp.controller.chat_model.message(1).reasoning))
    tapp.controller.stop()
    tapp.wait_idle()
    stored = tapp.history.active_path(tapp.controller.current_id)[1]
    assert (stored.content, stored.reasoning, stored.status) == ("", "The user says hi.",
                                                                 "stopped")
    block = _reply(tapp).thinking
    assert block.isVisible() and not block.thinking and not block.expanded
    # a reply with no answer is left out of the next prompt
    engine.hold_after = None
    tapp.send("hello?")
    assert [m.role for m in tapp.loader.last.calls[-1]] == ["user", "user"]


def test_a_reply_without_thinking_has_no_block(app):
    app.send("hi")
    block = _reply(app).thinking
    assert block.isHidden() and block.plain_text() == ""
