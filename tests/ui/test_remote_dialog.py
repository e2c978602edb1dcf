"""The "Add a remote engine" dialog: Test connection says what failed, Add saves the source
with its key where the dialog said it would go."""

from __future__ import annotations

import keyring
import pytest
from keyring.backends import fail
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit

from app.network import NetworkLog, install_guard, set_offline, uninstall_guard
from app.remote.sources import REMOTE_SERVICE as SERVICE
from app.ui.remote_dialog import RemoteEngineDialog
from tests.network.tripwire import install_tripwire
from tests.remote.openai_stub import OpenAIStub, StubConfig


@pytest.fixture
def stub():
    server = OpenAIStub(StubConfig(api_key="sk-right")).start()
    yield server
    server.stop()


@pytest.fixture
def dialog(make_app, memory_keyring):
    app = make_app()
    box = RemoteEngineDialog(app.models, app.window)
    app.qtbot.addWidget(box)
    box.show()
    return app, box


def fill(qtbot, box: RemoteEngineDialog, name: str, url: str, key: str = "") -> None:
    for edit, text in ((box.name, name), (box.url, url), (box.key, key)):
        edit.clear()
        qtbot.keyClicks(edit, text)


def test_the_key_field_hides_what_is_typed_and_says_where_it_goes(dialog):
    _, box = dialog
    assert box.key.echoMode() == QLineEdit.EchoMode.Password
    assert "system keyring" in box.key_note.text()


def test_test_connection_says_exactly_what_failed(dialog, stub):
    app, box = dialog
    qtbot = app.qtbot
    fill(qtbot, box, "Stub", stub.url, "sk-wrong")
    qtbot.mouseClick(box.test_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "HTTP 401" in box.result.text(), timeout=5000)
    assert box.result.property("state") == "error" and box.test_button.isEnabled()
    fill(qtbot, box, "Stub", stub.url, "sk-right")
    qtbot.mouseClick(box.test_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "1 model (stub-model)" in box.result.text(), timeout=5000)
    assert box.result.property("state") == "ok"
    assert stub.requests[-1].headers["authorization"] == "Bearer sk-right"


def test_a_bad_address_is_refused_inline_without_a_request(dialog):
    app, box = dialog
    fill(app.qtbot, box, "x", "ftp://nowhere")
    app.qtbot.mouseClick(box.test_button, Qt.MouseButton.LeftButton)
    assert "is not an address Hearth can use" in box.result.text()
    assert app.models.remotes.pending() == []
    box.add_button.click()
    assert box.isVisible() and app.models.remote_sources() == []


def test_add_saves_the_source_and_its_key_in_the_keyring(dialog, stub, memory_keyring):
    app, box = dialog
    fill(app.qtbot, box, "GPU box", stub.url, "sk-right")
    with app.qtbot.waitSignal(app.models.remotes_listed, timeout=5000) as listed:
        box.add_button.click()
    assert not box.isVisible() and box.source is not None
    assert [s.name for s in app.models.remote_sources()] == ["GPU box"]
    assert memory_keyring.secrets == {(SERVICE, box.source.id): "sk-right"}
    assert [m.model_id for m in listed.args[0][0].models] == ["stub-model"]


def test_without_a_keyring_the_dialog_says_the_key_is_stored_unencrypted(make_app):
    previous = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        app = make_app()
        box = RemoteEngineDialog(app.models, app.window)
        app.qtbot.addWidget(box)
    finally:
        keyring.set_keyring(previous)
    assert "No system keyring is available" in box.key_note.text()
    assert "NOT encrypted" in box.key_note.text()


def test_plain_http_to_another_machine_waits_for_the_tick(dialog, monkeypatch):
    app, box = dialog
    uninstall_guard()
    reached = install_tripwire(monkeypatch)  # nothing may leave this machine
    install_guard(NetworkLog(capacity=20), offline=False)
    set_offline(True)  # the listing after Add is refused up front, no socket opened
    try:
        fill(app.qtbot, box, "Far", "http://192.0.2.1:8000/v1", "sk-far")
        assert box.url_note.isVisible() and "unencrypted" in box.url_note.text()
        assert box.cleartext_ok.isVisible() and not box.cleartext_ok.isChecked()
        assert not box.add_button.isEnabled() and not box.test_button.isEnabled()
        box.on_add_clicked()  # even if asked directly, it does not save
        assert box.isVisible() and app.models.remote_sources() == []
        assert "Send over plain http:// anyway" in box.result.text()
        box.cleartext_ok.setChecked(True)
        assert box.add_button.isEnabled() and box.test_button.isEnabled()
        with app.qtbot.waitSignal(app.models.remotes_listed, timeout=5000):
            box.add_button.click()
        assert not box.isVisible()
        assert [s.base_url for s in app.models.remote_sources()] == ["http://192.0.2.1:8000"]
    finally:
        set_offline(False)
        uninstall_guard()
    assert reached == []


def test_https_and_this_machine_need_no_tick_and_a_login_is_said_to_be_kept_apart(dialog):
    app, box = dialog
    for url in ("https://gpu.example.org/v1", "http://127.0.0.1:8000/v1",
                "http://localhost:8000/v1"):
        fill(app.qtbot, box, "x", url)
        assert not box.cleartext_ok.isVisible() and box.add_button.isEnabled()
        assert not box.url_note.isVisible()
    fill(app.qtbot, box, "x", "https://alice:pw@gpu.example.org/v1")
    assert box.url_note.isVisible() and "kept with the API keys" in box.url_note.text()


def test_a_refused_add_of_plain_http_saves_nothing(make_app):
    app = make_app()
    assert app.models.add_remote("Far", "http://192.0.2.1:8000/v1", "sk-far") is None
    assert app.models.remote_sources() == []
