"""Values shown never lag the settings: the welcome hint follows the send key, the settings
window shows what the settings are when it opens again, and its help texts are not clipped."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QLabel

from app.ui.zoom import system_points

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def test_the_welcome_hint_follows_the_send_key(make_app):
    app = make_app()
    hints = app.window.chat_view.welcome.hints
    assert hints.text().startswith("Enter sends · Shift+Enter adds a line")
    app.window.set_setting("send_key", "ctrl+enter")
    assert hints.text().startswith("Ctrl+Enter sends · Enter adds a line")
    assert "Enter sends · Shift" not in hints.text()


def test_the_settings_window_shows_the_values_of_now_when_it_opens_again(make_app):
    app = make_app()
    window = app.window
    window.set_setting("font_size", round(system_points()) + 4)  # Ctrl + a few times
    window.preferences_action.trigger()
    prefs = window.preferences
    assert prefs.editors["font_size"].value() == round(system_points()) + 4
    prefs.close()
    window.zoom_reset_action.trigger()  # Ctrl+0 with the window closed
    window.set_setting("send_key", "ctrl+enter")
    window.preferences_action.trigger()
    assert prefs.editors["font_size"].value() == 0
    assert prefs.editors["font_size"].text() == "The system's size"
    assert prefs.editors["send_key"].currentData() == "ctrl+enter"
    assert app.settings.get("font_size") == 0  # refreshing wrote nothing back
    prefs.close()


def test_no_help_text_in_the_settings_window_is_clipped(make_app):
    app = make_app()
    app.window.preferences_action.trigger()
    prefs = app.window.preferences
    app.qtbot.waitExposed(prefs)
    checked = 0
    for index in range(prefs.tabs.count()):
        prefs.tabs.setCurrentIndex(index)
        app.qtbot.wait(20)
        for label in prefs.tabs.widget(index).findChildren(QLabel):
            if label.wordWrap() and label.isVisible() and label.text():
                checked += 1
                assert label.height() >= label.heightForWidth(label.width()), (
                    prefs.tabs.tabText(index), label.text())
    assert checked >= 6
    prefs.close()
