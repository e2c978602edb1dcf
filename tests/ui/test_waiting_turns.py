"""A message sent in one chat while the model answers in another waits its turn, in sight:
it is stored in its chat at once, its row says "waiting for its turn…", the box says what it
waits for and its button is "Don't send", the chat list marks the chat "queued…". Messages
waiting in several chats are answered one by one in the order they were sent, each in its
own chat. "Don't send" (or the row's menu) takes one out, unanswered; a quit leaves it
stored, saying it was not sent, and its row's Send now (or sending its text again) answers
it.

The reply in the first chat is held part way (``FakeEngine.hold_after``) until the test
lets it go."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from tests.ui.test_busy_chat import BUSY, _open, _reply_elsewhere

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def _mark(app, cid: str) -> str:
    model = app.controller.conversations
    return model.index(model.row_of(cid), 0).data(BUSY)


def _asked(engine) -> list[str]:
    """The question each reply the engine wrote answered, in order."""
    return [next(m.content for m in reversed(call) if m.role == "user")
            for call in engine.calls]


def _idle(app) -> None:
    app.qtbot.waitUntil(lambda: not app.controller.generating and not app.controller.line,
                        timeout=10000)


def test_a_message_sent_while_another_chat_answers_waits_in_sight_then_goes(app, loader):
    first, busy = _reply_elsewhere(app, loader)
    composer = app.window.composer
    app.send("And what about tea?", wait=False)
    # stored in its chat at once, and it says it waits
    assert [m.content for m in app.history.active_path(first)][-1] == "And what about tea?"
    assert app.controller.in_line(first)
    widget = app.window.chat_view.message_widget(2)
    assert widget.status_note.text() == "waiting for its turn…"
    assert composer.edit.placeholderText() == "Waiting for the reply in “Busy one”…"
    assert composer.button.text() == "Don't send" and composer.button.isEnabled()
    assert "Your message waits for the reply in “Busy one”" in \
        composer.busy_banner.label.text()
    assert _mark(app, first) == "queued…" and _mark(app, busy) == "answering…"
    loader.last.release.set()
    _idle(app)
    assert _asked(loader.last)[-2:] == ["Busy one", "And what about tea?"]
    assert app.rows()[-2:] == [("user", "And what about tea?", "complete"),
                               ("assistant", "abcd", "complete")]
    assert _mark(app, first) == "" and composer.button.text() == "Send"
    assert "Waiting" not in composer.edit.placeholderText()
    assert not composer.busy_banner.isVisible()


def test_messages_waiting_in_several_chats_go_in_the_order_they_were_sent(app, loader):
    first, busy = _reply_elsewhere(app, loader)
    app.send("First in line", wait=False)
    app.qtbot.keyClick(app.window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    app.send("Second in line", wait=False)  # a new chat: made, and its message waits
    second = app.controller.current_id
    assert second not in (first, busy)
    assert app.controller.line == (first, second)
    assert _mark(app, first) == _mark(app, second) == "queued…"
    _open(app, busy)  # the user watches the first reply meanwhile
    loader.last.release.set()
    _idle(app)
    assert _asked(loader.last)[-3:] == ["Busy one", "First in line", "Second in line"]
    for cid, question in ((first, "First in line"), (second, "Second in line")):
        path = app.history.active_path(cid)
        assert [(m.role, m.content, m.status) for m in path[-2:]] == [
            ("user", question, "complete"), ("assistant", "abcd", "complete")]
    assert app.controller.current_id == busy  # nothing was opened over it


def test_dont_send_takes_the_waiting_message_out_unanswered(app, loader):
    first, _busy = _reply_elsewhere(app, loader)
    composer = app.window.composer
    app.send("Never mind this one", wait=False)
    app.qtbot.mouseClick(composer.button, Qt.MouseButton.LeftButton)  # "Don't send"
    assert not app.controller.in_line(first) and _mark(app, first) == ""
    assert composer.button.text() == "Send"
    assert app.window.chat_view.message_widget(2).status_note.text() == ""
    loader.last.release.set()
    _idle(app)
    path = app.history.active_path(first)
    assert [(m.role, m.content) for m in path][-2:] == [("assistant", "You said: Old one"),
                                                       ("user", "Never mind this one")]
    assert _asked(loader.last)[-1] == "Busy one"


def test_the_queued_rows_menu_takes_its_message_out(app, loader, monkeypatch):
    first, busy = _reply_elsewhere(app, loader)
    app.send("Waits here", wait=False)
    _open(app, busy)
    listing = app.window.conversation_list
    model = app.controller.conversations
    seen: list[list[str]] = []

    def answer(menu, where):
        seen.append([a.text() for a in menu.actions() if a.text()])
        return "stop"

    monkeypatch.setattr(listing, "run_menu", answer)
    listing.on_context_menu(listing.view.visualRect(model.index(model.row_of(first), 0))
                            .center())
    assert seen[0][0] == "Don't send the waiting message"
    assert not app.controller.line and app.controller.generating  # the reply goes on


def _quit_while_waiting(make_app, model_dir, loader):
    """A message waits its turn in the first chat when Hearth is closed; the next start,
    with the model loaded and the first chat open: (app, first chat)."""
    app = make_app()
    app.load(model_dir)
    first, _busy = _reply_elsewhere(app, loader)
    app.send("Keep me", wait=False)
    app.close()
    again = make_app()
    again.load(model_dir)
    again.controller.open_conversation(first)
    return again, first


def test_a_quit_while_a_message_waits_keeps_it_and_sending_it_again_answers_it(
        make_app, model_dir, loader):
    again, first = _quit_while_waiting(make_app, model_dir, loader)
    path = again.history.active_path(first)
    assert (path[-1].content, path[-1].provenance["unsent"]) == (
        "Keep me", "Not sent: Hearth was closed while it waited for the reply in "
                   "“Busy one”. Press Send now to ask.")
    note = again.window.chat_view.message_widget(2).unsent_note
    assert note.isVisibleTo(again.window) and note.text().startswith("Not sent")
    again.send("Keep me")
    _idle(again)
    path = again.history.active_path(first)
    assert [(m.role, m.content) for m in path[-2:]] == [("user", "Keep me"),
                                                       ("assistant", "You said: Keep me")]
    assert "unsent" not in path[-2].provenance


def test_send_now_on_the_unsent_message_answers_it_where_it_is(make_app, model_dir, loader,
                                                               tmp_path):
    again, first = _quit_while_waiting(make_app, model_dir, loader)
    again.window.resize(800, 600)
    again.window.chat_view.flush()
    again.qtbot.wait(50)
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    assert again.window.grab().save(str(folder / "unsent-send-now-800x600.png"))
    widget = again.window.chat_view.message_widget(2)
    button = widget.send_button
    assert button.isVisibleTo(again.window) and button.text() == "Send now"
    assert button.focusPolicy() == Qt.FocusPolicy.TabFocus  # reachable with the keyboard
    again.qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    _idle(again)
    path = again.history.active_path(first)
    assert [(m.role, m.content) for m in path[-2:]] == [("user", "Keep me"),
                                                       ("assistant", "You said: Keep me")]
    assert not {"unsent", "resend"} & set(path[-2].provenance)  # asked: the note goes
    assert [m.content for m in path].count("Keep me") == 1  # answered, not sent twice
    shown = again.window.chat_view.message_widget(2)
    assert not shown.send_button.isVisibleTo(again.window)
    assert not shown.unsent_note.isVisibleTo(again.window)


def test_a_message_sent_after_the_unsent_one_takes_it_along(make_app, model_dir, loader):
    again, first = _quit_while_waiting(make_app, model_dir, loader)
    again.send("And one more thing")
    _idle(again)
    path = again.history.active_path(first)
    assert [(m.role, m.content) for m in path[-3:]] == [
        ("user", "Keep me"), ("user", "And one more thing"),
        ("assistant", "You said: And one more thing")]
    assert [m.content for m in again.loader.last.calls[-1] if m.role == "user"][-2:] == [
        "Keep me", "And one more thing"]  # the model read both
    assert "unsent" not in path[-3].provenance  # so its note goes, with its Send now
    assert not again.window.chat_view.message_widget(2).send_button.isVisibleTo(again.window)


def test_screenshot_of_a_message_waiting_its_turn(app, loader, tmp_path):
    app.window.resize(800, 600)
    _reply_elsewhere(app, loader)
    app.send("And what about tea?", wait=False)
    app.window.chat_view.flush()
    app.qtbot.wait(50)
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    assert app.window.grab().save(str(folder / "waiting-turn-800x600.png"))
    loader.last.release.set()
    _idle(app)


def test_a_new_chats_waiting_message_goes_with_its_own_tools_and_libraries(
        make_app, model_dir, tmp_path):
    from app.chat.parts import Source
    from app.engine.types import ParsedToolCall
    from tests.tools.conftest import time_server
    from tests.ui.test_documents_ui import Opened, WordsEmbedder
    from tests.workers.fake_engine import FakeLoader

    loader = FakeLoader(tool_calls=[ParsedToolCall("call_t", "get_current_time",
                                                   '{"timezone": "UTC"}')])
    app = make_app(loader)
    app.load(model_dir)
    documents, tools = app.window.documents, app.window.tools
    documents.library_factory = lambda **_: Opened(tmp_path / "index.sqlite3",
                                                   WordsEmbedder())
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kettle.md").write_text("# Kettle\n\nDescale the kettle monthly.\n",
                                      encoding="utf-8")
    documents.index("Home", [folder])
    app.qtbot.waitUntil(lambda: documents.is_open and documents.indexing is None,
                        timeout=15000)
    assert tools.add_server(time_server())
    _first, busy = _reply_elsewhere(app, loader)  # no tools there: it does not call
    app.qtbot.keyClick(app.window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    tools.set_server_on("time", True)  # the unsent new chat's choices
    documents.set_library_on("Home", True)
    app.send("When should the kettle be descaled?", wait=False)
    waiting = app.controller.current_id
    assert app.controller.line == (waiting,)
    _open(app, busy)
    turns = len(loader.last.calls)
    loader.last.release.set()
    bar = app.window.approval_bar
    app.qtbot.waitUntil(bar.isVisible, timeout=30000)  # its tool asks, named by its chat
    assert bar.question.text().startswith("In the chat “")
    app.qtbot.mouseClick(bar.allow_once, Qt.MouseButton.LeftButton)
    _idle(app)
    assert any("get_current_time" in [t["function"]["name"] for t in offered or ()]
               for offered in loader.last.tools_offered[turns:])
    path = app.history.active_path(waiting)
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"]
    assert any(isinstance(p, Source) and p.document == "kettle.md" for p in path[0].parts)
    assert app.controller.current_id == busy
