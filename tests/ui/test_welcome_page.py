"""The empty chat teaches: the model in use, example prompts that send, the shortcuts."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.ui.welcome_page import EXAMPLE_PROMPTS

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def test_welcome_names_the_model_and_an_example_prompt_sends(app, loader):
    view = app.window.chat_view
    welcome = view.welcome
    assert view.stack.currentWidget() is welcome and welcome.isVisible()
    assert "Tiny Model" in welcome.model_label.text()
    assert "Ctrl+N" in welcome.hints.text() and "Shift+Enter" in welcome.hints.text()
    assert 3 <= len(welcome.prompt_buttons) <= 4
    assert all(b.isEnabled() and b.accessibleName() for b in welcome.prompt_buttons)
    app.qtbot.mouseClick(welcome.prompt_buttons[1], Qt.MouseButton.LeftButton)
    app.wait_idle()
    assert app.rows()[0] == ("user", EXAMPLE_PROMPTS[1], "complete")
    assert view.stack.currentWidget() is view.scroll
    app.controller.new_conversation()  # an empty chat shows it again
    assert view.stack.currentWidget() is welcome


def test_welcome_without_a_model_says_what_to_do(make_app, model_dir):
    app = make_app()  # a model is installed but not loaded yet
    welcome = app.window.chat_view.welcome
    assert "No model is loaded" in welcome.model_label.text()
    assert not any(b.isEnabled() for b in welcome.prompt_buttons)
