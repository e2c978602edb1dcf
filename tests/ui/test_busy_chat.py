"""A reply written in a chat that is not on screen: its row in the chat list says so
("answering…", in its accessible name and tooltip too) until the reply ends, fails or is
stopped; the open chat's Stop leaves it alone, the composer names the chat it is written
in and stops it only when asked to by name ("Stop that reply", or the row's menu).

Screenshots of the list and the composer at 800x600, light and dark, go to
$HEARTH_SCREENSHOTS when set (else the test's temp folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QApplication

from app.errors import TemplateError
from app.ui.conversation_list import ConversationListModel
from app.ui.theme import DARK, LIGHT, apply_theme
from tests.ui.test_documents_threads import Slow

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

BUSY = ConversationListModel.BusyRole
ACCESSIBLE = Qt.ItemDataRole.AccessibleTextRole


def _mark(app, cid: str) -> str:
    model = app.controller.conversations
    return model.index(model.row_of(cid), 0).data(BUSY)


def _near(image: QImage, color: str, tolerance: int = 60) -> int:
    """How many pixels are drawn in about ``color`` (antialiased text and dots included)."""
    target = QColor(color)
    count = 0
    for y in range(image.height()):
        for x in range(image.width()):
            pixel = image.pixelColor(x, y)
            if (abs(pixel.red() - target.red()) + abs(pixel.green() - target.green())
                    + abs(pixel.blue() - target.blue())) <= tolerance:
                count += 1
    return count


def _open(app, cid: str) -> None:
    """Click the chat's row in the list, as a user does."""
    model = app.controller.conversations
    app.window.conversation_list.view.clicked.emit(model.index(model.row_of(cid), 0))
    assert app.controller.current_id == cid


