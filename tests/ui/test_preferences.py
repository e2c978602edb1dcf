"""The settings window: built from the settings table, applies live, persists; the token
goes to the keyring; the provider list says why a provider cannot run; models can move."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QComboBox

from app.paths import settings_path
from app.settings import SETTINGS, Settings
from app.ui.theme import colors_for
from tests.models.hub_server import FakeHub, allow_hub_requests
from tests.ui.conftest import make_model_folder

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

REASONS = {"cpu": None, "dml": "DirectML runs on Windows only",
           "cuda": "no CUDA device found (no NVIDIA GPU or driver)", "coreml": None}


@pytest.fixture(autouse=True)
def system_theme_after():
    yield
    from app.ui.theme import apply_theme

    apply_theme("system")


def open_preferences(app):
    from app.ui.preferences import PreferencesDialog

    window = app.window
    window.preferences = PreferencesDialog(
        app.settings, app.models, provider_reasons=REASONS, server=window.server, parent=window
    )
    window.preferences.changed.connect(window.apply_setting)
    window.preferences_action.trigger()
    app.qtbot.waitExposed(window.preferences)
    return window.preferences


def test_every_setting_with_a_section_gets_a_control_on_its_tab(make_app):
    prefs = open_preferences(make_app())
    tabs = [prefs.tabs.tabText(i) for i in range(prefs.tabs.count())]
    assert tabs == ["General", "Models", "Hardware", "Local server", "Privacy"]
    expected = {s.key for s in SETTINGS if s.section}
    assert set(prefs.editors) == expected
    for key, editor in prefs.editors.items():
        assert editor.accessibleName(), key


def test_the_theme_switches_live_and_persists(make_app):
    app = make_app()
    prefs = open_preferences(app)
    combo: QComboBox = prefs.editors["theme"]
    combo.setCurrentIndex(combo.findData("dark"))
    assert colors_for(QApplication.instance().palette()).dark
    assert app.window.theme_actions["dark"].isChecked()
    combo.setCurrentIndex(combo.findData("light"))
    assert not colors_for(QApplication.instance().palette()).dark
    prefs.close()
    assert json.loads(settings_path().read_text())["theme"] == "light"


def test_zoom_shortcuts_change_the_chat_text_size_and_ctrl_0_resets(make_app):
    app = make_app()
    window = app.window
    base = window.chat_view.font().pointSize()
    window.zoom_in_action.trigger()
    window.zoom_in_action.trigger()
    assert window.chat_view.font().pointSize() == base + 2
    assert Settings().get("font_size") == base + 2
    window.zoom_reset_action.trigger()
    assert window.chat_view.font().pointSize() == QApplication.font().pointSize()
    assert Settings().get("font_size") == 0


def test_with_ctrl_enter_to_send_enter_adds_a_line(app):
    prefs = open_preferences(app)
    combo: QComboBox = prefs.editors["send_key"]
    combo.setCurrentIndex(combo.findData("ctrl+enter"))
    edit = app.window.composer.edit
    edit.setFocus()
    edit.setPlainText("first")
    edit.moveCursor(edit.textCursor().MoveOperation.End)
    app.qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert edit.toPlainText() == "first\n" and not app.controller.generating
    assert "Ctrl+Enter sends" in edit.placeholderText()
    app.qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    app.wait_idle()
    assert app.rows()[0][:2] == ("user", "first")


def test_the_hub_token_goes_to_the_keyring_and_is_never_shown_or_written(
    make_app, memory_keyring
):
    app = make_app()
    prefs = open_preferences(app)
    prefs.tabs.setCurrentIndex(1)
    prefs.token_edit.setText("hf_secret_value")
    prefs.token_edit.editingFinished.emit()
    assert memory_keyring.secrets == {("Hearth", "hub_token"): "hf_secret_value"}
    assert prefs.token_edit.text() == ""
    assert "saved" in prefs.token_edit.placeholderText()
    prefs.close()
    assert "hf_secret_value" not in settings_path().read_text()
    assert app.models.hub_options()[1] == "hf_secret_value"


def test_only_usable_providers_can_be_picked_and_the_others_say_why(make_app):
    prefs = open_preferences(make_app())
    combo: QComboBox = prefs.editors["provider"]
    model = combo.model()
    enabled = {combo.itemData(i): model.item(i).isEnabled() for i in range(combo.count())}
    assert enabled == {"auto": True, "cpu": True, "dml": False, "cuda": False, "coreml": True}
    cuda = combo.findData("cuda")
    assert "no CUDA device" in combo.itemText(cuda)
    assert "no CUDA device" in model.item(cuda).toolTip()


def test_test_connection_says_what_happened(make_app, monkeypatch):
    allow_hub_requests(monkeypatch)
    app = make_app()
    with FakeHub() as hub:
        app.settings.set("hub_endpoint", hub.url)
        prefs = open_preferences(app)
        with app.qtbot.waitSignal(app.models.connection_tested, timeout=10000) as blocker:
            prefs.test_button.click()
        assert blocker.args[0] is True and hub.url in blocker.args[1]
        assert prefs.token_note.text().startswith("✓")
    app.settings.set("hub_endpoint", "http://127.0.0.1:9")  # nothing listens there
    with app.qtbot.waitSignal(app.models.connection_tested, timeout=20000) as blocker:
        prefs.test_button.click()
    assert blocker.args[0] is False and "127.0.0.1:9" in blocker.args[1]
    assert prefs.token_note.text().startswith("✗")


def test_moving_the_models_folder_moves_the_models_and_the_picker_follows(make_app, tmp_path):
    make_model_folder("alpha", "Alpha")
    make_model_folder("beta", "Beta")
    app = make_app()
    prefs = open_preferences(app)
    target = tmp_path / "elsewhere"
    prefs.ask_folder = lambda: str(target)
    with app.qtbot.waitSignal(app.models.models_changed, timeout=10000):
        prefs.move_button.click()
    assert sorted(p.name for p in target.iterdir()) == ["alpha", "beta"]
    assert Settings().get("models_folder") == str(target)
    picker = app.window.model_picker
    app.qtbot.waitUntil(lambda: picker.count() == 2)
    assert [picker.itemText(i) for i in range(2)] == ["Alpha", "Beta"]
    assert all(str(target) in picker.itemData(i) for i in range(2))


def test_geometry_splitter_and_the_last_chat_are_restored(make_app, model_dir):
    first = make_app()
    first.load(model_dir)
    first.send("remember me")
    conversation = first.controller.current_id
    first.window.resize(720, 520)  # the offscreen screen is 800x600
    first.close()
    second = make_app()
    assert second.controller.current_id == conversation
    assert [r[1] for r in second.rows()][:1] == ["remember me"]
    assert (second.window.width(), second.window.height()) == (720, 520)


def test_the_shortcuts_sheet_lists_every_action_shortcut(make_app):
    app = make_app()
    rows = dict(app.window.shortcut_list())
    assert rows["New chat"] and rows["Models"] and rows["Settings"]
    assert rows["Send the message"] == "Enter" and rows["Stop the reply"] == "Esc"
    app.window.shortcuts_action.trigger()
    assert "Ctrl+M" in app.window.shortcuts_box.text()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_local_server_switch_serves_the_loaded_model_and_stops(app):
    import httpx2

    prefs = open_preferences(app)
    port = _free_port()
    prefs.editors["server_port"].setValue(port)
    with app.qtbot.waitSignal(app.window.server.started, timeout=10000):
        prefs.editors["server_enabled"].setChecked(True)
    assert app.window.server.address == f"http://127.0.0.1:{port}/v1"
    assert f"127.0.0.1:{port}" in prefs.server_status.text()
    listed = httpx2.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
    assert [m["id"] for m in listed["data"]] == [app.window.server.model_id]
    prefs.editors["server_lan"].setChecked(True)  # no API key yet: refused, with a reason
    app.qtbot.waitUntil(lambda: prefs.server_status.text().startswith("✗"), timeout=10000)
    assert "API key" in prefs.server_status.text()
    prefs.editors["server_lan"].setChecked(False)
    app.qtbot.waitUntil(lambda: app.window.server.running, timeout=10000)
    prefs.editors["server_enabled"].setChecked(False)
    assert not app.window.server.running
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)
    assert Settings().get("server_enabled") is False
