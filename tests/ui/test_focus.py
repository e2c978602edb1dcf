"""Keyboard focus can be seen and reaches everything: Tab gets to the toolbar's Models and
Chat settings buttons, and Send and the chat list look different with the focus."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QImage

from app.ui.theme import colors_for

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def tab_until(app, target, limit: int = 40) -> bool:
    """Press Tab from the model picker until ``target`` has the focus."""
    window = app.window
    window.model_picker.setFocus()
    app.qtbot.waitUntil(window.model_picker.hasFocus, timeout=2000)
    for _ in range(limit):
        if target.hasFocus():
            return True
        app.qtbot.keyClick(window.focusWidget(), Qt.Key.Key_Tab)
    return target.hasFocus()


def test_tab_reaches_the_toolbar_buttons(app):
    bar = app.window.toolbar
    models = bar.widgetForAction(app.window.models_action)
    panel = bar.widgetForAction(app.window.panel_action)
    assert tab_until(app, models)
    app.qtbot.keyClick(models, Qt.Key.Key_Tab)
    assert panel.hasFocus()
    app.qtbot.keyClick(panel, Qt.Key.Key_Space)  # and the keyboard works it
    assert app.window.panel_action.isChecked() == app.window.settings_panel.isVisible()


def ring_pixels(widget, color: str) -> int:
    """How many pixels of the outermost 2 px of ``widget`` have exactly ``color``."""
    image: QImage = widget.grab().toImage()
    target = QColor(color).rgb()
    width, height = image.width(), image.height()
    edge = [(x, y) for x in range(width) for y in (0, 1, height - 2, height - 1)]
    edge += [(x, y) for y in range(height) for x in (0, 1, width - 2, width - 1)]
    return sum(1 for x, y in edge if image.pixel(x, y) == target)


def test_send_and_the_chat_list_show_the_focus(app):
    app.send("hello")
    send = app.window.composer.button
    view = app.window.conversation_list.view
    app.window.composer.edit.setFocus()
    app.qtbot.waitUntil(app.window.composer.edit.hasFocus, timeout=2000)
    colors = colors_for(QGuiApplication.palette())
    assert ring_pixels(send, colors.text) == 0 and ring_pixels(view, colors.link) == 0
    size_before = (send.size(), view.viewport().size())
    assert tab_until(app, send)
    perimeter = 2 * (send.width() + send.height())
    assert ring_pixels(send, colors.text) > perimeter  # a ring all round, 2 px wide
    assert tab_until(app, view)
    assert ring_pixels(view, colors.link) > 2 * (view.width() + view.height())
    assert (send.size(), view.viewport().size()) == size_before  # nothing jumps
