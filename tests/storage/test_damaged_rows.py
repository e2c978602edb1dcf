"""A damaged row never stops the history from opening: that chat is flagged, the rest work."""

from __future__ import annotations

import sqlite3

from app.storage.history import History
from app.storage.transfer import export_json, export_markdown


def _damage(path, sql: str, args: tuple = ()) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(sql, args)
    conn.close()


def test_damaged_rows_open_flagged_and_the_rest_work(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    ids = {}
    for name in ("settings", "provenance", "utf8", "blob", "healthy"):
        conv = h.create_conversation(name, settings={"top_k": 1})
        h.add_message(conv.id, "user", f"{name} question")
        reply = h.add_message(conv.id, "assistant", f"{name} answer", provenance={"seed": 1})
        ids[name] = (conv.id, reply.id)
    h.close()

    _damage(path, "UPDATE conversations SET settings = '{\"top_k\": ' WHERE id = ?",
            (ids["settings"][0],))
    _damage(path, "UPDATE messages SET provenance = 'not json' WHERE id = ?",
            (ids["provenance"][1],))
    _damage(path, "UPDATE messages SET content = CAST(X'6F6BC328FF' AS TEXT) WHERE id = ?",
            (ids["utf8"][1],))
    _damage(path, "UPDATE messages SET content = X'00FF10' WHERE id = ?", (ids["blob"][1],))

    h = History(path)
    listed = {c.title: c for c in h.list_conversations()}
    assert set(listed) == set(ids)
    assert listed["settings"].damaged and listed["settings"].settings == {}
    for name, (conv_id, _reply_id) in ids.items():
        conv = h.get_conversation(conv_id)
        assert conv is not None
        assert conv.damaged == (name != "healthy"), name
        messages = h.active_path(conv_id)
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[0].content == f"{name} question" and not messages[0].damaged
        assert messages[1].damaged == (name in ("provenance", "utf8", "blob")), name
        # exports of a damaged chat work too
        assert name in export_markdown(h, conv_id)
        assert export_json(h, conv_id)
    by_name = {n: h.active_path(c)[1] for n, (c, _) in ids.items()}
    assert by_name["provenance"].provenance == {}
    assert by_name["utf8"].content == "ok\ufffd(\ufffd"
    assert by_name["blob"].content == "\x00\ufffd\x10"
    assert by_name["healthy"].provenance == {"seed": 1}
    # the damaged chats still take new messages, and search still runs over them
    h.add_message(ids["utf8"][0], "user", "still works")
    assert [c.title for c in h.list_conversations("still works")] == ["utf8"]
    assert {c.title for c in h.list_conversations("answer")} == set(ids) - {"utf8", "blob"}


def test_a_damaged_title_and_timestamps_are_flagged(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = h.create_conversation("fine")
    h.close()
    _damage(path, "UPDATE conversations SET title = CAST(X'FF' AS TEXT), updated_at = 'soon' "
            "WHERE id = ?", (conv.id,))
    h = History(path)
    [got] = h.list_conversations()
    assert got.damaged and got.title == "\ufffd" and got.updated_at == 0.0
