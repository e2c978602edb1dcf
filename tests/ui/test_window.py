"""Window chrome: model picker, first run, status bar, shortcuts, side panel, errors, a11y."""

from __future__ import annotations

import sys

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QComboBox,
    QLineEdit,
    QListView,
    QToolBar,
    QToolButton,
)

from app.errors import DiskFullError
from app.ui.main_window import CHAT_PAGE, WELCOME_PAGE
from tests.ui.conftest import make_model_folder

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def test_picker_lists_installed_models_and_load_failure_keeps_previous(make_app):
    good = make_model_folder("good", "Good Model")
    make_model_folder("broken", "Broken Model")
    (good.parent / "not-a-model").mkdir()
    app = make_app()
    picker = app.window.model_picker
    assert [picker.itemText(i) for i in range(picker.count())] == ["Broken Model", "Good Model"]
    assert app.window.stack.currentIndex() == CHAT_PAGE
    app.load(good)
    assert picker.currentText() == "Good Model"
    with app.qtbot.waitSignal(app.controller.model_load_failed, timeout=5000):
        picker.activated.emit(picker.findText("Broken Model"))
        assert app.window.load_progress.isVisible()
    assert "has no model.onnx" in app.window.banner.text()
    assert picker.currentText() == "Good Model"
    assert not app.window.load_progress.isVisible()
    app.send("still works?")
    assert app.rows()[1][1] == "You said: still works?"
    assert app.controller.model_info.name == "good"


def test_load_bug_opens_crash_dialog_and_app_keeps_running(make_app):
    make_model_folder("buggy")
    ok = make_model_folder("ok")
    app = make_app()
    with app.qtbot.waitSignal(app.controller.model_load_failed, timeout=5000):
        app.controller.load_model(ok.parent / "buggy")
    app.qtbot.waitUntil(lambda: len(app.window.crash_dialogs) == 1)
    assert "unexpected bug while loading" in app.window.crash_dialogs[0].details
    app.load(ok)
    app.send("fine")
    assert app.rows()[1][2] == "complete"


def test_first_run_panel_sets_up_starter(make_app, monkeypatch):
    import types

    calls = []

    def ensure_starter(progress=None, check=None):
        progress(0.5, "Converting")
        calls.append(True)
        return make_model_folder("starter", "Starter")

    fake = types.ModuleType("app.models.starter")
    fake.ensure_starter = ensure_starter
    monkeypatch.setitem(sys.modules, "app.models.starter", fake)
    app = make_app()
    assert app.window.stack.currentIndex() == WELCOME_PAGE
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=5000):
        app.qtbot.mouseClick(app.window.first_run.button, Qt.MouseButton.LeftButton)
    assert calls == [True]
    assert app.window.stack.currentIndex() == CHAT_PAGE
    picker = app.window.model_picker
    assert picker.currentText() == "Starter"
    app.send("hello")
    assert app.rows()[1][2] == "complete"


def test_old_chats_stay_readable_when_no_model_is_installed(make_app):
    from app.storage.history import History

    history = History()
    conv = history.create_conversation()
    history.add_message(conv.id, "user", "An old question")
    history.add_message(conv.id, "assistant", "An old answer")
    history.close()
    app = make_app()
    assert app.window.stack.currentIndex() == WELCOME_PAGE  # a new, empty chat
    app.controller.open_conversation(conv.id)
    assert app.window.stack.currentIndex() == CHAT_PAGE
    assert [row[1] for row in app.rows()] == ["An old question", "An old answer"]
    app.controller.new_conversation()
    assert app.window.stack.currentIndex() == WELCOME_PAGE


def test_send_without_model_is_a_readable_error(make_app):
    make_model_folder("m")
    app = make_app()
    app.send("hello?")
    assert "No model is loaded" in app.window.banner.text()
    assert app.window.composer.text() == "hello?"  # nothing lost


def test_composer_keys(app):
    edit = app.window.composer.edit
    edit.setFocus()
    app.qtbot.keyClicks(edit, "line one")
    app.qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    app.qtbot.keyClicks(edit, "line two")
    assert edit.toPlainText() == "line one\nline two"
    assert app.rows() == []
    app.qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    app.wait_idle()
    assert app.rows()[0][1] == "line one\nline two"
    assert edit.toPlainText() == ""


