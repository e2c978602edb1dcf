"""A message whose attachments are being read belongs to its chat: it is stored there at
once (its files "reading…" chips on it), answered there when they are read even when the
user opened another chat meanwhile, and nothing of it ever lands in another chat's composer.
None of its files readable, or Stop: it stays in its chat, unanswered, saying why.

The reading waits for the test's go-ahead (``Slow`` in test_documents_threads.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.chat.parts import Attachment
from app.documents.attach import attachment
from app.documents.sections import DocumentError
from tests.ui.test_documents_threads import Slow, chip_texts
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

QUESTION = "How often do I descale?"


@pytest.fixture
def app(make_app, model_dir):
    app = make_app(FakeLoader())  # replies "You said: <the last user message>"
    app.load(model_dir)
    return app


@pytest.fixture
def kettle(tmp_path) -> Path:
    path = tmp_path / "kettle.md"
    path.write_text("# Kettle\n\nDescale the kettle monthly with citric acid.\n",
                    encoding="utf-8")
    return path


def _slow_reader(app, slow: Slow, *, fail: bool = False):
    def read(path: Path, context: int, used: int) -> Attachment:
        slow.wait()
        if fail:
            raise DocumentError(f"{path.name} is not a document Hearth can read.")
        return attachment(path, context, used)

    app.window.documents.read_file = read


def _other_chat(app) -> str:
    """A chat with one exchange, then a new empty chat open (as "New chat" does)."""
    app.send("Hello there")
    other = app.controller.current_id
    app.controller.new_conversation()
    return other


def _held_message_in_new_chat(app, kettle, slow) -> str:
    app.window.attachments.add([kettle])
    app.send(QUESTION, wait=False)
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    return app.controller.current_id


def test_switching_chats_while_reading_the_message_is_answered_in_its_own_chat(app, kettle):
    slow = Slow()
    _slow_reader(app, slow)
    other = _other_chat(app)
    first = _held_message_in_new_chat(app, kettle, slow)
    assert first != other
    app.controller.open_conversation(other)
    assert app.rows() == [("user", "Hello there", "complete"),
                          ("assistant", "You said: Hello there", "complete")]
    app.window.composer.edit.setPlainText("A draft for the other chat")
    app.controller.open_conversation(first)  # back: the message still says "reading…"
    assert app.rows() == [("user", QUESTION, "reading")]
    assert chip_texts(app.window.chat_view.message_widget(0)) == ["kettle.md · reading…"]
    assert app.window.composer.text() == ""  # this chat's own (empty) box
    app.controller.open_conversation(other)
    assert app.window.composer.text() == "A draft for the other chat"
    slow.gate.set()
    app.qtbot.waitUntil(lambda: not app.controller.generating, timeout=10000)
    # answered in its own chat, out of sight; the open chat and its composer untouched
    assert app.controller.current_id == other
    assert app.rows() == [("user", "Hello there", "complete"),
                          ("assistant", "You said: Hello there", "complete")]
    assert app.window.composer.text() == "A draft for the other chat"
    path = app.history.active_path(first)
    assert [(m.role, m.status) for m in path] == [("user", "complete"),
                                                  ("assistant", "complete")]
    # the echoing engine's reply shows the prompt: the file went with the question
    assert path[0].content == QUESTION and path[1].content == (
        "You said: [File: kettle.md]\nKettle\n\nDescale the kettle monthly with citric "
        f"acid.\n\n{QUESTION}")
    (part,) = path[0].parts
    assert isinstance(part, Attachment) and "citric acid" in part.text
    assert len(app.history.active_path(other)) == 2
    app.controller.open_conversation(first)
    assert app.rows()[1] == ("assistant", path[1].content, "complete")
    assert chip_texts(app.window.chat_view.message_widget(0)) == ["kettle.md"]


def test_no_file_readable_after_a_switch_the_text_stays_in_its_own_chat(app, kettle):
    slow = Slow()
    _slow_reader(app, slow, fail=True)
    other = _other_chat(app)
    first = _held_message_in_new_chat(app, kettle, slow)
    app.controller.open_conversation(other)
    slow.gate.set()
    app.qtbot.waitUntil(lambda: not app.controller.generating, timeout=10000)
    assert "kettle.md is not a document Hearth can read." in app.window.banner.text()
    assert app.window.composer.text() == ""  # never into the other chat's composer
    assert len(app.rows()) == 2
    (stored,) = app.history.active_path(first)  # kept in its chat, unanswered
    assert stored.content == QUESTION and stored.parts == ()
    assert stored.provenance["unsent"] == ("Not sent: kettle.md is not a document Hearth "
                                           "can read.")
    app.controller.open_conversation(first)
    widget = app.window.chat_view.message_widget(0)
    assert widget.status_note.text() == "not sent"
    assert "kettle.md" in widget.status_note.toolTip()


def test_stop_while_reading_keeps_the_message_in_its_chat_unanswered(app, kettle):
    slow = Slow()
    _slow_reader(app, slow)
    first = _held_message_in_new_chat(app, kettle, slow)
    assert app.controller.generating
    app.window.composer.button.click()  # Stop
    assert not app.controller.generating
    slow.gate.set()
    app.qtbot.waitUntil(lambda: not app.window.documents.reader.running
                        or not app.window.documents.reading, timeout=5000)
    app.qtbot.wait(100)  # a read that ended anyway must not start a reply
    assert app.rows() == [("user", QUESTION, "complete")]
    (stored,) = app.history.active_path(first)
    assert stored.provenance["unsent"] == "Not sent: stopped while kettle.md was read."
    assert not app.controller.generating


def test_a_large_file_read_while_another_chat_is_open_is_searched_in_its_own_chat(
        app, tmp_path):
    from app.chat.parts import Source
    from tests.ui.test_documents_ui import Opened, WordsEmbedder

    app.window.documents.library_factory = lambda **_: Opened(tmp_path / "index.sqlite3",
                                                              WordsEmbedder())
    slow = Slow()
    _slow_reader(app, slow)
    big = tmp_path / "manual.txt"
    big.write_text("\n\n".join(f"Section {i}: the valve number {i} opens clockwise."
                               for i in range(600)), encoding="utf-8")  # does not fit whole
    other = _other_chat(app)
    app.window.attachments.add([big])
    app.send("Which way does valve 7 open?", wait=False)
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    first = app.controller.current_id
    app.controller.open_conversation(other)
    slow.gate.set()  # then it is indexed into the first chat's own collection
    app.qtbot.waitUntil(lambda: not app.controller.generating
                        and len(app.history.active_path(first)) == 2, timeout=15000)
    assert app.controller.current_id == other and len(app.rows()) == 2
    user, reply = app.history.active_path(first)
    (part,) = [p for p in user.parts if isinstance(p, Attachment)]
    assert part.text == ""  # searched, not whole
    sources = [p for p in user.parts if isinstance(p, Source)]
    assert sources and all(s.document == "manual.txt" for s in sources)
    assert reply.status == "complete" and "valve" in reply.content
    assert app.controller.retriever is None  # the open chat searches nothing
