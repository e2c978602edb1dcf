"""The model names a chat after its first reply (app/chat/title.py through the generation
worker, app/ui/controller.py), through the real window: with a scripted engine, the real
tiny engine and a remote stand-in server. The title comes after the reply, gives way to a
new message, never replaces a name the user gave, and is not asked of a remote model
when the setting says so."""

from __future__ import annotations

import threading

import pytest

from app.chat.title import INSTRUCTION, TITLE_MAX_CHARS, TITLE_MAX_TOKENS
from app.loading import default_loader
from tests.remote.openai_stub import OpenAIStub, StubConfig
from tests.ui.conftest import app_on_remote, on_ui_thread
from tests.workers.fake_engine import FakeEngine, FakeLoader, echo_script

TITLE_TOKENS = ["“Fruit", " talk", ".”"]


def is_title_call(messages) -> bool:
    return bool(messages) and messages[0].content == INSTRUCTION


class TitleScript:
    """The scripted engine's answers: the echo for the chat, TITLE_TOKENS for a title.
    ``hold`` titles wait (``FakeEngine.hold_after``: until released or cancelled)."""

    def __init__(self) -> None:
        self.engine: FakeEngine | None = None
        self.hold = 0
        self.order: list[str] = []

    def __call__(self, messages):
        assert self.engine is not None
        title = is_title_call(messages)
        self.order.append("title" if title else "chat")
        if title and self.hold:
            self.hold -= 1
            self.engine.hold_after = 0
        else:
            self.engine.hold_after = None
        return list(TITLE_TOKENS) if title else echo_script(messages)


@pytest.fixture
def titled_app(make_app, model_dir):
    script = TitleScript()
    loader = FakeLoader(script=script)
    app = make_app(loader)
    app.settings.set("chat_titles", "model")
    app.load(model_dir)
    script.engine = loader.last
    app.script = script
    return app


def drain(app) -> None:
    """Wait until the worker has run everything posted so far (a title asked included)."""
    ran = threading.Event()
    app.controller.host.post(ran.set)
    assert ran.wait(10)
    app.qtbot.wait(10)  # and its signals reached the UI thread


def title_of(app) -> str:
    return app.history.get_conversation(app.controller.current_id).title


def test_the_title_arrives_after_the_reply(titled_app):
    app = titled_app
    seen: list[str] = []
    app.controller.generating_changed.connect(
        lambda busy: seen.append("reply done") if not busy else None)
    app.controller.conversation_titled.connect(lambda cid, title: seen.append(title))
    with app.qtbot.waitSignal(app.controller.conversation_titled, timeout=5000) as titled:
        app.send("Tell me about apples", wait=False)
    assert seen == ["reply done", "Fruit talk"]
    assert titled.args == [app.controller.current_id, "Fruit talk"]
    assert app.rows()[-1] == ("assistant", "You said: Tell me about apples", "complete")
    assert title_of(app) == "Fruit talk"
    assert app.controller.conversations.data(app.controller.conversations.index(0)) \
        == "Fruit talk"
    assert app.script.order == ["chat", "title"]
    question = app.script.engine.calls[1][1].content
    assert "Tell me about apples" in question and "You said: Tell me about apples" in question
    app.send("And pears?")  # named once: later replies ask for no title
    drain(app)
    assert app.script.order == ["chat", "title", "chat"]
    assert title_of(app) == "Fruit talk"


def test_a_rename_before_the_title_arrives_wins(titled_app):
    app = titled_app
    app.script.hold = 1
    app.send("Tell me about apples")
    app.qtbot.waitUntil(app.script.engine.held.is_set, timeout=5000)  # the title is writing
    cid = app.controller.current_id
    app.controller.rename_conversation(cid, "My apples")  # as the chat list's editor does
    titles: list[str] = []
    keep = on_ui_thread(app.controller.worker.titled, lambda _request, t: titles.append(t))
    app.script.engine.release.set()
    app.qtbot.waitUntil(lambda: titles == ["Fruit talk"], timeout=5000)  # it came, unused
    assert title_of(app) == "My apples"
    assert app.controller.conversations.data(app.controller.conversations.index(0)) \
        == "My apples"
    del keep


def test_a_new_message_goes_before_the_title(titled_app):
    app = titled_app
    app.script.hold = 1
    app.send("Tell me about apples")
    app.qtbot.waitUntil(app.script.engine.held.is_set, timeout=5000)
    cid = app.controller.current_id
    with app.qtbot.waitSignal(app.controller.conversation_titled, timeout=5000):
        app.send("And pears?", wait=False)  # the held title gives way at once
    assert app.rows()[-1] == ("assistant", "You said: And pears?", "complete")
    assert app.script.order == ["chat", "title", "chat", "title"]
    assert title_of(app) == "Fruit talk"
    assert app.controller.current_id == cid
    # the title asked again is still the first exchange's
    assert "Tell me about apples" in app.script.engine.calls[-1][1].content
    assert "And pears?" not in app.script.engine.calls[-1][1].content


def test_titles_off_keeps_the_first_message(titled_app):
    app = titled_app
    app.settings.set("chat_titles", "off")
    app.send("Tell me about apples")
    drain(app)
    assert app.script.order == ["chat"]
    assert title_of(app) == "Tell me about apples"


@pytest.fixture
def stub():
    server = OpenAIStub(StubConfig(tokens=["“Hello", ",", " world", "!”"])).start()
    yield server
    server.stop()


@pytest.fixture
def remote_app(make_app, stub):
    return app_on_remote(make_app, stub.url)


def test_a_remote_model_names_the_chat_unless_the_setting_says_not(remote_app, stub):
    app = remote_app
    app.settings.set("chat_titles", "model")
    with app.qtbot.waitSignal(app.controller.conversation_titled, timeout=5000):
        app.send("hello remote", wait=False)
    assert title_of(app) == "Hello, world"
    first, title = stub.chats
    assert first["messages"][-1]["content"] == "hello remote"
    assert title["max_tokens"] == TITLE_MAX_TOKENS and title["temperature"] == 0.0
    assert title["messages"][0]["content"] == INSTRUCTION

    app.settings.set("chat_titles", "local")  # not with a remote model
    app.controller.new_conversation()
    app.send("hello again")
    drain(app)
    assert len(stub.chats) == 3  # the reply, nothing more
    assert title_of(app) == "hello again"


def test_the_real_tiny_engine_names_the_chat(make_app, gqa_model_dir):
    app = make_app(default_loader)
    app.settings.set("chat_titles", "model")
    app.load(gqa_model_dir)
    panel = app.window.settings_panel
    panel.editors["temperature"].setValue(0.0)
    panel.editors["max_tokens"].setValue(8)
    done: list[tuple[object, str]] = []
    keep = on_ui_thread(app.controller.worker.titled, lambda *args: done.append(args))
    app.send("Hello there", wait=False)
    app.qtbot.waitUntil(lambda: bool(done), timeout=60000)
    assert app.rows()[1][2] == "complete"
    ((request, title),) = done
    assert request.conversation_id == app.controller.current_id
    assert 0 < len(title) <= TITLE_MAX_CHARS and "\n" not in title and title == title.strip()
    assert title_of(app) == title
    app.send("Again", wait=False)  # the worker is free for the next reply
    app.wait_idle(timeout=60000)
    assert app.rows()[-1][2] == "complete" and len(done) == 1
    del keep