def test_shortcuts_copy_last_reply_search_and_new(app):
    app.send("alpha")
    app.qtbot.keyClick(
        app.window,
        Qt.Key.Key_C,
        Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier,
    )
    assert QGuiApplication.clipboard().text() == "You said: alpha"
    app.qtbot.keyClick(app.window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert app.window.conversation_list.search.hasFocus()
    app.qtbot.keyClick(app.window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert app.controller.current_id is None and app.rows() == []


def test_search_rename_delete_with_confirmation(app, monkeypatch):
    app.send("apples")
    apples = app.controller.current_id
    app.controller.new_conversation()
    app.send("bananas")
    bananas = app.controller.current_id
    listing = app.window.conversation_list
    app.qtbot.keyClicks(listing.search, "You said: app")
    assert listing.model.rowCount() == 1 and listing.model.conversation(0).id == apples
    listing.search.clear()
    monkeypatch.setattr(listing, "ask_text", lambda *a: ("Fruit", True))
    listing.rename(apples)
    assert app.history.get_conversation(apples).title == "Fruit"
    monkeypatch.setattr(listing, "confirm", lambda *a: False)
    listing.delete(bananas)
    assert app.history.get_conversation(bananas) is not None
    monkeypatch.setattr(listing, "confirm", lambda *a: True)
    listing.delete(bananas)
    assert app.history.get_conversation(bananas) is None
    assert app.controller.current_id is None  # the open chat was deleted
    assert [listing.model.index(r, 0).data() for r in range(listing.model.rowCount())] == ["Fruit"]


def test_side_panel_settings_drive_generation_and_reset(app, loader):
    panel = app.window.settings_panel
    panel.editors["temperature"].setValue(0.3)
    panel.editors["top_k"].setValue(40)
    panel.editors["max_tokens"].setValue(2)
    combo = panel.editors["context_policy"]
    combo.setCurrentIndex(combo.findData("truncate_oldest"))
    panel.editors["system_prompt"].setPlainText("Talk like a pirate.")
    app.send("hi")
    settings = loader.last.settings[-1]
    assert settings.sampling.temperature == pytest.approx(0.3)
    assert settings.sampling.top_k == 40
    assert settings.max_new_tokens == 2
    assert settings.context_policy == "truncate_oldest"
    assert loader.last.calls[-1][0].role == "system"
    assert loader.last.calls[-1][0].content == "Talk like a pirate."
    assert app.rows()[1][1] == "You said:"  # capped at 2 tokens
    conv = app.history.get_conversation(app.controller.current_id)
    assert conv.system_prompt == "Talk like a pirate." and conv.settings["top_k"] == 40
    app.qtbot.mouseClick(panel.reset_button, Qt.MouseButton.LeftButton)
    values = panel.values()
    assert values["temperature"] == pytest.approx(0.6)  # the fake model's default
    assert values["top_p"] == pytest.approx(0.9)
    assert values["top_k"] == 0 and values["system_prompt"] == "Talk like a pirate."
    conv = app.history.get_conversation(app.controller.current_id)
    assert conv.settings["temperature"] == pytest.approx(0.6)


def test_context_warning_over_80_percent(app):
    bar = app.window.status
    bar.set_context(700, 1000)
    assert not bar.context_warning
    bar.set_context(900, 1000)
    assert bar.context_warning and "90%" in bar.context_label.toolTip()


def test_message_bridge_and_excepthook(app):
    bridge = app.bridge
    bridge.install()
    try:
        try:
            raise DiskFullError("The disk is full.", hint="Free some space.")
        except DiskFullError:
            sys.excepthook(*sys.exc_info())
        assert app.window.banner.text() == "The disk is full. Free some space."
        assert app.window.crash_dialogs == []
        try:
            raise ZeroDivisionError("boom")
        except ZeroDivisionError:
            sys.excepthook(*sys.exc_info())
        assert len(app.window.crash_dialogs) == 1
        dialog = app.window.crash_dialogs[0]
        assert "ZeroDivisionError: boom" in dialog.text.toPlainText()
        dialog.on_copy()
        assert "ZeroDivisionError" in QGuiApplication.clipboard().text()
    finally:
        bridge.uninstall()
    app.send("still alive")
    assert app.rows()[-1][2] == "complete"


def test_every_interactive_widget_has_an_accessible_name(app):
    kinds = (QAbstractButton, QLineEdit, QComboBox, QAbstractSpinBox, QListView)
    from PySide6.QtWidgets import QPlainTextEdit, QTextBrowser

    widgets = app.window.findChildren(QPlainTextEdit) + app.window.findChildren(QTextBrowser)
    for kind in kinds:
        widgets += app.window.findChildren(kind)
    unnamed = [
        w
        for w in widgets
        if not w.accessibleName()
        and w.isVisibleTo(app.window)
        and w.parent() is not None
        and not w.objectName().startswith("qt_")  # internal parts of composite widgets
        and type(w).__name__ not in ("QToolButton",)  # toolbar buttons read their action text
    ]
    assert unnamed == []


def _menu_actions(window) -> dict[str, list]:
    return {
        menu.title().replace("&", ""): [a for a in menu.actions() if not a.isSeparator()]
        for menu in (a.menu() for a in window.menuBar().actions())
    }


def test_the_menus_hold_the_same_actions_as_the_toolbar_and_shortcuts(app):
    window = app.window
    menus = _menu_actions(window)
    assert list(menus) == ["File", "Edit", "View", "Model", "Help"]
    assert window.new_action in menus["File"] and window.quit_action in menus["File"]
    assert window.models_action in menus["Model"]
    assert window.panel_action in menus["View"] and window.sidebar_action in menus["View"]
    assert window.models_action in window.findChild(QToolBar, "mainToolbar").actions()
    window.models_action.trigger()
    app.qtbot.waitUntil(window.model_manager.isVisible)
    window.model_manager.close()
    app.send("hello")
    before = app.controller.current_id
    assert before is not None
    window.new_action.trigger()
    assert app.controller.current_id != before and app.rows() == []
    assert window.focusWidget() is window.composer.edit
    window.sidebar_action.trigger()
    assert not window.conversation_list.isVisible()


def test_at_800x600_nothing_hides_in_an_overflow_and_the_chat_gets_the_room(make_app):
    app = make_app()
    window = app.window
    window.panel_action.setChecked(True)
    window.on_toggle_panel(True)
    window.resize(1200, 800)
    app.qtbot.wait(10)
    window.resize(800, 600)
    app.qtbot.waitUntil(lambda: not window.settings_panel.isVisible())
    assert not window.panel_action.isChecked()
    assert app.settings.get("show_side_panel") is True  # the preference is kept
    toolbar = window.findChild(QToolBar, "mainToolbar")
    extension = toolbar.findChild(QToolButton, "qt_toolbar_ext_button")
    assert extension is None or not extension.isVisible()
    for action in toolbar.actions():
        widget = toolbar.widgetForAction(action)
        if action.isVisible() and widget is not None:
            assert widget.isVisible(), action.text()
    app.qtbot.waitUntil(lambda: window.stack.width() >= 450)  # the chat (or welcome) page
    window.panel_action.trigger()  # the user can still open it
    assert window.settings_panel.isVisible()


def test_unload_frees_the_model_and_sending_then_asks_for_one(app):
    engine = app.loader.last
    app.window.unload_action.trigger()
    app.qtbot.waitUntil(lambda: app.controller.model_info is None, timeout=5000)
    assert engine.closed
    assert app.window.status.model_label.text() == "No model loaded"
    app.send("anyone there?")
    assert "No model is loaded" in app.window.banner.text()


def test_the_provider_menu_offers_only_what_runs_here_and_reloads_on_the_choice(
    app, monkeypatch
):
    from app import machine

    monkeypatch.setattr(machine, "provider_choices", lambda **_: {
        "cpu": None, "dml": "DirectML runs on Windows only",
        "cuda": "no CUDA device found (no NVIDIA GPU or driver)", "coreml": None})
    window = app.window
    window.on_provider_menu()
    actions = window.provider_actions
    assert actions["auto"].isChecked() and actions["cpu"].isEnabled()
    assert not actions["cuda"].isEnabled() and "no CUDA device" in actions["cuda"].toolTip()
    loads = len(app.loader.engines)
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=5000):
        actions["cpu"].trigger()
    assert len(app.loader.engines) == loads + 1  # the same model again, now on the CPU
    assert app.settings.get("provider") == "cpu"


def test_ctrl_r_regenerates_the_last_reply_and_up_in_an_empty_composer_edits_the_last_message(
    app,
):
    app.send("first question")
    first_reply = app.rows()[-1][1]
    window = app.window
    window.regenerate_action.trigger()
    app.wait_idle()
    assert app.controller.chat_model.message(1).variant_count == 2  # the old reply is kept
    assert app.rows()[0][1] == "first question" and len(app.rows()) == 2
    edit = window.composer.edit
    edit.setFocus()
    edit.clear()
    app.qtbot.keyClick(edit, Qt.Key.Key_Up)
    assert app.controller.editing
    assert edit.toPlainText() == "first question"
    assert first_reply  # the reply streamed before


def test_what_the_user_should_know_about_a_model_is_said_on_load(make_app, loader):
    import dataclasses

    model = make_model_folder("noted", "Noted")
    app = make_app()

    original = loader.__call__

    def noted(path):
        engine = original(path)
        engine.spec = dataclasses.replace(
            engine.spec, context_note="The context was cut to 8192 tokens to fit this machine.",
            notes=("Its vision encoder is not used: Hearth runs the text part.",))
        return engine

    app.controller.worker._loader = noted
    app.load(model)
    text = app.window.banner.text()
    assert "cut to 8192 tokens" in text and "vision encoder is not used" in text
    assert app.controller.model_info.notes[0].startswith("The context was cut")
