"""A message with files sent while another chat answers waits its turn like a plain one: it
is stored in its chat at once (its text only), its row shows its files as chips and says
"waiting for its turn…", and its files are read when its turn comes — the budget rule then
applies against the context left at that time — and stored with it before it is answered.
"Don't send" or a quit while it waits leaves it stored, unanswered, with a sentence naming
the files that were not read (no Send now: they are asked for again).

The reply in the other chat is held part way (``FakeEngine.hold_after``) until the test lets
it go."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.chat.parts import Attachment
from tests.ui.test_busy_chat import _open, _reply_elsewhere
from tests.ui.test_documents_threads import chip_texts

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

QUESTION = "What colour is the kettle?"


def _note(tmp_path: Path) -> Path:
    note = tmp_path / "note.txt"
    note.write_text("The kettle is silver.\n", encoding="utf-8")
    return note


def _send_with(app, path: Path, text: str = QUESTION) -> None:
    app.window.attachments.add([path])
    app.send(text, wait=False)


def _idle(app) -> None:
    app.qtbot.waitUntil(lambda: not app.controller.generating and not app.controller.line,
                        timeout=15000)


def _row(app, row: int):
    app.window.chat_view.flush()
    return app.window.chat_view.message_widget(row)


def test_a_message_with_files_waits_its_turn_then_its_files_are_read_and_answered(
        app, loader, tmp_path):
    first, busy = _reply_elsewhere(app, loader)
    note = _note(tmp_path)
    _send_with(app, note)
    # it went: the box and the tray are empty, and it waits in its chat
    assert app.window.composer.text() == "" and app.window.attachments.files == []
    assert app.controller.line == (first,)
    stored = app.history.active_path(first)[-1]
    assert (stored.role, stored.content, stored.parts) == ("user", QUESTION, ())
    widget = _row(app, 2)
    assert widget.status_note.text() == "waiting for its turn…"
    assert chip_texts(widget) == ["note.txt"]
    app.window.resize(800, 600)
    app.qtbot.wait(50)
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    assert app.window.grab().save(str(folder / "waiting-turn-files-800x600.png"))
    _open(app, busy)
    _open(app, first)  # opened again, its row still shows what it brings
    assert chip_texts(_row(app, 2)) == ["note.txt"]
    assert _row(app, 2).status_note.text() == "waiting for its turn…"
    loader.last.release.set()
    _idle(app)
    path = app.history.active_path(first)
    (part,) = [p for p in path[-2].parts if isinstance(p, Attachment)]
    assert part.name == "note.txt" and "silver" in part.text  # read at its turn, whole
    prompt = loader.last.calls[-1]
    assert prompt[-1].content.startswith("[File: note.txt]") and QUESTION in \
        prompt[-1].content
    assert [(m.role, m.status) for m in path[-2:]] == [("user", "complete"),
                                                       ("assistant", "complete")]
    assert chip_texts(_row(app, 2)) == ["note.txt"] and _row(app, 2).status_note.text() == ""


def test_waiting_messages_with_and_without_files_go_in_the_order_they_were_sent(
        app, loader, tmp_path):
    first, _busy = _reply_elsewhere(app, loader)
    _send_with(app, _note(tmp_path))
    app.qtbot.keyClick(app.window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    app.send("Plain, second in line", wait=False)
    second = app.controller.current_id
    assert app.controller.line == (first, second)
    loader.last.release.set()
    _idle(app)
    asked = [next(m.content for m in reversed(call) if m.role == "user")
             for call in loader.last.calls]
    assert asked[-2].startswith("[File: note.txt]")
    assert asked[-1] == "Plain, second in line"
    assert app.history.active_path(second)[-1].status == "complete"
    assert app.controller.current_id == second  # nothing was opened over it


def test_dont_send_leaves_it_unanswered_naming_its_files(app, loader, tmp_path):
    first, _busy = _reply_elsewhere(app, loader)
    _send_with(app, _note(tmp_path))
    composer = app.window.composer
    assert composer.button.text() == "Don't send"
    app.qtbot.mouseClick(composer.button, Qt.MouseButton.LeftButton)
    assert not app.controller.line
    sentence = ("Not sent: stopped while it waited its turn, so note.txt was not read. "
                "Attach it again to ask.")
    stored = app.history.active_path(first)[-1]
    assert (stored.content, stored.parts, stored.provenance) == (
        QUESTION, (), {"unsent": sentence})  # no "resend": its file is asked for again
    widget = _row(app, 2)
    assert chip_texts(widget) == [] and widget.status_note.text() == "not sent"
    assert widget.unsent_note.isVisibleTo(app.window) and widget.unsent_note.text() == \
        sentence
    assert not widget.send_button.isVisibleTo(app.window)
    loader.last.release.set()
    _idle(app)
    assert not any(QUESTION in m.content for call in loader.last.calls for m in call)


def test_a_quit_while_it_waits_keeps_it_naming_its_files(make_app, model_dir, loader,
                                                           tmp_path):
    app = make_app()
    app.load(model_dir)
    first, _busy = _reply_elsewhere(app, loader)
    _send_with(app, _note(tmp_path))
    app.close()
    again = make_app()
    again.load(model_dir)
    again.controller.open_conversation(first)
    stored = again.history.active_path(first)[-1]
    assert (stored.content, stored.provenance) == (QUESTION, {
        "unsent": "Not sent: Hearth was closed while it waited for the reply in “Busy one”, "
                  "so note.txt was not read. Attach it again to ask."})
    widget = _row(again, 2)
    assert widget.unsent_note.isVisibleTo(again.window)
    assert not widget.send_button.isVisibleTo(again.window)


def test_a_long_file_waiting_its_turn_is_indexed_then_searched(app, loader, tmp_path):
    from tests.ui.test_documents_ui import Opened, WordsEmbedder

    app.window.documents.library_factory = lambda **_: Opened(tmp_path / "index.sqlite3",
                                                              WordsEmbedder())
    first, _busy = _reply_elsewhere(app, loader)
    big = tmp_path / "manual.txt"
    big.write_text("\n\n".join(f"Section {i}: the valve number {i} opens clockwise."
                               for i in range(600)), encoding="utf-8")  # ~27k chars > 2k ctx
    _send_with(app, big, "Which way does valve 7 open?")
    assert chip_texts(_row(app, 2)) == ["manual.txt"]  # not read yet: nothing decided
    loader.last.release.set()
    _idle(app)
    app.qtbot.waitUntil(lambda: app.window.documents.indexing is None, timeout=15000)
    path = app.history.active_path(first)
    (part,) = [p for p in path[-2].parts if isinstance(p, Attachment)]
    assert part.text == ""  # searched per question, in the chat's own collection
    assert "valve number 7" in loader.last.calls[-1][-1].content
    assert path[-1].status == "complete"
    assert chip_texts(_row(app, 2)) == ["manual.txt · searched"]


def test_no_model_when_its_turn_comes_leaves_it_unsent_naming_its_files(make_app, tmp_path):
    from tests.ui.conftest import make_model_folder

    app = make_app()
    app.loader.load_delay = 0.3
    app.controller.load_model(make_model_folder("broken-model"))  # it fails to load
    app.send("hello?", wait=False)  # waits for the model
    app.controller.new_conversation()
    _send_with(app, _note(tmp_path))  # waits its turn behind it
    second = app.controller.current_id
    assert app.controller.line == (second,)
    app.qtbot.waitUntil(lambda: not app.controller.line and not app.controller.generating,
                        timeout=5000)
    stored = app.history.active_path(second)[-1]
    assert (stored.content, stored.parts, stored.provenance) == (QUESTION, (), {
        "unsent": "Not sent: no model was loaded when its turn came, so note.txt was not "
                  "read. Pick a model, then attach it again."})
    assert _row(app, 0).unsent_note.text() == stored.provenance["unsent"]
    assert app.loader.engines == []


def test_a_file_gone_before_its_turn_leaves_the_message_unsent_saying_so(app, loader,
                                                                        tmp_path):
    first, _busy = _reply_elsewhere(app, loader)
    note = _note(tmp_path)
    _send_with(app, note)
    note.unlink()  # moved away while the message waited
    loader.last.release.set()
    _idle(app)
    stored = app.history.active_path(first)[-1]
    assert (stored.role, stored.content, stored.parts) == ("user", QUESTION, ())
    assert stored.provenance["unsent"].startswith("Not sent: ")
    assert "note.txt" in stored.provenance["unsent"]
    assert "resend" not in stored.provenance
    assert not any(QUESTION in m.content for call in loader.last.calls for m in call)
    assert "note.txt" in app.window.banner.text()  # said at once, naming the file
