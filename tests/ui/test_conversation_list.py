"""The sidebar: date groups, pins that persist and sort first, and a selection that is
always the chat on screen (arrow keys, right-click, search, new chat)."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import QPoint, Qt

from app.storage.history import History
from app.ui.conversation_list import ConversationListModel

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

DAY = 24 * 3600


def _seed(history: History, now: float) -> dict[str, str]:
    ids = {}
    for title, age in (("today", 60), ("yesterday", DAY), ("last week", 4 * DAY),
                       ("ancient", 40 * DAY)):
        conv = history.create_conversation(title, created_at=now - age)
        ids[title] = conv.id
    return ids


def _listing(model: ConversationListModel) -> list[tuple[str, str, str]]:
    return [
        (model.index(r, 0).data(), model.index(r, 0).data(model.GroupRole),
         model.index(r, 0).data(model.HeaderRole))
        for r in range(model.rowCount())
    ]


def test_groups_by_date_and_pinned_first(qapp, qtmodeltester, tmp_path):
    history = History(tmp_path / "h.sqlite3")
    now = time.mktime(time.strptime("2025-06-15 12:00", "%Y-%m-%d %H:%M"))
    ids = _seed(history, now)
    model = ConversationListModel(history, clock=lambda: now)
    qtmodeltester.check(model)
    assert _listing(model) == [
        ("today", "Today", "Today"),
        ("yesterday", "Yesterday", "Yesterday"),
        ("last week", "Previous 7 days", "Previous 7 days"),
        ("ancient", "Older", "Older"),
    ]
    history.set_pinned(ids["ancient"], True)
    model.refresh()
    assert _listing(model)[:2] == [("ancient", "Pinned", "Pinned"), ("today", "Today", "Today")]
    assert "Pinned chat: ancient" in model.index(0, 0).data(Qt.ItemDataRole.AccessibleTextRole)
    assert not model.index(0, 0).data(Qt.ItemDataRole.DecorationRole).isNull()
    history.close()


def test_pin_from_the_context_menu_persists(app, make_app, model_dir, monkeypatch):
    app.send("older chat")
    older = app.controller.current_id
    app.controller.new_conversation()
    app.send("newer chat")
    listing = app.window.conversation_list
    model = app.controller.conversations
    assert model.index(0, 0).data() == "newer chat"
    monkeypatch.setattr(listing, "run_menu", lambda menu, where: "pin")
    rect = listing.view.visualRect(model.index(model.row_of(older), 0))
    listing.on_context_menu(rect.center())
    assert model.index(0, 0).data() == "older chat"
    assert model.index(0, 0).data(model.HeaderRole) == "Pinned"
    assert model.index(1, 0).data(model.HeaderRole) == "Today"
    # still pinned after a restart, and after the other chat is used again
    app.close()
    second = make_app()
    second.load(model_dir)
    assert second.controller.conversations.index(0, 0).data() == "older chat"
    assert second.history.get_conversation(older).pinned


def test_selection_follows_the_open_chat(app):
    app.send("alpha")
    alpha = app.controller.current_id
    app.controller.new_conversation()
    app.send("beta")
    beta = app.controller.current_id
    listing = app.window.conversation_list
    view = listing.view
    model = app.controller.conversations

    def selected_id():
        rows = view.selectionModel().selectedRows()
        return rows[0].data(model.IdRole) if rows else None

    assert selected_id() == beta
    # arrow keys open the chat they move to
    view.setFocus()
    app.qtbot.keyClick(view, Qt.Key.Key_Down)
    assert app.controller.current_id == alpha and selected_id() == alpha
    app.qtbot.keyClick(view, Qt.Key.Key_Up)
    assert app.controller.current_id == beta and selected_id() == beta
    # a right-click on another chat opens its menu without moving the selection
    listing.run_menu = lambda menu, where: None
    rect = view.visualRect(model.index(model.row_of(alpha), 0))
    app.qtbot.mouseClick(view.viewport(), Qt.MouseButton.RightButton, pos=rect.center())
    listing.on_context_menu(rect.center())
    assert app.controller.current_id == beta and selected_id() == beta
    # search keeps the open chat selected while it matches
    listing.search.setText("bet")
    assert model.rowCount() == 1 and selected_id() == beta
    listing.search.setText("")
    assert selected_id() == beta
    # a new chat has no row yet: nothing selected
    app.qtbot.keyClick(app.window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert selected_id() is None
    # clicking opens
    rect = view.visualRect(model.index(model.row_of(alpha), 0))
    app.qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert app.controller.current_id == alpha and selected_id() == alpha
    assert view.indexAt(QPoint(rect.center())).data(model.IdRole) == alpha


def test_new_chat_sits_once_at_the_top(app):
    listing = app.window.conversation_list
    layout = listing.layout()
    assert layout.itemAt(0).widget() is listing.new_button
    buttons = [w for w in listing.findChildren(type(listing.new_button))
               if w.text() == "New chat"]
    assert buttons == [listing.new_button]
    assert not listing.new_button.icon().isNull()
