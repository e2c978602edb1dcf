"""A failed reply stays on its turn with a Retry: through the real window, with a remote
stand-in server that fails until it recovers. The question is never shown (or stored)
twice: Retry and sending the same text again both answer it where it is."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from tests.remote.openai_stub import OpenAIStub, StubConfig
from tests.ui.conftest import app_on_remote


@pytest.fixture
def stub():
    server = OpenAIStub(StubConfig(fail_status=500)).start()
    yield server
    server.stop()


@pytest.fixture
def remote_app(make_app, stub):
    return app_on_remote(make_app, stub.url)


def stored(app) -> list[tuple[str, str, str]]:
    return [(m.role, m.content, m.status)
            for m in app.history.messages(app.controller.current_id)]


def test_a_failed_reply_offers_retry_and_retry_answers_the_same_turn(remote_app, stub):
    app = remote_app
    app.send("hello remote")
    assert app.rows() == [("user", "hello remote", "complete"), ("assistant", "", "failed")]
    assert stored(app) == app.rows()
    assert "answered HTTP 500" in app.window.banner.text()
    view = app.window.chat_view
    failed = view.message_widget(1)
    assert failed.retry_button.isVisibleTo(app.window)
    assert not view.message_widget(0).retry_button.isVisibleTo(app.window)
    assert "overloaded" in failed.status_note.toolTip()

    app.qtbot.mouseClick(failed.retry_button, Qt.MouseButton.LeftButton)  # still failing
    app.wait_idle()
    assert app.rows() == [("user", "hello remote", "complete"), ("assistant", "", "failed")]
    assert len(stub.chats) == 2

    stub.config.fail_status = None  # the server recovers
    app.qtbot.mouseClick(view.message_widget(1).retry_button, Qt.MouseButton.LeftButton)
    app.wait_idle()
    assert app.rows() == [("user", "hello remote", "complete"),
                          ("assistant", "Hello, world!", "complete")]
    assert stored(app) == app.rows()  # one question, one reply: no orphan, no variant
    assert app.window.banner.text() == ""  # the failure's notice went with it
    reply = app.controller.chat_model.message(1)
    assert reply.variant_count == 1
    assert not view.message_widget(1).retry_button.isVisibleTo(app.window)
    assert [m["content"] for m in stub.chats[-1]["messages"]] == ["hello remote"]
    view.flush()
    assert view.toPlainText().count("hello remote") == 1


def test_sending_the_unanswered_question_again_retries_it(remote_app, stub):
    app = remote_app
    app.send("hello remote")
    assert app.rows()[-1] == ("assistant", "", "failed")
    stub.config.fail_status = None
    app.send("hello remote")  # the user types it again instead of pressing Retry
    assert app.rows() == [("user", "hello remote", "complete"),
                          ("assistant", "Hello, world!", "complete")]
    assert stored(app) == app.rows()
    assert app.window.composer.text() == ""
    app.send("hello remote")  # answered: the same text again is a new question
    assert [r[0] for r in app.rows()] == ["user", "assistant", "user", "assistant"]


def test_retry_of_a_partly_written_reply_keeps_the_part_beside_the_new_one(remote_app, stub):
    app = remote_app
    stub.config.fail_status = None
    stub.config.die_after = 2
    app.send("tell me")
    assert app.rows()[1] == ("assistant", "Hello,", "failed")
    stub.config.die_after = None
    app.qtbot.mouseClick(app.window.chat_view.message_widget(1).retry_button,
                         Qt.MouseButton.LeftButton)
    app.wait_idle()
    assert app.rows() == [("user", "tell me", "complete"),
                          ("assistant", "Hello, world!", "complete")]
    reply = app.controller.chat_model.message(1)
    assert (reply.variant_index, reply.variant_count) == (1, 2)  # the part is one ‹ away
    assert [r for r in stored(app) if r[0] == "user"] == [("user", "tell me", "complete")]
