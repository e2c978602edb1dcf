"""Edit and regenerate add variants; nothing is overwritten; old databases migrate."""

from __future__ import annotations

import json
import sqlite3
import time

from app.storage import db
from app.storage.history import History, ReplyWriter
from app.storage.transfer import export_json, export_markdown, import_json, to_json


def _chat(h: History) -> tuple[str, list[int]]:
    conv = h.create_conversation()
    ids = [
        h.add_message(conv.id, role, text).id
        for role, text in [("user", "Q1"), ("assistant", "A1"), ("user", "Q2"), ("assistant", "A2")]
    ]
    return conv.id, ids


def _texts(messages) -> list[str]:
    return [m.content for m in messages]


def test_edit_keeps_the_old_turn_as_a_variant(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv, (_q1, a1, q2, _a2) = _chat(h)

    edited = h.edit_message(q2, "Q2 better")
    assert (edited.role, edited.parent_id) == ("user", a1)
    assert (edited.variant_index, edited.variant_count) == (1, 2)
    assert edited.variant_ids == (q2, edited.id)
    assert _texts(h.active_path(conv)) == ["Q1", "A1", "Q2 better"]
    reply = h.add_message(conv, "assistant", "A2 better")
    assert reply.parent_id == edited.id
    assert _texts(h.active_path(conv)) == ["Q1", "A1", "Q2 better", "A2 better"]
    h.close()

    h = History(path)  # the branches are in the file
    path_now = h.active_path(conv)
    assert [(m.variant_index, m.variant_count) for m in path_now] == [(0, 1), (0, 1), (1, 2),
                                                                      (0, 1)]
    assert [m.position for m in path_now] == [0, 1, 2, 3]
    back = h.switch_variant(edited.id, 0)
    assert _texts(back) == ["Q1", "A1", "Q2", "A2"]  # the old answer came back with it
    assert (back[2].variant_index, back[2].variant_count) == (0, 2)
    again = h.switch_variant(q2, 1)
    assert _texts(again) == ["Q1", "A1", "Q2 better", "A2 better"]
    assert _texts(h.messages(conv)) == _texts(again)


def test_regenerate_adds_an_empty_reply_beside_the_old_one(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv, (_q1, _a1, q2, a2) = _chat(h)
    fresh = h.regenerate(a2)
    assert (fresh.role, fresh.content, fresh.status) == ("assistant", "", "streaming")
    assert (fresh.parent_id, fresh.variant_index, fresh.variant_count) == (q2, 1, 2)
    writer = ReplyWriter(h, fresh.id)
    writer.append("A2 again")
    writer.finish("complete")
    assert _texts(h.active_path(conv)) == ["Q1", "A1", "Q2", "A2 again"]
    old = h.get_message(a2)
    assert old is not None and (old.content, old.active) == ("A2", False)
    assert _texts(h.switch_variant(fresh.id, 0)) == ["Q1", "A1", "Q2", "A2"]


def test_regenerating_an_older_reply_branches_there(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv, (_q1, a1, _q2, _a2) = _chat(h)
    fresh = h.regenerate(a1)
    assert _texts(h.active_path(conv)) == ["Q1", ""]
    assert _texts(h.switch_variant(fresh.id, 0)) == ["Q1", "A1", "Q2", "A2"]


def test_add_message_after_a_message_off_screen_shows_that_branch(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv, (_q1, _a1, q2, _a2) = _chat(h)
    h.edit_message(q2, "other")
    h.add_message(conv, "assistant", "follow-up", after=q2)
    assert _texts(h.active_path(conv)) == ["Q1", "A1", "Q2", "follow-up"]
    assert [m.variant_count for m in h.active_path(conv)] == [1, 1, 2, 2]


def _old_schema_db(path):
    """A history as the previous Hearth (schema 1, migrations m001–m003) wrote it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for name, sql in db.MIGRATIONS[:3]:
        for statement in db._statements(sql):
            conn.execute(statement)
        conn.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
    conn.execute("INSERT INTO _meta VALUES ('schema_major', '1')")
    for cid, title in [("c1", "First"), ("c2", "Second")]:
        conn.execute(
            "INSERT INTO conversations (id, title, created_at, updated_at, settings) "
            "VALUES (?, ?, 1, 2, '{\"top_k\": 5}')",
            (cid, title),
        )
        for pos, (role, text) in enumerate([("user", f"{title} q"), ("assistant", f"{title} a"),
                                            ("user", f"{title} q2")]):
            conn.execute(
                "INSERT INTO messages (conversation_id, position, role, content, provenance, "
                "created_at) VALUES (?, ?, ?, ?, '{\"seed\": 3}', ?)",
                (cid, pos, role, text, 10.0 + pos),
            )
    conn.close()


def test_previous_schema_migrates_with_its_messages(tmp_path):
    path = tmp_path / "h.sqlite3"
    _old_schema_db(path)
    h = History(path)
    assert db.applied_migrations(h._conn)[-5:] == [
        "m004_branches_and_soft_delete", "m005_pinned_conversations", "m006_message_reasoning",
        "m007_messages_rank_index", "m008_message_parts_and_tool_role",
    ]
    assert db.stored_major(h._conn) == db.SCHEMA_MAJOR == 3
    assert [c.title for c in h.list_conversations()] == ["Second", "First"]
    for cid, title in [("c1", "First"), ("c2", "Second")]:
        path_now = h.active_path(cid)
        assert [(m.role, m.content) for m in path_now] == [
            ("user", f"{title} q"), ("assistant", f"{title} a"), ("user", f"{title} q2")
        ]
        assert [m.parent_id for m in path_now] == [None, path_now[0].id, path_now[1].id]
        assert all(m.provenance == {"seed": 3} for m in path_now)
        assert all(m.variant_count == 1 for m in path_now)
    # the migrated chat branches like a new one
    edited = h.edit_message(h.active_path("c1")[0].id, "First q, edited")
    assert _texts(h.active_path("c1")) == ["First q, edited"]
    assert _texts(h.switch_variant(edited.id, 0)) == ["First q", "First a", "First q2"]


def test_json_export_holds_every_branch_and_imports_back(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv, (_q1, _a1, q2, a2) = _chat(h)
    h.regenerate(a2)
    h.update_message(h.active_path(conv)[-1].id, content="A2 v2", status="complete")
    edited = h.edit_message(q2, "Q2 v2")
    h.add_message(conv, "assistant", "A for Q2 v2", provenance={"seed": 9})
    h.switch_variant(edited.id, 0)  # show Q2 with its second answer

    text = export_json(h, conv)
    doc = json.loads(text)
    assert doc["version"] == 3
    assert len(doc["messages"]) == 7
    md = export_markdown(h, conv)
    assert "A2 v2" in md and "Q2 v2" not in md and "A for Q2 v2" not in md
    assert "version 2 of 2" in md and "version 1 of 2" in md

    new = import_json(h, text)
    assert new.id != conv
    assert _texts(h.active_path(new.id)) == ["Q1", "A1", "Q2", "A2 v2"]
    def shape(cid):
        return sorted(
            (m.role, m.content, m.position, m.variant_index, m.variant_count, m.active,
             json.dumps(m.provenance))
            for m in h.all_messages(cid)
        )
    assert shape(new.id) == shape(conv)
    # and the other branch is there, one switch away
    q2_new = h.active_path(new.id)[2]
    assert _texts(h.switch_variant(q2_new.id, 1)) == ["Q1", "A1", "Q2 v2", "A for Q2 v2"]


def test_version_1_exports_still_import(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    doc = {
        "format": "hearth-conversation",
        "version": 1,
        "conversation": {"title": "Old", "system_prompt": "", "settings": {}},
        "messages": [
            {"role": "user", "content": "hi", "status": "complete", "provenance": {}},
            {"role": "assistant", "content": "hello", "status": "streaming"},
        ],
    }
    conv = import_json(h, json.dumps(doc))
    path_now = h.active_path(conv.id)
    assert [(m.content, m.status) for m in path_now] == [("hi", "complete"),
                                                         ("hello", "failed")]


def test_active_path_export_stays_importable(tmp_path):
    """``to_json`` of just the path on screen (the controller's current call) round-trips."""
    h = History(tmp_path / "h.sqlite3")
    conv, (_q1, _a1, q2, _a2) = _chat(h)
    h.edit_message(q2, "Q2b")
    text = to_json(h.get_conversation(conv), h.active_path(conv))
    new = import_json(h, text)
    assert _texts(h.active_path(new.id)) == ["Q1", "A1", "Q2b"]
