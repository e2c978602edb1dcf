"""Deletes can be undone; a reply's delete never takes its question; purges keep the shape."""

from __future__ import annotations

import pytest

from app.errors import StorageError
from app.storage.history import History


def _chat(h: History) -> tuple[str, list[int]]:
    conv = h.create_conversation()
    ids = [
        h.add_message(conv.id, role, text).id
        for role, text in [("user", "Q1"), ("assistant", "A1"), ("user", "Q2"), ("assistant", "A2")]
    ]
    return conv.id, ids


def _texts(h: History, conv: str) -> list[str]:
    return [m.content for m in h.active_path(conv)]


def test_deleting_a_reply_keeps_its_question_and_undo_restores_it(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv, (_q1, _a1, _q2, a2) = _chat(h)
    deletion = h.delete_turn(a2)
    assert deletion.message_ids == (a2,)
    assert _texts(h, conv) == ["Q1", "A1", "Q2"]
    assert h.get_message(a2) is None
    h.close()
    h = History(path)  # the undo still works after a restart (until purged)
    h.undo_delete(deletion)
    assert _texts(h, conv) == ["Q1", "A1", "Q2", "A2"]


def test_deleting_a_middle_turn_keeps_the_turns_after_it(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv, (_q1, _a1, q2, a2) = _chat(h)
    h.add_message(conv, "user", "Q3")
    deletion = h.delete_turn(q2)
    assert set(deletion.message_ids) == {q2, a2}
    assert _texts(h, conv) == ["Q1", "A1", "Q3"]
    h.undo_delete(deletion)
    assert _texts(h, conv) == ["Q1", "A1", "Q2", "A2", "Q3"]


def test_deleting_the_shown_variant_shows_the_other_and_undo_shows_it_again(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv, (_q1, _a1, _q2, a2) = _chat(h)
    fresh = h.regenerate(a2)
    h.update_message(fresh.id, content="A2 v2", status="complete")
    deletion = h.delete_message(fresh.id)
    assert _texts(h, conv) == ["Q1", "A1", "Q2", "A2"]
    assert h.active_path(conv)[-1].variant_count == 1
    h.undo_delete(deletion)
    assert _texts(h, conv) == ["Q1", "A1", "Q2", "A2 v2"]


def test_conversation_delete_is_undoable_and_searches_skip_deleted(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv, (_q1, _a1, _q2, a2) = _chat(h)
    assert [c.id for c in h.list_conversations("A2")] == [conv]
    h.delete_message(a2)
    assert h.list_conversations("A2") == []
    deletion = h.delete_conversation(conv)
    assert h.get_conversation(conv) is None and h.list_conversations() == []
    h.undo_delete(deletion)
    assert [c.id for c in h.list_conversations()] == [conv]
    assert _texts(h, conv) == ["Q1", "A1", "Q2"]


def test_old_deletions_are_purged_on_open_and_the_tree_keeps_its_shape(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv, (_q1, a1, q2, _a2) = _chat(h)
    gone = h.delete_turn(q2)
    other = h.create_conversation("other")
    gone_chat = h.delete_conversation(other.id)
    h.add_message(conv, "user", "Q3")
    h.close()
    h = History(path, purge_after=0.0)  # as if the deletions were older than the limit
    assert h._conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 3
    assert h._conn.execute("SELECT COUNT(*) FROM conversations").fetchone()[0] == 1
    assert _texts(h, conv) == ["Q1", "A1", "Q3"]
    assert h.active_path(conv)[-1].parent_id == a1
    with pytest.raises(StorageError, match="can no longer be undone"):
        h.undo_delete(gone)
    with pytest.raises(StorageError, match="can no longer be undone"):
        h.undo_delete(gone_chat)


def test_recent_deletions_survive_reopen(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    _conv, (_q1, _a1, _q2, a2) = _chat(h)
    h.delete_message(a2)
    h.close()
    h = History(path)
    assert h._conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 4


def test_old_truncate_call_is_undoable(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv, (_q1, _a1, q2, a2) = _chat(h)
    deletion = h.delete_messages_from(conv, 2)
    assert deletion is not None and set(deletion.message_ids) == {q2, a2}
    assert _texts(h, conv) == ["Q1", "A1"]
    h.undo_delete(deletion)
    assert _texts(h, conv) == ["Q1", "A1", "Q2", "A2"]
