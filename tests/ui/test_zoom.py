"""The chat text size (issue 28 item 1): Ctrl + / Ctrl = / Ctrl - / Ctrl 0 and the setting
size every message (Markdown, code, tables, the thinking block), the chat list and the
composer; the size survives a restart, follows the system's size at 0, and the window at
800x600 zoomed to 150% keeps Send in view and nothing sideways.

The window is rendered to ``zoom-100-800x600.png`` / ``zoom-150-800x600.png`` in
$HEARTH_SCREENSHOTS when set, else in the test's temp folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication, QWidget

from app.ui.message_body import MessageBody
from app.ui.zoom import system_points
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

REPLY = [
    "## Words\n\nA **bold** claim:\n\n```python\n",
    "def reverse_words(text: str) -> str:  # a long line of code that has to wrap somewhere\n",
    "    return ' '.join(reversed(text.split()))\n```\n\n",
    "| call | returns |\n|---|---|\n| `reverse_words('a b')` | `'b a'` |\n",
]


@pytest.fixture
def rich_loader() -> FakeLoader:
    return FakeLoader(script=REPLY, think=["I should", " show code."],
                      thinking_control="enable_thinking")


def sizes(app) -> dict[str, float]:
    """The point size each zoomed part is drawn in (documents as well as widgets)."""
    window = app.window
    app.window.chat_view.flush()
    QApplication.processEvents()
    reply = window.chat_view.message_widget(1)
    out = {
        "user message": window.chat_view.message_widget(0).body.document().defaultFont(),
        "reply": reply.body.document().defaultFont(),
        "thinking": reply.thinking.body.document().defaultFont(),
        "thinking toggle": reply.thinking.toggle.font(),
        "chat list": window.conversation_list.view.font(),
        "chat search": window.conversation_list.search.font(),
        "composer": window.composer.edit.font(),
        "send": window.composer.button.font(),
    }
    return {name: font.pointSizeF() for name, font in out.items()}


def press(widget: QWidget, qtbot, key: Qt.Key, modifiers=Qt.KeyboardModifier.ControlModifier):
    widget.setFocus()
    qtbot.keyClick(widget, key, modifiers)


def inside(child: QWidget, window: QWidget) -> bool:
    top_left = child.mapTo(window, QPoint(0, 0))
    return (child.isVisible() and top_left.x() >= 0 and top_left.y() >= 0
            and top_left.x() + child.width() <= window.width()
            and top_left.y() + child.height() <= window.height())


def _folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_keys_size_every_part_of_the_chat_and_the_size_survives_a_restart(
    make_app, model_dir, rich_loader, qtbot
):
    app = make_app(rich_loader)
    app.load(model_dir)
    app.send("Show me code")
    base = system_points()
    assert set(sizes(app).values()) == {base}
    reply_height = app.window.chat_view.message_widget(1).body.height()

    edit = app.window.composer.edit
    for _ in range(3):
        press(edit, qtbot, Qt.Key.Key_Plus)
    press(edit, qtbot, Qt.Key.Key_Equal)  # Ctrl+= (the unshifted key) zooms in too
    assert app.settings.get("font_size") == round(base) + 4
    assert set(sizes(app).values()) == {round(base) + 4}
    reply = app.window.chat_view.message_widget(1)
    assert reply.body.height() > reply_height  # the message grew with its text
    code = reply.body.document()
    assert code.size().width() <= reply.body.viewport().width() + 1  # wraps, never sideways

    press(edit, qtbot, Qt.Key.Key_Minus)
    assert set(sizes(app).values()) == {round(base) + 3}
    app.close()

    again = make_app(rich_loader)  # a restart: the same settings file
    assert [row[0] for row in again.rows()] == ["user", "assistant"]  # the last chat reopened
    assert set(sizes(again).values()) == {round(base) + 3}

    press(again.window.composer.edit, qtbot, Qt.Key.Key_0)
    assert again.settings.get("font_size") == 0
    assert set(sizes(again).values()) == {base}


def test_size_zero_follows_the_system_text_size(make_app, model_dir, rich_loader):
    app = make_app(rich_loader)
    app.load(model_dir)
    app.send("Show me code")
    previous = QApplication.font()
    larger = QFont(previous)
    larger.setPointSizeF(previous.pointSizeF() * 1.25)  # the OS text scale went up
    try:
        QApplication.setFont(larger)
        QApplication.processEvents()
        assert set(sizes(app).values()) == {larger.pointSizeF()}
    finally:
        QApplication.setFont(previous)
        QApplication.processEvents()
    assert set(sizes(app).values()) == {previous.pointSizeF()}


@pytest.mark.parametrize("percent", [100, 150])
def test_800x600_keeps_send_in_view_and_nothing_sideways(
    make_app, model_dir, rich_loader, qtbot, tmp_path, percent
):
    app = make_app(rich_loader)
    app.load(model_dir)
    app.send("Show me code")
    window = app.window
    window.resize(800, 600)
    window.set_setting("font_size", round(system_points() * percent / 100))
    qtbot.wait(50)
    view = window.chat_view
    assert inside(window.composer.button, window)
    assert inside(window.composer.edit, window)
    assert window.composer.button.width() >= window.composer.button.sizeHint().width()
    page = view.scroll.widget()
    assert page.width() <= view.scroll.viewport().width()  # no sideways scrolling
    for body in view.findChildren(MessageBody):
        if body.isVisible():
            assert body.document().size().width() <= body.viewport().width() + 1
            assert body.mapTo(page, QPoint(body.width(), 0)).x() <= page.width()
    image = window.grab().toImage()
    assert image.width() == 800 and image.height() == 600
    assert image.save(str(_folder(tmp_path) / f"zoom-{percent}-800x600.png"))
