"""Small things a new user trips over, on the real window: focus after an example prompt,
the delete-chat question, drafts per chat, one send button while editing, search feedback,
the draft-model note, the plain-words labels and a real About box."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from app.models.hub import HubClient
from app.network import NetworkLog, install_guard, set_offline, uninstall_guard
from app.paths import data_root
from tests.ui.test_chat_branches import click

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def test_an_example_prompt_leaves_the_focus_in_the_message_box(app):
    button = app.window.chat_view.welcome.prompt_buttons[0]
    app.qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    app.wait_idle()
    assert app.rows()[0][0] == "user"
    assert app.window.composer.edit.hasFocus() or (
        app.window.focusWidget() is app.window.composer.edit)


def test_the_delete_chat_question_defaults_to_no(app, monkeypatch):
    app.send("keep me")
    chats = app.window.conversation_list
    seen = []
    monkeypatch.setattr(QMessageBox, "exec",
                        lambda box: seen.append(box.defaultButton()) or
                        QMessageBox.StandardButton.No)
    chats.delete(app.controller.current_id)
    assert seen and seen[0] is chats.last_confirm.button(QMessageBox.StandardButton.No)
    assert app.controller.conversations.rowCount() == 1  # No kept it


def test_a_draft_stays_with_its_chat(app):
    app.send("first chat")
    first = app.controller.current_id
    composer = app.window.composer
    composer.edit.setPlainText("half a thought")
    app.window.on_new_chat()
    assert composer.text() == ""  # a new chat starts empty
    app.send("second chat")
    second = app.controller.current_id
    composer.edit.setPlainText("other words")
    app.controller.open_conversation(first)
    assert composer.text() == "half a thought"
    app.controller.open_conversation(second)
    assert composer.text() == "other words"


def test_only_save_and_submit_shows_while_editing(app):
    app.send("one")
    composer = app.window.composer
    click(app, 0, "edit")
    assert composer.banner.save_button.isVisible() and not composer.button.isVisible()
    app.qtbot.keyClick(composer.edit, Qt.Key.Key_Escape)
    assert composer.button.isVisible() and not composer.banner.isVisible()


def test_search_says_no_matches_and_esc_clears_it(app):
    app.send("apples and pears")
    chats = app.window.conversation_list
    chats.search.setFocus()
    app.qtbot.keyClicks(chats.search, "zebra")
    assert chats.no_matches.isVisible() and "zebra" in chats.no_matches.text()
    app.qtbot.keyClick(chats.search, Qt.Key.Key_Escape)
    assert chats.search.text() == "" and not chats.no_matches.isVisible()
    assert app.controller.conversations.rowCount() == 1
    app.qtbot.keyClicks(chats.search, "apples")
    assert not chats.no_matches.isVisible()


def test_always_draft_model_without_a_draft_says_what_happens(app):
    panel = app.window.settings_panel
    panel.show()
    combo = panel.editors["speculation"]
    assert not panel.draft_note.isVisible()
    combo.setCurrentIndex(combo.findData("draft"))
    assert panel.draft_note.isVisible() and "No draft installed" in (
        panel.draft_note.text())
    combo.setCurrentIndex(combo.findData("auto"))
    assert not panel.draft_note.isVisible()
    panel.set_draft("SmolLM2 135M")
    combo.setCurrentIndex(combo.findData("draft"))
    assert not panel.draft_note.isVisible()


def test_the_token_test_is_logged_as_itself_not_as_hub_search():
    uninstall_guard()
    log = NetworkLog(capacity=10)
    install_guard(log)
    set_offline(True, note=False)
    try:
        with pytest.raises(Exception, match="offline"):
            HubClient("http://127.0.0.1:9").check_connection()
    finally:
        set_offline(False)
        uninstall_guard()
    assert [e.feature for e in log.blocked()] == ["Hub connection test"]


def test_the_about_box_names_the_version_licences_and_data_folder(app):
    from app import __version__

    app.window.about_action.trigger()
    box = app.window.about_box
    app.qtbot.waitExposed(box)
    text = box.text.toPlainText()
    assert f"Hearth {__version__}" in text and "Apache-2.0" in text
    assert str(data_root()) in text
    assert "SmolLM2 135M Instruct" in text and "onnxruntime" in text and "MIT" in text
    assert "PySide6-Essentials" in text and "LGPL" in text
    box.close()
