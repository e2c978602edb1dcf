"""Never lose a word: edit, regenerate, branch switching, delete + Undo, on real widgets
with the scripted fake engine; the prompt sent is always the path on screen."""

from __future__ import annotations

import json
import sqlite3

import pytest
from PySide6.QtCore import Qt, QUrl

from app.storage import transfer

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def click(app, row: int, action: str) -> None:
    """Press a message's icon button, like a user."""
    widget = app.window.chat_view.message_widget(row)
    button = {"previous": widget.previous_button, "next": widget.next_button}.get(action)
    button = button or widget.action_buttons[action]
    widget.set_actions_shown(True)
    assert button.isVisible() and button.isEnabled()
    app.qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def contents(app) -> list[str]:
    return [r[1] for r in app.rows()]


def test_regenerate_keeps_the_old_answer_and_arrows_switch(app, loader):
    replies = iter([["first"], ["second"], ["after"]])
    loader.last.script = lambda messages: next(replies)
    app.send("question")
    click(app, 1, "regenerate")
    app.wait_idle()
    view = app.window.chat_view
    reply = view.message_widget(1)
    assert contents(app) == ["question", "second"]
    assert reply.variant_label.text() == "2 / 2" and reply.branch.isVisible()
    assert loader.last.calls[0] == loader.last.calls[1]  # same prompt both times
    click(app, 1, "previous")
    assert contents(app) == ["question", "first"]
    assert view.message_widget(1).variant_label.text() == "1 / 2"
    assert "first" in view.toPlainText() and "second" not in view.toPlainText()
    assert [m.content for m in app.history.active_path(app.controller.current_id)] == [
        "question", "first"]
    # the next prompt is the path on screen (the engine reuses the shared prefix itself)
    app.send("follow up")
    assert [(m.role, m.content) for m in loader.last.calls[-1]] == [
        ("user", "question"), ("assistant", "first"), ("user", "follow up")]
    # export: JSON keeps every branch, Markdown the one on screen
    conv = app.controller.current_id
    exported = json.loads(transfer.export_json(app.history, conv))
    assert {"first", "second"} <= {m["content"] for m in exported["messages"]}
    markdown = transfer.export_markdown(app.history, conv)
    assert "first" in markdown and "second" not in markdown


def test_edit_shows_a_banner_escape_cancels_and_save_makes_a_branch(app, loader):
    app.send("one")
    app.send("two")
    composer = app.window.composer
    composer.edit.setPlainText("a draft")
    click(app, 2, "edit")
    assert composer.banner.isVisible() and composer.text() == "two"
    assert "Editing a message" in composer.banner.label.text()
    assert app.controller.editing
    app.qtbot.keyClick(composer.edit, Qt.Key.Key_Escape)
    assert not composer.banner.isVisible() and not app.controller.editing
    assert composer.text() == "a draft"  # what was being written comes back
    assert contents(app) == ["one", "You said: one", "two", "You said: two"]

    click(app, 2, "edit")
    composer.edit.setPlainText("TWO!")
    app.qtbot.mouseClick(composer.banner.save_button, Qt.MouseButton.LeftButton)
    app.wait_idle()
    assert not composer.banner.isVisible()
    assert contents(app) == ["one", "You said: one", "TWO!", "You said: TWO!"]
    assert app.window.chat_view.message_widget(2).variant_label.text() == "2 / 2"
    assert [m.content for m in loader.last.calls[-1]] == ["one", "You said: one", "TWO!"]
    click(app, 2, "previous")  # the old turn and its reply are still there
    assert contents(app) == ["one", "You said: one", "two", "You said: two"]
    click(app, 2, "next")
    assert contents(app) == ["one", "You said: one", "TWO!", "You said: TWO!"]


def test_delete_a_reply_keeps_the_question_and_undo_restores(app):
    app.send("keep")
    app.send("drop")
    view = app.window.chat_view
    click(app, 3, "delete")
    assert contents(app) == ["keep", "You said: keep", "drop"]  # the question stays
    assert view.toast.isVisible() and view.toast.label.text() == "Reply deleted"
    assert view.toast.timer.isActive() and view.toast.timer.interval() == 10000  # ~10 s
    conv = app.controller.current_id
    assert [m.content for m in app.history.active_path(conv)] == contents(app)
    app.qtbot.mouseClick(view.toast.button, Qt.MouseButton.LeftButton)
    assert contents(app) == ["keep", "You said: keep", "drop", "You said: drop"]
    assert not view.toast.isVisible()
    assert [m.content for m in app.history.active_path(conv)] == contents(app)

    click(app, 2, "delete")  # a question goes with its reply
    assert contents(app) == ["keep", "You said: keep"]
    assert view.toast.label.text() == "Message and reply deleted"
    app.qtbot.mouseClick(view.toast.button, Qt.MouseButton.LeftButton)
    assert contents(app) == ["keep", "You said: keep", "drop", "You said: drop"]


def test_undo_is_gone_after_switching_chats(app):
    app.send("first")
    click(app, 1, "delete")
    app.controller.new_conversation()
    assert not app.controller.can_undo_delete
    assert not app.controller.undo_delete()


def test_composer_text_is_cleaned_before_it_is_stored(app, loader):
    app.controller.send("broken \ud800 surrogate")  # Qt's own text box drops lone ones
    app.wait_idle()
    stored = app.history.active_path(app.controller.current_id)[0].content
    assert stored == "broken \ufffd surrogate"
    assert loader.last.calls[-1][0].content == "broken \ufffd surrogate"


def test_a_damaged_chat_opens_with_a_note(app):
    app.send("fine text")
    conv = app.controller.current_id
    msg_id = app.history.active_path(conv)[1].id
    conn = sqlite3.connect(app.history.path)
    conn.execute("UPDATE messages SET content = CAST(X'6F6BC328FF' AS TEXT) WHERE id = ?",
                 (msg_id,))
    conn.commit()
    conn.close()
    app.controller.new_conversation()
    app.controller.open_conversation(conv)
    banner = app.window.banner.text()
    assert "could not be read" in banner and str(app.history.path) in banner
    assert "could not be read in full" in app.window.chat_view.message_widget(1).plain_text()


def test_hearth_urls_still_drive_the_same_actions(app):
    """The code-copy links and any caller that emits a hearth: URL reach the same code."""
    app.send("q")
    app.window.chat_view.anchorClicked.emit(QUrl("hearth:regenerate/1"))
    app.wait_idle()
    assert app.window.chat_view.message_widget(1).variant_label.text() == "2 / 2"
