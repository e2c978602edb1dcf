"""Real widgets end to end with the scripted fake engine: send, stream, stop, errors, edits."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt, QUrl

from app.errors import TemplateError

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def test_send_streams_reply_and_saves_everything(app):
    app.send("Hi there")
    assert app.rows() == [
        ("user", "Hi there", "complete"),
        ("assistant", "You said: Hi there", "complete"),
    ]
    assert "You said: Hi there" in app.window.chat_view.toPlainText()
    conv_id = app.controller.current_id
    stored = app.history.messages(conv_id)
    assert [(m.role, m.content, m.status) for m in stored] == app.rows()
    prov = stored[1].provenance
    assert prov["model"] == "tiny-model" and prov["provider"] == "cpu"
    assert prov["finish_reason"] == "eos"
    assert prov["stats"]["generated_tokens"] == 4
    # the fake model suggests 0.6: a new chat starts from the model's defaults
    assert prov["sampling"]["temperature"] == 0.6 and isinstance(prov["seed"], int)
    # conversation list: one chat, titled from the first message, selected
    listing = app.controller.conversations
    assert listing.rowCount() == 1
    assert listing.index(0, 0).data() == "Hi there"
    assert app.window.conversation_list.view.currentIndex().row() == 0
    # status bar
    assert "tok/s" in app.window.status.speed_label.text()
    assert app.window.status.context_label.text().startswith("Context ")
    assert app.window.status.model_label.text() == "Tiny Model"  # manifest display name
    assert "dml: not available" in app.window.status.provider_label.toolTip()


def test_user_message_saved_before_generation_and_reply_row_streaming(app, loader):
    loader.last.hold_after = 1
    app.send("Keep this safe", wait=False)
    app.qtbot.waitUntil(loader.last.held.is_set, timeout=5000)
    stored = app.history.messages(app.controller.current_id)
    assert [(m.role, m.content, m.status) for m in stored] == [
        ("user", "Keep this safe", "complete"),
        ("assistant", "", "streaming"),
    ]
    assert app.window.composer.button.text() == "Stop"
    loader.last.release.set()
    app.wait_idle()
    assert app.window.composer.button.text() == "Send"


def test_streaming_updates_only_the_last_message_throttled(app, loader):
    loader.last.script = [f" w{i}" for i in range(120)]
    loader.last.delay = 0.002
    for i in range(3):
        app.send(f"warm up {i}")
    view = app.window.chat_view
    full_before = view.render_count
    streams_before = view.stream_render_count
    app.send("stream now")
    assert view.render_count == full_before  # no full re-render while streaming
    partial = view.stream_render_count - streams_before
    assert 1 <= partial < 120  # throttled: far fewer renders than tokens
    assert view.toPlainText().count(" w119") == 4


def test_stop_with_escape_keeps_partial_reply(app, loader):
    loader.last.script = [f" t{i}" for i in range(100000)]
    loader.last.delay = 0.001
    app.send("Tell me everything", wait=False)
    app.qtbot.waitUntil(lambda: len(app.controller.chat_model.message(1).content) > 20)
    assert app.window.composer.button.text() == "Stop"
    app.qtbot.keyClick(app.window.composer.edit, Qt.Key.Key_Escape)
    app.wait_idle()
    content, status = app.rows()[1][1:]
    assert status == "stopped" and content.startswith(" t0 t1")
    stored = app.history.messages(app.controller.current_id)[1]
    assert (stored.status, stored.content) == ("stopped", content)
    assert stored.provenance["finish_reason"] == "cancelled"
    assert app.window.composer.button.text() == "Send"


def test_stop_button_stops(app, loader):
    loader.last.script = [f" t{i}" for i in range(100000)]
    loader.last.delay = 0.001
    app.send("go", wait=False)
    app.qtbot.waitUntil(lambda: app.controller.chat_model.message(1).content != "")
    app.qtbot.mouseClick(app.window.composer.button, Qt.MouseButton.LeftButton)
    app.wait_idle()
    assert app.rows()[1][2] == "stopped"


def test_engine_bug_mid_reply_keeps_partial_failed_and_opens_crash_dialog(app, loader):
    loader.last.script = ["one", " two", " three"]
    loader.last.error_after = 2
    app.send("break please")
    assert app.rows()[1] == ("assistant", "one two", "failed")
    stored = app.history.messages(app.controller.current_id)[1]
    assert (stored.content, stored.status) == ("one two", "failed")
    assert "internal error" in stored.provenance["error"]
    assert "internal error" in app.window.banner.text()
    app.qtbot.waitUntil(lambda: len(app.window.crash_dialogs) == 1)
    assert "scripted engine failure" in app.window.crash_dialogs[0].details
    # the app keeps working
    loader.last.error_after = None
    app.send("again")
    assert app.rows()[-1][2] == "complete"
    # the failed reply is not sent back to the model
    assert [m.content for m in loader.last.calls[-1]] == ["break please", "again"]


def test_readable_error_before_first_token_keeps_a_failed_reply_to_retry(app, loader):
    loader.last.error_before = TemplateError("The chat template of this model is broken.")
    app.send("hello")
    assert app.rows() == [("user", "hello", "complete"), ("assistant", "", "failed")]
    assert app.window.banner.text() == "The chat template of this model is broken."
    assert app.window.crash_dialogs == []
    stored = app.history.messages(app.controller.current_id)
    assert [(m.role, m.status) for m in stored] == [("user", "complete"),
                                                    ("assistant", "failed")]
    assert stored[1].provenance["error"] == "The chat template of this model is broken."


def test_regenerate_replaces_last_reply(app, loader):
    replies = iter([["first"], ["second"]])
    loader.last.script = lambda messages: next(replies)
    app.send("question")
    assert app.rows()[1][1] == "first"
    full_renders = app.window.chat_view.render_count
    app.window.chat_view.anchorClicked.emit(QUrl("hearth:regenerate/1"))
    app.wait_idle()
    app.window.chat_view.flush()
    text = app.window.chat_view.toPlainText()
    assert "second" in text and "first" not in text and text.count("question") == 1
    assert app.window.chat_view.render_count == full_renders  # only the tail was redrawn
    assert app.rows() == [("user", "question", "complete"), ("assistant", "second", "complete")]
    assert loader.last.calls[0] == loader.last.calls[1]
    stored = app.history.messages(app.controller.current_id)
    assert [m.content for m in stored] == ["question", "second"]


def test_edit_user_message_and_rerun_from_there(app, loader):
    app.send("one")
    app.send("two")
    app.send("three")
    app.window.chat_view.anchorClicked.emit(QUrl("hearth:edit/2"))
    assert app.window.composer.text() == "two"
    app.send("TWO!")
    assert [r[1] for r in app.rows()] == ["one", "You said: one", "TWO!", "You said: TWO!"]
    text = app.window.chat_view.toPlainText()
    assert "three" not in text and text.count("You said: one") == 1 and "TWO!" in text
    assert [m.content for m in loader.last.calls[-1]] == ["one", "You said: one", "TWO!"]
    stored = app.history.messages(app.controller.current_id)
    assert [m.content for m in stored] == [r[1] for r in app.rows()]


def test_delete_turn(app):
    app.send("keep")
    app.send("drop")
    app.window.chat_view.anchorClicked.emit(QUrl("hearth:delete/2"))
    assert [r[1] for r in app.rows()] == ["keep", "You said: keep"]
    stored = app.history.messages(app.controller.current_id)
    assert [m.content for m in stored] == ["keep", "You said: keep"]


def test_copy_message_and_code_block(app, loader):
    from PySide6.QtGui import QGuiApplication

    loader.last.script = ["Here:\n\n```python\nprint('hi')\n```\n"]
    app.send("code please")
    view = app.window.chat_view
    assert "hearth:code/1/0" in view.toHtml()
    view.anchorClicked.emit(QUrl("hearth:code/1/0"))
    assert QGuiApplication.clipboard().text() == "print('hi')"
    view.anchorClicked.emit(QUrl("hearth:copy/0"))
    assert QGuiApplication.clipboard().text() == "code please"


def test_switch_chats_while_idle_and_while_streaming(app, loader):
    app.send("first chat")
    first = app.controller.current_id
    app.qtbot.keyClick(app.window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert app.rows() == []
    loader.last.hold_after = 2
    loader.last.script = ["a", "b", "c", "d"]
    app.send("second chat", wait=False)
    app.qtbot.waitUntil(lambda: loader.last.held.is_set() and app.rows()[1][1] == "ab")
    second = app.controller.current_id
    assert second != first
    # switch away while the reply streams, then back
    listing = app.window.conversation_list
    row = app.controller.conversations.row_of(first)
    listing.view.clicked.emit(app.controller.conversations.index(row, 0))
    assert app.controller.current_id == first
    assert [r[1] for r in app.rows()] == ["first chat", "You said: first chat"]
    row = app.controller.conversations.row_of(second)
    listing.view.clicked.emit(app.controller.conversations.index(row, 0))
    assert app.rows()[1] == ("assistant", "ab", "streaming")
    loader.last.release.set()
    app.wait_idle()
    assert app.rows()[1] == ("assistant", "abcd", "complete")
    assert "abcd" in app.window.chat_view.toPlainText()


def test_view_follows_the_end_unless_scrolled_up(app, loader):
    loader.last.script = [f" line{i}\n\n" for i in range(80)]
    app.send("fill the view")
    bar = app.window.chat_view.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()
    bar.setValue(0)  # the user scrolls up to read
    app.send("more please")
    assert bar.value() == 0
    bar.setValue(bar.maximum())
    app.send("and more")
    assert bar.value() == bar.maximum()


def test_long_chat_renders_newest_page_and_streams_after_it(app):
    from app.ui.chat_view import PAGE

    h = app.history
    conv = h.create_conversation("long")
    total = 3 * PAGE + PAGE // 2
    for i in range(total):
        h.add_message(conv.id, "user" if i % 2 == 0 else "assistant", f"message number {i}.")
    app.controller.open_conversation(conv.id)
    view = app.window.chat_view
    text = view.toPlainText()
    first = total - PAGE
    assert f"message number {total - 1}." in text and f"message number {first - 1}." not in text
    assert f"message number {first}." in text
    assert f"Show earlier messages ({first} more)" in text
    app.send("newest")
    text = view.toPlainText()
    assert "You said: newest" in text
    assert f"message number {first}." in text
    shown = view.message_widgets()
    renders = view.render_count
    view.anchorClicked.emit(QUrl("hearth:more/0"))
    assert f"message number {first - PAGE}." in view.toPlainText()
    assert f"message number {first - PAGE - 1}." not in view.toPlainText()
    # the older page went in above: the shown widgets stay, nothing was rendered again
    assert view.message_widgets()[PAGE:] == shown and view.render_count == renders
    for _ in range(3):
        view.anchorClicked.emit(QUrl("hearth:more/0"))
    text = view.toPlainText()
    assert "message number 0." in text and "Show earlier" not in text
    assert [w.row for w in view.message_widgets()] == list(range(total + 2))
    # actions still address the right rows after paging
    view.anchorClicked.emit(QUrl(f"hearth:regenerate/{total + 1}"))
    app.wait_idle()
    assert app.rows()[-1] == ("assistant", "You said: newest", "complete")
    assert view.toPlainText().count("You said: newest") == 1


def test_showing_earlier_messages_keeps_the_view_and_the_tab_order(app):
    from app.ui.chat_view import PAGE
    from app.ui.message_widget import MessageWidget

    app.window.resize(800, 600)
    conv = app.history.create_conversation("long")
    for i in range(3 * PAGE):
        app.history.add_message(conv.id, "user" if i % 2 == 0 else "assistant", f"number {i}.")
    app.controller.open_conversation(conv.id)
    view = app.window.chat_view
    app.qtbot.waitUntil(lambda: view.verticalScrollBar().maximum() > 0)
    bar = view.verticalScrollBar()
    bar.setValue(0)  # the user scrolled up to "Show earlier messages"
    anchor = view.message_widgets()[0]
    assert anchor.row == 2 * PAGE
    before = anchor.y() - bar.value()
    view.show_earlier_button.click()
    assert view.message_widgets()[PAGE] is anchor
    assert abs((anchor.y() - bar.value()) - before) <= 2  # it did not jump away
    assert bar.value() > 0
    # Tab from "Show earlier messages" reaches the oldest shown message first
    widget = view.show_earlier_button.nextInFocusChain()
    while not isinstance(widget, MessageWidget) and widget is not view.show_earlier_button:
        parent = widget.parentWidget()
        while parent is not None and not isinstance(parent, MessageWidget):
            parent = parent.parentWidget()
        if parent is not None:
            widget = parent
            break
        widget = widget.nextInFocusChain()
    assert isinstance(widget, MessageWidget) and widget.row == PAGE
