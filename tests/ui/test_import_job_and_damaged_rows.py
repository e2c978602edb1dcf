"""A row no calendar can show never stops the window from opening, and importing a chat is a
job off the UI thread: progress in the status bar, Cancel, nothing kept when it stops."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from app.paths import history_db_path
from app.storage import importer
from app.storage.history import Conversation, History
from app.ui.conversation_list import DAMAGED_TIP, date_group
from app.ui.speculation_text import speculation_figures

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


@pytest.mark.parametrize("sql_value", ["1e18", "-1e15", "9e999", "'tomorrow'"])
def test_a_hand_edited_time_still_lets_the_window_open(make_app, sql_value):
    h = History(history_db_path())
    bad = h.create_conversation("hostile")
    h.add_message(bad.id, "user", "still readable")
    h.create_conversation("healthy")
    h.close()
    conn = sqlite3.connect(history_db_path(), isolation_level=None)
    conn.execute(f"UPDATE conversations SET updated_at = {sql_value} WHERE id = ?", (bad.id,))
    conn.close()

    app = make_app()  # the real MainWindow and its conversation list
    listing = app.controller.conversations
    rows = {listing.index(r, 0).data(Qt.ItemDataRole.EditRole): listing.index(r, 0)
            for r in range(listing.rowCount())}
    assert set(rows) == {"hostile", "healthy"}
    assert rows["hostile"].data() == "hostile (damaged)"
    assert DAMAGED_TIP in rows["hostile"].data(Qt.ItemDataRole.ToolTipRole)
    assert "damaged" in rows["hostile"].data(Qt.ItemDataRole.AccessibleTextRole)
    assert rows["hostile"].data(listing.GroupRole) == "Older"
    assert rows["healthy"].data() == "healthy"
    app.window.conversation_list.view.clicked.emit(rows["hostile"])
    assert app.controller.current_id == bad.id
    assert app.rows() == [("user", "still readable", "complete")]
    assert "could not be read" in app.window.banner.text()


@pytest.mark.parametrize("when", [1e18, -1e15, float("inf"), float("nan")])
def test_the_sidebar_groups_any_time_without_raising(when):
    conv = Conversation(id="x", title="t", created_at=0.0, updated_at=when)
    assert date_group(conv, now=1_700_000_000.0) == "Older"


def test_speculation_figures_of_a_hostile_row_are_none():
    for stats in ("broken", [1], {"speculation": "ngram", "proposed": "7"},
                  {"speculation": "ngram", "proposed": float("nan")}):
        assert speculation_figures(stats) is None


def _export(tmp_path, n: int):
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
                for i in range(n)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"format": "hearth-conversation", "version": 1,
                                "conversation": {"title": "Big import"},
                                "messages": messages}), encoding="utf-8")
    return path


def _messages_in_db() -> int:
    conn = sqlite3.connect(history_db_path())
    try:
        return conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    finally:
        conn.close()


def test_the_import_runs_as_a_job_and_the_window_stays_responsive(app, tmp_path, monkeypatch):
    monkeypatch.setattr(importer, "PROGRESS_EVERY", 200)
    path = _export(tmp_path, 2_000)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    gate = threading.Event()
    read = importer.read_export
    ui_thread = threading.get_ident()
    threads: list[int] = []

    def held_read(p):  # the job waits here until the test has used the window
        threads.append(threading.get_ident())
        gate.wait(10)
        return read(p)

    monkeypatch.setattr(importer, "read_export", held_read)
    seen = []
    app.controller.import_progress.connect(seen.append)

    app.window.import_action.trigger()
    assert app.controller.importing  # trigger returned while the job is still running
    status = app.window.status
    assert status.import_bar.isVisible() and status.import_cancel.isVisible()
    assert status.import_label.text() == "Checking big.json…"
    # the UI thread is free: typing reaches the composer while the file is being read
    app.qtbot.keyClicks(app.window.composer.edit, "typed meanwhile")
    assert app.window.composer.edit.toPlainText() == "typed meanwhile"
    gate.set()
    app.qtbot.waitUntil(lambda: not app.controller.importing, timeout=20000)

    assert threads and threads[0] != ui_thread
    fractions = [p.fraction for p in seen if p is not None]
    numbers = [f for f in fractions if f is not None]
    assert fractions[0] is None  # a busy bar while the file is checked
    assert numbers == sorted(numbers) and 0.5 in numbers and numbers[-1] == 1.0
    assert seen[-1] is None and not status.import_bar.isVisible()
    conv = app.history.get_conversation(app.controller.current_id)
    assert conv is not None and conv.title == "Big import"
    assert len(app.history.all_messages(conv.id)) == 2_000


def test_cancel_in_the_status_bar_keeps_nothing(app, tmp_path, monkeypatch):
    monkeypatch.setattr(importer, "PROGRESS_EVERY", 100)
    app.send("kept chat")
    before = _messages_in_db()
    path = _export(tmp_path, 2_000)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    half_way, go_on = threading.Event(), threading.Event()
    insert = History.insert_message
    calls = [0]

    def held_insert(self, *args, **kwargs):  # on the job's thread, half-way through
        calls[0] += 1
        if calls[0] == 1_000:
            half_way.set()
            go_on.wait(10)
        return insert(self, *args, **kwargs)

    monkeypatch.setattr(History, "insert_message", held_insert)
    app.window.import_action.trigger()
    app.qtbot.waitUntil(half_way.is_set, timeout=10000)
    app.qtbot.mouseClick(app.window.status.import_cancel, Qt.MouseButton.LeftButton)
    go_on.set()
    app.qtbot.waitUntil(lambda: not app.controller.importing, timeout=10000)

    assert _messages_in_db() == before
    listing = app.controller.conversations
    assert [listing.index(r, 0).data() for r in range(listing.rowCount())] == ["kept chat"]
    assert "cancelled: nothing was imported" in app.window.status.currentMessage()


def test_sending_waits_for_the_import(app, tmp_path, monkeypatch):
    path = _export(tmp_path, 2)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    gate = threading.Event()
    read = importer.read_export
    monkeypatch.setattr(importer, "read_export", lambda p: (gate.wait(10), read(p))[1])
    app.window.import_action.trigger()
    assert app.controller.send("not now") is False
    assert "Wait for the chat import to finish" in app.window.banner.text()
    gate.set()
    app.qtbot.waitUntil(lambda: not app.controller.importing, timeout=10000)
    app.send("now it goes")
    assert app.rows()[-2][1] == "now it goes"


def test_a_hostile_time_in_an_import_is_a_sentence_in_the_banner(app, tmp_path, monkeypatch):
    path = tmp_path / "hostile.json"
    path.write_text('{"format": "hearth-conversation", "version": 1, "conversation": '
                    '{"title": "T", "updated_at": 1e18}, "messages": []}', encoding="utf-8")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    app.window.import_action.trigger()
    app.qtbot.waitUntil(lambda: not app.controller.importing, timeout=10000)
    assert app.window.banner.text().startswith(
        f"{path} cannot be imported: 'updated_at' must be a time in seconds")
    assert app.controller.conversations.rowCount() == 0
    assert app.window.crash_dialogs == []
