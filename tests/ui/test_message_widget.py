"""Message widgets: actions on hover / focus, Tab reaches them, screen readers get role and
text, a finished reply is announced once, provenance sits behind the info button."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QAccessible, QEnterEvent
from PySide6.QtWidgets import QApplication, QToolButton

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def test_actions_appear_on_hover_and_hide_on_leave(app):
    app.send("hello")
    widget = app.window.chat_view.message_widget(1)
    assert not widget.actions.isVisible()
    QApplication.sendEvent(widget, QEnterEvent(QPointF(5, 5), QPointF(5, 5), QPointF(5, 5)))
    assert widget.actions.isVisible()
    assert set(widget.action_buttons) == {"copy", "regenerate", "info", "delete"}
    user = app.window.chat_view.message_widget(0)
    assert set(user.action_buttons) == {"copy", "edit", "delete"}
    from PySide6.QtCore import QEvent

    QApplication.sendEvent(widget, QEvent(QEvent.Type.Leave))
    assert not widget.actions.isVisible()
    assert widget.actions.sizePolicy().retainSizeWhenHidden()  # nothing jumps


def test_keyboard_focus_shows_actions_and_tab_reaches_them(app):
    app.send("hello")
    view = app.window.chat_view
    user, reply = view.message_widget(0), view.message_widget(1)
    user.setFocus(Qt.FocusReason.TabFocusReason)
    app.qtbot.waitUntil(user.actions.isVisible)
    reached = []
    for _ in range(12):
        app.qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        focused = QApplication.focusWidget()
        if isinstance(focused, QToolButton):
            reached.append(focused.property("action"))
        if focused is reply or reply.isAncestorOf(focused):
            assert reply.actions.isVisible()
        if len(reached) >= 6:
            break
    assert {"copy", "edit", "delete"} <= set(reached)  # the user message's buttons
    assert {"regenerate"} & set(reached)  # then the reply's
    assert not user.actions.isVisible()  # focus left it
    button = reply.action_buttons["copy"]
    button.setFocus(Qt.FocusReason.TabFocusReason)
    app.qtbot.keyClick(button, Qt.Key.Key_Space)
    assert QApplication.clipboard().text() == "You said: hello"


def test_every_button_has_a_tooltip_and_an_accessible_name(app):
    app.send("hello")
    app.controller.regenerate(1)
    app.wait_idle()
    for row in (0, 1):
        widget = app.window.chat_view.message_widget(row)
        for button in widget.findChildren(QToolButton):
            assert button.accessibleName() and button.toolTip(), button.property("action")
            assert button.accessibleDescription()
            assert not button.icon().isNull()


def test_screen_readers_get_role_and_text(app):
    app.send("What is **2+2**?")
    view = app.window.chat_view
    user, reply = view.message_widget(0), view.message_widget(1)
    assert user.accessibleName() == "You"
    assert user.accessibleDescription() == "What is **2+2**?"
    assert reply.accessibleName() == "Assistant"
    assert reply.accessibleDescription() == "You said: What is **2+2**?"
    iface = QAccessible.queryAccessibleInterface(reply)
    assert iface.text(QAccessible.Text.Name) == "Assistant"
    assert iface.text(QAccessible.Text.Description) == "You said: What is **2+2**?"
    app.controller.regenerate(1)
    app.wait_idle()
    assert view.message_widget(1).accessibleName() == "Assistant, version 2 of 2"


def test_a_finished_reply_is_announced_once_not_per_token(app, loader):
    loader.last.script = [f" w{i}" for i in range(60)]
    loader.last.delay = 0.001
    announced: list[str] = []
    app.window.chat_view.announced.connect(announced.append)
    app.send("talk")
    app.qtbot.waitUntil(lambda: len(announced) >= 1)
    app.qtbot.wait(50)
    assert len(announced) == 1
    assert announced[0].startswith("Reply finished:") and announced[0].endswith(" w59")
    # while it streamed, the description was not rewritten per token
    assert app.window.chat_view.message_widget(1).accessibleDescription().endswith(" w59")


def test_provenance_sits_behind_the_info_button(app):
    app.send("hello")
    view = app.window.chat_view
    info = view.message_widget(1).action_buttons["info"]
    assert "tok/s" in info.toolTip() and "model tiny-model" in info.toolTip()
    assert info.accessibleDescription() == info.toolTip()
    assert "tok/s" not in view.toPlainText()  # no technical footer under the reply
    assert "seed" not in view.toPlainText()


def test_typing_indicator_until_the_first_token(app, loader):
    loader.last.hold_after = 0
    app.send("wait", wait=False)
    app.qtbot.waitUntil(loader.last.held.is_set)
    widget = app.window.chat_view.message_widget(1)
    app.qtbot.waitUntil(widget.typing.isVisible)
    assert widget.is_typing and not widget.body.isVisible()
    loader.last.release.set()
    app.wait_idle()
    assert not widget.typing.isVisible() and widget.body.isVisible()


def test_the_column_keeps_a_readable_width(make_app, model_dir):
    app = make_app()
    app.load(model_dir)
    app.window.resize(1800, 900)
    app.send("hello")
    view = app.window.chat_view
    chars = view.column.width() / view.fontMetrics().horizontalAdvance("x")
    assert 60 <= chars <= 95  # ~70 characters of text, centred
    left = view.column.mapTo(view, view.column.rect().topLeft()).x()
    right = view.width() - (left + view.column.width())
    assert abs(left - right) < 40

