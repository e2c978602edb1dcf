"""Remote engines through the real window and controllers: add a source, list its models,
pick one, chat, stop mid-stream, the server dying mid-reply (the partial reply is saved as
failed with the reason), offline mode, and no chat sent to a remote nobody picked."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt

from app.network import NetworkLog, install_guard, set_offline, uninstall_guard
from tests.remote.openai_stub import OpenAIStub, StubConfig
from tests.ui.conftest import on_ui_thread, remote_loader


@pytest.fixture
def stub():
    server = OpenAIStub(StubConfig(models=["stub-model", "other"])).start()
    yield server
    server.stop()


@pytest.fixture
def remote_app(make_app):
    """The window over a loader that loads remote targets for real, local folders fake."""
    return make_app(remote_loader())


def add_and_list(app, url: str, name: str = "Stub"):
    with app.qtbot.waitSignal(app.models.remotes_listed, timeout=5000) as blocker:
        source = app.models.add_remote(name, url, "sk-test")
    assert source is not None
    (listing,) = [entry for entry in blocker.args[0] if entry.source.id == source.id]
    return source, listing


def pick(app, target: str) -> None:
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=5000):
        assert app.models.use(target)


def test_pick_a_remote_model_and_chat(remote_app, stub, model_dir):
    app = remote_app
    app.load(model_dir)  # a local model first: adding a remote sends it nothing
    _source, listing = add_and_list(app, stub.url)
    assert [m.label for m in listing.models] == ["stub-model · Stub (remote)",
                                                 "other · Stub (remote)"]
    app.send("local question")
    assert stub.chats == []  # never a chat to a remote the user did not pick
    app.controller.new_conversation()
    pick(app, listing.models[0].target)
    assert app.controller.model_info.name == "stub-model · Stub"
    assert app.controller.model_info.provider == "remote"
    app.send("hello remote")
    assert app.rows()[-1] == ("assistant", "Hello, world!", "complete")
    (body,) = stub.chats
    assert body["messages"][-1] == {"role": "user", "content": "hello remote"}
    assert stub.requests[-1].headers["authorization"] == "Bearer sk-test"
    stored = app.history.messages(app.controller.current_id)[-1]
    assert stored.provenance["provider"] == "remote"
    assert stored.provenance["model_path"] == "remote:stub/stub-model"
    assert stored.provenance["stats"]["generated_tokens"] == 4  # the usage the server sent


def test_stop_mid_stream_keeps_the_partial_reply_stopped(remote_app, stub):
    stub.config.tokens = [f" t{i}" for i in range(400)]
    stub.config.delay = 0.01
    app = remote_app
    _, listing = add_and_list(app, stub.url)
    pick(app, listing.models[0].target)
    app.send("go on", wait=False)
    app.qtbot.waitUntil(lambda: len(app.controller.chat_model.message(1).content) > 10,
                        timeout=5000)
    app.qtbot.mouseClick(app.window.composer.button, Qt.MouseButton.LeftButton)
    app.wait_idle()
    _role, content, status = app.rows()[1]
    assert status == "stopped" and content.startswith(" t0 t1") and len(content) < 1500
    stored = app.history.messages(app.controller.current_id)[1]
    assert (stored.status, stored.content) == ("stopped", content)
    assert stored.provenance["finish_reason"] == "cancelled"


def test_server_dying_mid_reply_saves_the_partial_reply_as_failed(remote_app, stub):
    stub.config.die_after = 3
    app = remote_app
    messages: list[tuple[str, str]] = []
    keep = on_ui_thread(app.bridge.message_shown, lambda level, text: messages.append(
        (level, text)))
    _, listing = add_and_list(app, stub.url)
    pick(app, listing.models[0].target)
    app.send("tell me")
    assert app.rows()[1] == ("assistant", "Hello, world", "failed")
    stored = app.history.messages(app.controller.current_id)[1]
    assert (stored.status, stored.content) == ("failed", "Hello, world")
    error = stored.provenance["error"]
    assert "stopped answering mid-reply" in error and stub.url.removesuffix("/v1") in error
    assert ("error", error) in messages
    del keep


def test_offline_mode_blocks_a_remote_on_another_machine(remote_app, qtbot):
    app = remote_app
    uninstall_guard()
    install_guard(NetworkLog(capacity=20), offline=False)
    set_offline(True)
    try:
        with qtbot.waitSignal(app.models.remotes_listed, timeout=5000) as listed:
            source = app.models.add_remote("Far", "http://192.0.2.10:8000/v1",
                                           cleartext_ok=True)
        (listing,) = listed.args[0]
        assert listing.models == () and "offline mode is on" in listing.error
        with qtbot.waitSignal(app.controller.model_load_failed, timeout=5000) as failed:
            app.models.use(source.target("m"))
    finally:
        set_offline(False)
        uninstall_guard()
    assert "offline mode is on" in failed.args[0] and "192.0.2.10" in failed.args[0]
    assert app.controller.model_info is None


def test_remove_refuses_the_source_in_use(remote_app, stub):
    app = remote_app
    source, listing = add_and_list(app, stub.url)
    pick(app, listing.models[0].target)
    assert not app.models.remove_remote(source.id)
    assert [s.id for s in app.models.remote_sources()] == [source.id]


def test_remote_models_appear_in_the_model_picker_marked_remote_and_load_from_it(
    remote_app, stub, model_dir
):
    app = remote_app
    app.load(model_dir)
    add_and_list(app, stub.url)
    picker = app.window.model_picker
    texts = [picker.itemText(i) for i in range(picker.count())]
    assert texts[0] == "Tiny Model" and texts[-2:] == [
        "stub-model · Stub (remote)", "other · Stub (remote)"]
    index = picker.findData("remote:stub/other")
    assert "not here" in picker.itemData(index, Qt.ItemDataRole.ToolTipRole)
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=5000):
        picker.setCurrentIndex(index)
        app.window.on_model_picked(index)
    assert app.controller.model_info.path == "remote:stub/other"
    assert picker.currentText() == "other · Stub (remote)"
    assert stub.chats == []  # loading lists the model; nothing is sent until the user writes


def test_a_login_in_the_address_reaches_neither_history_nor_exports(remote_app, tmp_path):
    secret = "Hunter2-Sekrit"
    server = OpenAIStub(StubConfig(login=("alice", secret))).start()
    try:
        app = remote_app
        url = server.url.replace("http://", f"http://alice:{secret}@")
        with app.qtbot.waitSignal(app.models.remotes_listed, timeout=5000) as listed:
            source = app.models.add_remote("", url)
        (listing,) = listed.args[0]
        assert listing.error is None and [m.model_id for m in listing.models] == ["stub-model"]
        pick(app, listing.models[0].target)
        app.send("hello remote")
        assert app.rows()[-1] == ("assistant", "Hello, world!", "complete")
        info = app.controller.model_info
        shown = " ".join([info.name, info.provider_summary, *info.provider_reasons.values(),
                          app.window.status.provider_label.text(),
                          app.window.status.provider_label.toolTip()])
        assert server.url.removesuffix("/v1") in " ".join(info.provider_reasons.values())
        assert app.controller.export_conversation(tmp_path / "chat.json", "json")
        assert app.controller.export_conversation(tmp_path / "chat.md", "markdown")
        stored = app.history.messages(app.controller.current_id)[-1]
        for text in (shown, json.dumps(stored.provenance), source.name,
                     (tmp_path / "chat.json").read_text(encoding="utf-8"),
                     (tmp_path / "chat.md").read_text(encoding="utf-8")):
            assert secret not in text and "alice" not in text
    finally:
        server.stop()


def test_think_tags_from_a_remote_fold_into_the_thinking_block(remote_app, stub):
    """A server that writes <think>…</think> into the content: the window shows it folded,
    like a local model's thinking, and the answer's arithmetic stays literal."""
    stub.config.tokens = ["<think>", "7 times 3", "</think>", "10*3=30, 7*3=21"]
    app = remote_app
    _, listing = add_and_list(app, stub.url)
    pick(app, listing.models[0].target)
    app.send("times tables")
    stored = app.history.messages(app.controller.current_id)[-1]
    assert (stored.content, stored.reasoning) == ("10*3=30, 7*3=21", "7 times 3")
    widget = app.window.chat_view.message_widget(1)
    assert widget.thinking.isVisible() and not widget.thinking.expanded
    assert "<think>" not in widget.plain_text() and "<em>" not in widget.html()
    assert "10*3=30, 7*3=21" in widget.plain_text()
