"""Export/import round trip and closing/reopening the window over the same database."""

from __future__ import annotations

import json

import pytest
from PySide6.QtWidgets import QFileDialog

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def test_export_markdown_json_and_import_round_trip(app, tmp_path, monkeypatch):
    app.send("Export me")
    app.send("And me")
    original = app.controller.current_id
    md = tmp_path / "chat"
    monkeypatch.setattr(app.window, "ask_save_path", lambda *a: str(md) + ".md")
    app.window.export_md_action.trigger()
    text = (tmp_path / "chat.md").read_text()
    assert "# Export me" in text and "You said: And me" in text and "provider cpu" in text

    monkeypatch.setattr(app.window, "ask_save_path", lambda *a: str(tmp_path / "chat.json"))
    app.window.export_json_action.trigger()
    data = json.loads((tmp_path / "chat.json").read_text())
    assert [m["content"] for m in data["messages"]][-1] == "You said: And me"
    assert data["messages"][1]["provenance"]["stats"]["generated_tokens"] == 4

    monkeypatch.setattr(
        QFileDialog, "getOpenFileName", lambda *a, **k: (str(tmp_path / "chat.json"), "")
    )
    app.window.import_action.trigger()
    app.qtbot.waitUntil(lambda: not app.controller.importing, timeout=10000)
    imported = app.controller.current_id
    assert imported != original
    assert app.controller.conversations.rowCount() == 2
    old = [(m.role, m.content, m.provenance) for m in app.history.messages(original)]
    new = [(m.role, m.content, m.provenance) for m in app.history.messages(imported)]
    assert new == old
    assert app.rows()[-1][1] == "You said: And me"


def test_import_garbage_is_a_readable_error(app, tmp_path, monkeypatch):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(bad), ""))
    app.window.import_action.trigger()
    app.qtbot.waitUntil(lambda: not app.controller.importing, timeout=10000)
    assert "not valid JSON" in app.window.banner.text()
    assert app.window.crash_dialogs == []


def test_close_and_reopen_finds_everything(make_app, model_dir):
    first = make_app()
    first.load(model_dir)
    first.send("chat A")
    a = first.controller.current_id
    first.window.settings_panel.editors["temperature"].setValue(0.25)
    first.controller.new_conversation()
    first.send("chat B")
    b = first.controller.current_id
    first.close()

    second = make_app()
    listing = second.controller.conversations
    assert [listing.index(r, 0).data() for r in range(listing.rowCount())] == ["chat B", "chat A"]
    # the last used model is remembered
    assert second.settings.get("last_model") == str(model_dir)
    second.controller.open_conversation(a)
    assert second.rows() == [
        ("user", "chat A", "complete"),
        ("assistant", "You said: chat A", "complete"),
    ]
    assert "You said: chat A" in second.window.chat_view.toPlainText()
    assert second.window.settings_panel.values()["temperature"] == 0.25
    second.controller.open_conversation(b)
    # chat B was created with the (fake) model loaded: it keeps that model's suggestion
    assert second.window.settings_panel.values()["temperature"] == 0.6
    second.load(model_dir)
    second.send("more")
    assert [r[1] for r in second.rows()][-1] == "You said: more"


def test_closing_while_streaming_saves_partial_reply_as_stopped(make_app, model_dir, loader):
    first = make_app()
    first.load(model_dir)
    loader.last.script = ["partial", " reply", " never", " ends"]
    loader.last.hold_after = 2
    first.send("long question", wait=False)
    first.qtbot.waitUntil(lambda: first.rows()[1][1] == "partial reply")
    conv = first.controller.current_id
    first.close()  # stop → quit → wait, with the reply still streaming
    assert loader.last.closed
    second = make_app()
    second.controller.open_conversation(conv)
    assert second.rows() == [
        ("user", "long question", "complete"),
        ("assistant", "partial reply", "stopped"),
    ]