def _reply_elsewhere(app, loader, *, hold_after: int = 2, **engine) -> tuple[str, str]:
    """A finished chat ("Old one"), then a reply held part way in a new chat ("Busy one")
    while the user has gone back to the first: (first chat, busy chat)."""
    app.send("Old one")
    first = app.controller.current_id
    app.qtbot.keyClick(app.window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    engine_ = loader.last
    engine_.hold_after = hold_after
    engine_.script = ["a", "b", "c", "d"]
    for key, value in engine.items():
        setattr(engine_, key, value)
    app.send("Busy one", wait=False)
    app.qtbot.waitUntil(lambda: engine_.held.is_set(), timeout=5000)
    busy = app.controller.current_id
    assert busy is not None and busy != first
    _open(app, first)
    return first, busy


def test_the_chat_answering_out_of_sight_is_marked_until_its_reply_ends(app, loader):
    first, busy = _reply_elsewhere(app, loader)
    assert _mark(app, busy) == "answering…"
    assert _mark(app, first) == ""
    model = app.controller.conversations
    index = model.index(model.row_of(busy), 0)
    assert index.data(ACCESSIBLE) == "Chat: Busy one (Today, answering)"
    assert "The model is answering in this chat." in index.data(Qt.ItemDataRole.ToolTipRole)
    # the open chat's composer names the busy chat; Stop is not offered, and a message
    # sent here would wait its turn (tests/ui/test_waiting_turns.py)
    composer = app.window.composer
    assert composer.busy_banner.isVisible()
    assert "“Busy one”" in composer.busy_banner.label.text()
    assert "A message sent here waits" in composer.busy_banner.label.text()
    assert composer.button.text() == "Send" and composer.button.isEnabled()
    assert composer.busy_banner.stop_button.accessibleName() == "Stop the reply in Busy one"
    loader.last.release.set()
    app.wait_idle()
    assert _mark(app, busy) == "" and model.busy is None
    assert "answering" not in model.index(model.row_of(busy), 0).data(ACCESSIBLE)
    assert not composer.busy_banner.isVisible()
    assert composer.button.text() == "Send" and composer.button.isEnabled()
    assert [m.content for m in app.history.active_path(busy)] == ["Busy one", "abcd"]


def test_the_mark_is_painted_on_the_row_and_goes_with_the_reply(app, loader):
    """The list shows the mark (pixels in the link colour at the row's right), not only its
    model."""
    _first, busy = _reply_elsewhere(app, loader)
    view = app.window.conversation_list.view
    model = app.controller.conversations
    rect = view.visualRect(model.index(model.row_of(busy), 0))

    def marked() -> int:
        return _near(view.viewport().grab(rect).toImage(), LIGHT.link)

    assert marked() > 30
    loader.last.release.set()
    app.wait_idle()
    rect = view.visualRect(model.index(model.row_of(busy), 0))
    assert marked() == 0


def test_tab_reaches_stop_that_reply_and_the_keyboard_works_it(app, loader):
    _first, busy = _reply_elsewhere(app, loader)
    view = app.window.conversation_list.view
    stop = app.window.composer.busy_banner.stop_button
    view.setFocus()
    app.qtbot.waitUntil(view.hasFocus, timeout=2000)
    app.qtbot.keyClick(view, Qt.Key.Key_Tab)
    assert stop.hasFocus()
    app.qtbot.keyClick(stop, Qt.Key.Key_Space)
    app.wait_idle()
    assert app.history.active_path(busy)[-1].status == "stopped"


def test_the_mark_clears_when_the_reply_fails_out_of_sight(app, loader):
    _first, busy = _reply_elsewhere(
        app, loader, error_after=3, error=TemplateError("The chat template is broken."))
    assert _mark(app, busy) == "answering…"
    loader.last.release.set()
    app.wait_idle()
    assert _mark(app, busy) == ""
    assert app.history.active_path(busy)[-1].status == "failed"
    assert not app.window.composer.busy_banner.isVisible()


def test_stop_in_the_open_chat_does_not_stop_the_reply_in_another(app, loader):
    first, busy = _reply_elsewhere(app, loader)
    composer = app.window.composer
    app.qtbot.keyClick(composer.edit, Qt.Key.Key_Escape)  # Esc is this chat's Stop
    app.qtbot.mouseClick(composer.button, Qt.MouseButton.LeftButton)
    assert app.controller.stop() is False  # the open chat's: nothing runs here
    assert app.controller.generating and _mark(app, busy) == "answering…"
    # a change here waits, and names the chat it waits for
    assert not app.controller.regenerate(1)
    assert "busy in the chat “Busy one”" in app.window.banner.text()
    assert "before changing this chat" in app.window.banner.text()
    # a message sent here waits its turn, stored; it goes once that reply is done
    composer.edit.setFocus()
    composer.edit.setPlainText("A new question")
    app.qtbot.keyClick(composer.edit, Qt.Key.Key_Return)
    assert composer.text() == "" and app.controller.in_line(first)
    assert [m.content for m in app.history.active_path(first)] == [
        "Old one", "You said: Old one", "A new question"]
    loader.last.release.set()
    app.qtbot.waitUntil(lambda: not app.controller.generating and not app.controller.line,
                        timeout=10000)
    path = app.history.active_path(busy)
    assert (path[-1].content, path[-1].status) == ("abcd", "complete")
    assert app.rows()[-2:] == [("user", "A new question", "complete"),
                               ("assistant", "abcd", "complete")]


def test_stop_that_reply_stops_the_named_chat_and_clears_its_mark(app, loader):
    first, busy = _reply_elsewhere(app, loader)
    long_title = "A very long title " * 15  # 270 characters (the storage keeps 300)
    app.controller.rename_conversation(busy, long_title.strip())
    banner = app.window.composer.busy_banner
    assert len(banner.label.text()) < 160 and "A very long title A very" in banner.label.text()
    assert banner.stop_button.accessibleName() == f"Stop the reply in {long_title.strip()}"
    stop = banner.stop_button
    app.qtbot.mouseClick(stop, Qt.MouseButton.LeftButton)
    app.wait_idle()
    path = app.history.active_path(busy)
    assert (path[-1].content, path[-1].status) == ("ab", "stopped")
    assert _mark(app, busy) == ""
    assert not app.window.composer.busy_banner.isVisible()
    assert app.controller.current_id == first  # the open chat stayed open


def test_the_busy_rows_menu_stops_its_reply(app, loader, monkeypatch):
    first, busy = _reply_elsewhere(app, loader)
    listing = app.window.conversation_list
    model = app.controller.conversations
    seen: list[list[str]] = []

    def answer(menu, where):
        seen.append([a.text() for a in menu.actions() if a.text()])
        return "stop" if "Stop the reply" in seen[-1] else None

    monkeypatch.setattr(listing, "run_menu", answer)
    for cid in (first, busy):
        rect = listing.view.visualRect(model.index(model.row_of(cid), 0))
        listing.on_context_menu(rect.center())
    assert "Stop the reply" not in seen[0]  # only the busy chat's row offers it
    assert seen[1][0] == "Stop the reply"
    app.wait_idle()
    assert app.history.active_path(busy)[-1].status == "stopped"
    assert _mark(app, busy) == "" and app.controller.current_id == first


def test_switching_back_to_the_busy_chat_gives_it_its_stop(app, loader):
    _first, busy = _reply_elsewhere(app, loader)
    composer = app.window.composer
    _open(app, busy)
    assert composer.button.text() == "Stop" and composer.button.isEnabled()
    assert not composer.busy_banner.isVisible()
    assert _mark(app, busy) == "answering…"  # the list marks it, open or not
    app.qtbot.mouseClick(composer.button, Qt.MouseButton.LeftButton)
    app.wait_idle()
    assert app.rows()[-1] == ("assistant", "ab", "stopped")
    assert _mark(app, busy) == ""


def test_a_held_message_reads_out_of_sight_marked_then_answers(app, tmp_path):
    documents = app.window.documents
    slow = Slow()
    read = documents.read_file

    def slow_read(path, context, used):
        slow.wait()
        return read(path, context, used)

    documents.read_file = slow_read
    app.send("Old one")
    first = app.controller.current_id
    app.controller.new_conversation()
    note = tmp_path / "note.txt"
    note.write_text("The kettle is silver.\n", encoding="utf-8")
    app.window.attachments.add([note])
    app.send("Read this", wait=False)
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    held = app.controller.current_id
    _open(app, first)
    assert _mark(app, held) == "reading…"
    assert "being read" in app.window.composer.busy_banner.label.text()
    app.qtbot.keyClick(app.window.composer.edit, Qt.Key.Key_Escape)
    assert app.controller.held is not None  # the open chat's Esc left it alone
    slow.gate.set()
    app.wait_idle(timeout=15000)
    assert app.history.active_path(held)[-1].status == "complete"
    assert _mark(app, held) == ""


def test_a_message_waiting_for_the_model_is_marked_and_can_be_dropped_by_name(app):
    from tests.ui.conftest import make_model_folder

    app.send("Old one")
    first = app.controller.current_id
    app.loader.load_delay = 1.0
    assert app.controller.load_model(make_model_folder("slow-model", "Slow"))
    app.controller.new_conversation()
    app.send("Answer me when you are ready", wait=False)
    waiting = app.controller.current_id
    assert app.controller.queued and "Waiting for the model" in \
        app.window.composer.edit.placeholderText()
    _open(app, first)
    assert _mark(app, waiting) == "waiting…"
    composer = app.window.composer
    assert "waits for the model to load" in composer.busy_banner.label.text()
    assert "Waiting" not in composer.edit.placeholderText()  # nothing waits in this chat
    assert composer.busy_banner.stop_button.text() == "Don't send it"
    app.qtbot.mouseClick(composer.busy_banner.stop_button, Qt.MouseButton.LeftButton)
    assert not app.controller.queued and not app.controller.generating
    assert _mark(app, waiting) == "" and not composer.busy_banner.isVisible()
    app.qtbot.waitUntil(lambda: app.controller.loading_path is None, timeout=5000)
    assert app.controller.model_info.path.endswith("slow-model")
    path = app.history.active_path(waiting)
    assert [(m.role, m.content) for m in path] == [("user", "Answer me when you are ready")]


def test_no_mark_outlives_a_quit(make_app, model_dir, loader):
    app = make_app()
    app.load(model_dir)
    _first, busy = _reply_elsewhere(app, loader)
    assert app.controller.conversations.busy == busy
    app.close()  # quit with the reply part way: it is saved as stopped
    assert app.controller.conversations.busy is None
    again = make_app()  # the next start reads the same history
    model = again.controller.conversations
    assert model.row_of(busy) >= 0
    assert all(model.index(row, 0).data(BUSY) == "" for row in range(model.rowCount()))
    assert again.history.active_path(busy)[-1].status == "stopped"


def _folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_screenshots_of_a_chat_answering_out_of_sight(app, loader, tmp_path):
    folder = _folder(tmp_path)
    app.window.resize(800, 600)
    app.send("What should I pack for a long hike in the hills?")
    _first, busy = _reply_elsewhere(app, loader)
    # a long title elides before the mark; the note names the chat in full
    app.controller.rename_conversation(busy, "Packing list for the Lake District weekend")
    view = app.window.conversation_list.view
    model = app.controller.conversations
    for theme, colors in (("light", LIGHT), ("dark", DARK)):
        apply_theme(theme)
        try:
            app.qtbot.wait(50)
            pixmap = app.window.grab()
            assert pixmap.save(str(folder / f"busy-chat-{theme}-800x600.png"))
            image: QImage = pixmap.toImage()
            assert image.width() == 800 and image.height() == 600
            banner = app.window.composer.busy_banner
            assert banner.isVisible()
            # the whole note and its button are inside the window
            top_left = banner.mapTo(app.window, banner.rect().topLeft())
            assert top_left.x() >= 0 and top_left.x() + banner.width() <= 800
            assert top_left.y() + banner.height() <= 600
            # the row as painted: its logical width may pass the list's edge (a long title)
            full = view.visualRect(model.index(model.row_of(busy), 0))
            rect = full.intersected(view.viewport().rect())
            assert rect.height() == full.height() and rect.width() > 150
            assert _near(view.viewport().grab(rect).toImage(), colors.link) > 30
        finally:
            apply_theme("system")
    QApplication.processEvents()
    _open(app, busy)  # its own row selected, its own Stop in the composer
    app.qtbot.wait(50)
    assert app.window.grab().save(str(folder / "busy-chat-open-light-800x600.png"))
    assert app.window.composer.button.text() == "Stop"
    loader.last.release.set()
    app.wait_idle()
