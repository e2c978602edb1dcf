"""Undo after a delete: Ctrl+Z / Edit ▸ Undo while the chat is open, and a note that stays
while the pointer is on it, on the real window."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt

from app.ui import undo_toast
from tests.ui.test_chat_branches import click, contents

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def test_ctrl_z_in_the_message_box_undoes_the_delete(app):
    app.send("keep")
    app.send("drop")
    window = app.window
    assert not window.undo_action.isEnabled()
    click(app, 3, "delete")
    assert contents(app) == ["keep", "You said: keep", "drop"]
    assert window.undo_action.isEnabled()
    assert window.undo_action.shortcut().matches(Qt.Modifier.CTRL | Qt.Key.Key_Z).name \
        == "ExactMatch"
    edit = window.composer.edit
    edit.setFocus()
    app.qtbot.keyClick(edit, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert contents(app) == ["keep", "You said: keep", "drop", "You said: drop"]
    assert not window.chat_view.toast.isVisible() and not window.undo_action.isEnabled()


def test_text_being_written_keeps_its_own_undo(app):
    app.send("drop")
    click(app, 1, "delete")
    edit = app.window.composer.edit
    edit.setFocus()
    app.qtbot.keyClicks(edit, "abc")
    app.qtbot.keyClick(edit, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert edit.toPlainText() != "abc"  # the typing was undone, not the delete
    assert contents(app) == ["drop"]


def test_undo_outlives_the_note_while_the_chat_is_open(app, monkeypatch):
    monkeypatch.setattr(undo_toast, "UNDO_SECONDS", 0.05)
    app.send("drop")
    toast = app.window.chat_view.toast
    click(app, 1, "delete")
    app.qtbot.waitUntil(lambda: not toast.isVisible(), timeout=3000)
    app.window.menuBar().setFocus()
    app.window.undo_action.trigger()  # Edit ▸ Undo
    assert contents(app) == ["drop", "You said: drop"]


def test_the_note_waits_while_the_pointer_is_on_it(app, monkeypatch):
    monkeypatch.setattr(undo_toast, "UNDO_SECONDS", 0.05)
    monkeypatch.setattr(undo_toast, "AFTER_HOVER_SECONDS", 0.05)
    app.send("drop")
    toast = app.window.chat_view.toast
    click(app, 1, "delete")
    app.qtbot.mouseMove(toast.button, QPoint(5, 5))
    app.qtbot.waitUntil(toast.underMouse, timeout=2000)
    app.qtbot.wait(400)  # well past the note's time
    assert toast.isVisible()
    app.qtbot.mouseClick(toast.button, Qt.MouseButton.LeftButton)  # the late click lands
    assert contents(app) == ["drop", "You said: drop"]

    click(app, 1, "delete")
    app.qtbot.mouseMove(toast.button, QPoint(5, 5))
    app.qtbot.waitUntil(toast.underMouse, timeout=2000)
    app.qtbot.mouseMove(app.window.conversation_list, QPoint(5, 5))  # the pointer leaves
    app.qtbot.waitUntil(lambda: not toast.isVisible(), timeout=3000)


def test_opening_another_chat_drops_the_note_and_the_undo(app):
    app.send("first")
    click(app, 1, "delete")
    app.window.on_new_chat()
    assert not app.window.chat_view.toast.isVisible()
    assert not app.window.undo_action.isEnabled()
