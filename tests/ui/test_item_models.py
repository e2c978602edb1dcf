"""The item models pass pytest-qt's model tester, including while they change."""

from __future__ import annotations

import pytest

from app.storage.history import History, StoredMessage
from app.ui.chat_model import ChatModel
from app.ui.conversation_list import ConversationListModel

pytestmark = [pytest.mark.qt_log_level_fail("WARNING")]


def msg(i: int, role: str = "user", content: str = "x") -> StoredMessage:
    return StoredMessage(id=i, conversation_id="c", position=i, role=role, content=content)


def test_chat_model(qtmodeltester):
    model = ChatModel()
    model.set_messages([msg(0), msg(1, "assistant", "hello")])
    qtmodeltester.check(model, force_py=True)
    model.append(msg(2, "user", "more"))
    model.append(msg(3, "assistant", ""))
    model.append_text(3, "stream")
    model.update_message(3, status="complete")
    assert model.index(3, 0).data() == "stream"
    assert model.data(model.index(3, 0), ChatModel.StatusRole) == "complete"
    model.remove_rows(0, 1)
    model.truncate(1)
    assert model.rowCount() == 1
    qtmodeltester.check(model, force_py=True)


def test_conversation_list_model(qtmodeltester, tmp_path):
    history = History(tmp_path / "h.sqlite3")
    convs = [history.create_conversation(f"chat {i}", created_at=float(i)) for i in range(4)]
    model = ConversationListModel(history)
    qtmodeltester.check(model, force_py=True)
    assert [model.index(r, 0).data() for r in range(4)] == ["chat 3", "chat 2", "chat 1", "chat 0"]
    history.add_message(convs[0].id, "user", "hello zebra")  # becomes most recent
    model.upsert(convs[0].id)
    assert model.index(0, 0).data() == "chat 0"
    model.set_query("zebra")
    assert model.rowCount() == 1
    model.set_query("")
    history.delete_conversation(convs[1].id)
    model.remove(convs[1].id)
    new = history.create_conversation("fresh")
    model.upsert(new.id)
    assert model.index(0, 0).data() == "fresh"
    assert [model.index(r, 0).data() for r in range(model.rowCount())] == [
        c.title for c in history.list_conversations()
    ]
    qtmodeltester.check(model, force_py=True)
    history.close()
