"""Offscreen screenshots of the chat (QWidget.grab) at 800x600, light and dark.

The PNGs go to $HEARTH_SCREENSHOTS when set (for people to look at), else to the test's
temp folder. The assertions check pixels a broken layout or theme would not have.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import QApplication

from app.ui.theme import DARK, LIGHT

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

REPLY = (
    "## A tiny example\n\nHere is a **function** with a short explanation:\n\n"
    "- it takes a name\n- it returns a greeting\n\n"
    "```python\ndef hello(name):\n    return f'Hello {name}'\n```\n\nThat is all."
)


def _folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _count(image: QImage, color: str, step: int = 3) -> int:
    """How many sampled pixels have exactly ``color``."""
    target = QColor(color).rgb()
    return sum(
        1
        for y in range(0, image.height(), step)
        for x in range(0, image.width(), step)
        if image.pixel(x, y) == target
    )


def _dark_palette() -> QPalette:
    palette = QPalette()
    for role, color in (
        (QPalette.ColorRole.Window, "#161b22"), (QPalette.ColorRole.WindowText, "#e6edf3"),
        (QPalette.ColorRole.Base, "#0d1117"), (QPalette.ColorRole.Text, "#e6edf3"),
        (QPalette.ColorRole.Button, "#21262d"), (QPalette.ColorRole.ButtonText, "#e6edf3"),
        (QPalette.ColorRole.PlaceholderText, "#9198a1"),
    ):
        palette.setColor(role, QColor(color))
    return palette


def _grab(app, folder: Path, name: str) -> QImage:
    app.window.chat_view.flush()
    app.qtbot.wait(50)
    pixmap = app.window.grab()
    path = folder / name
    assert pixmap.save(str(path))
    return pixmap.toImage()


def test_screenshots_welcome_reply_with_branches_dark(app, loader, tmp_path):
    folder = _folder(tmp_path)
    app.window.resize(800, 600)
    app.qtbot.wait(50)
    image = _grab(app, folder, "welcome-800x600.png")
    assert image.width() == 800 and image.height() == 600
    view = app.window.chat_view
    assert view.stack.currentWidget() is view.welcome and view.welcome.isVisible()

    replies = iter([[REPLY[:40], REPLY[40:]], [REPLY[:60], REPLY[60:]]])
    loader.last.script = lambda messages: next(replies)
    app.send("Show me a tiny Python example")
    app.controller.regenerate(1)
    app.wait_idle()
    reply = view.message_widget(1)
    assert reply.variant_label.text() == "2 / 2" and reply.branch.isVisible()
    reply.set_actions_shown(True)
    image = _grab(app, folder, "reply-light-800x600.png")
    assert _count(image, LIGHT.user_bg) > 200  # the user's tinted card
    assert _count(image, LIGHT.code_bg) > 200  # the code block

    QApplication.setPalette(_dark_palette())
    try:
        app.qtbot.waitUntil(lambda: view._colors is DARK)
        reply = view.message_widget(1)
        reply.set_actions_shown(True)
        image = _grab(app, folder, "reply-dark-800x600.png")
        assert _count(image, DARK.assistant_bg) > 2000  # the dark page
        assert _count(image, DARK.user_bg) > 200
        assert _count(image, LIGHT.assistant_bg) < 50  # no white patches left over
    finally:
        QApplication.setPalette(QApplication.style().standardPalette())


def test_screenshots_reply_with_thinking_light_and_dark(make_app, model_dir, tmp_path):
    from tests.workers.fake_engine import FakeLoader

    folder = _folder(tmp_path)
    app = make_app(FakeLoader(think=["The user wants a greeting function. ",
                                     "A one-liner with an f-string is enough; ",
                                     "I will keep the explanation short."]))
    app.load(model_dir)
    app.window.resize(800, 600)
    app.loader.last.script = [REPLY]
    app.send("Show me a tiny Python example")
    view = app.window.chat_view
    block = view.message_widget(1).thinking
    assert block.isVisible() and not block.expanded
    folded = _grab(app, folder, "thinking-folded-light-800x600.png")
    block.set_expanded(True)
    image = _grab(app, folder, "thinking-open-light-800x600.png")
    assert block.frame.isVisible() and block.body.height() > 0
    assert _count(image, LIGHT.border) > _count(folded, LIGHT.border) + 5  # the block's rule

    QApplication.setPalette(_dark_palette())
    try:
        app.qtbot.waitUntil(lambda: view._colors is DARK)
        image = _grab(app, folder, "thinking-open-dark-800x600.png")
        assert _count(image, DARK.assistant_bg) > 2000
        assert _count(image, DARK.border) > 20
        assert _count(image, LIGHT.assistant_bg) < 50
    finally:
        QApplication.setPalette(QApplication.style().standardPalette())


def test_the_chat_settings_panel_fits_an_800x600_window(app, tmp_path):
    """Opened beside a chat, the panel wraps its rows (each field under its label) instead
    of widening the window past an 800 px screen; the chat's Send button stays inside the
    window, and each of the panel's parts comes into it when scrolled to."""
    window = app.window
    window.resize(800, 600)
    if not window.panel_action.isChecked():
        window.panel_action.trigger()
    app.send("hello")
    image = _grab(app, _folder(tmp_path), "chat-settings-800x600.png")
    assert (image.width(), image.height()) == (800, 600)
    assert window.minimumSizeHint().width() <= 800
    panel = window.settings_panel
    # the panel scrolls up and down (its settings and the Libraries list are taller than
    # 600 px): each of its parts comes into the window when scrolled to, never sideways
    for widget in (window.composer.button, panel.reset_button,
                   panel.editors["system_prompt"], window.libraries_list):
        assert widget.isVisible()
        if widget is not window.composer.button:
            panel.scroll.ensureWidgetVisible(widget)
            app.qtbot.wait(20)
        box = widget.rect().translated(widget.mapTo(window, widget.rect().topLeft()))
        assert window.rect().contains(box), widget.accessibleName()
    assert panel.scroll.horizontalScrollBar().maximum() == 0
    # the system prompt box spans the panel (it is not squeezed beside its label)
    assert panel.editors["system_prompt"].width() > panel.width() * 0.8


def test_screenshots_failed_reply_with_retry_then_the_models_title(app, loader, tmp_path):
    from PySide6.QtCore import QRect, Qt

    from app.chat.title import INSTRUCTION
    from app.errors import HearthError

    folder = _folder(tmp_path)
    app.window.resize(800, 600)
    app.settings.set("chat_titles", "model")
    loader.last.error_before = HearthError("The remote engine at http://127.0.0.1:8000/v1 "
                                           "answered HTTP 503.")
    app.send("Show me a tiny Python example")
    retry = app.window.chat_view.message_widget(1).retry_button
    _grab(app, folder, "failed-reply-retry-800x600.png")
    assert retry.isVisible() and retry.text() == "Retry"
    shown = QRect(retry.mapTo(app.window, retry.rect().topLeft()), retry.size())
    assert app.window.rect().contains(shown)  # on screen, not clipped by the window

    loader.last.error_before = None
    loader.last.script = lambda messages: (
        ["Tiny", " Python", " example"] if messages[0].content == INSTRUCTION else [REPLY])
    with app.qtbot.waitSignal(app.controller.conversation_titled, timeout=5000):
        app.qtbot.mouseClick(retry, Qt.MouseButton.LeftButton)
    _grab(app, folder, "titled-by-the-model-800x600.png")
    assert app.rows()[1] == ("assistant", REPLY, "complete")
    index = app.controller.conversations.index(0)
    assert app.controller.conversations.data(index) == "Tiny Python example"
