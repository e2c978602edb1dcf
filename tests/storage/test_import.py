"""Imports are checked whole before anything is written, and bounded in size."""

from __future__ import annotations

import json
import re

import pytest

from app.storage import importer
from app.storage.errors import ImportFileError
from app.storage.history import History
from app.storage.importer import import_file
from app.storage.transfer import export_all_json, import_json


def _doc(messages, **meta):
    return {"format": "hearth-conversation", "version": 1,
            "conversation": {"title": "T", **meta}, "messages": messages}


GOOD = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


def _counts(h: History) -> tuple[int, int]:
    conn = h._conn
    return (conn.execute("SELECT COUNT(*) FROM conversations").fetchone()[0],
            conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])


def test_a_bad_message_late_in_the_file_imports_nothing(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    bad = [*GOOD, {"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}]
    with pytest.raises(
        ImportFileError, match="message 4: 'role' must be user, assistant or system"
    ):
        import_json(h, json.dumps(_doc(bad)), source="chat.json")
    assert _counts(h) == (0, 0)
    assert not h._conn.in_transaction


def test_a_bundle_names_the_chat_and_message_and_imports_nothing(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    chats = [_doc(GOOD), _doc(GOOD), _doc([GOOD[0]] * 6 + [{"role": "tool", "content": "x"}])]
    bundle = {"format": "hearth-history", "version": 1, "conversations": chats}
    path = tmp_path / "all.json"
    path.write_text(json.dumps(bundle), encoding="utf-8")
    with pytest.raises(ImportFileError) as err:
        import_file(h, path)
    assert str(err.value).startswith(
        f"{path} cannot be imported: chat 3, message 7: 'role' must be user, assistant or system."
    )
    assert "Nothing was imported" in str(err.value)
    assert _counts(h) == (0, 0)


@pytest.mark.parametrize(
    ("messages", "meta", "expected"),
    [
        ([{"role": "user", "content": 5}], {}, "message 1: 'content' must be text"),
        ([{"role": "user", "status": "done"}], {}, "message 1: 'status' must be complete"),
        ([{"role": "user", "created_at": float("nan")}], {}, "'created_at' must be a time"),
        ([{"role": "user", "provenance": [1]}], {}, "'provenance' must be an object"),
        (GOOD, {"settings": "x"}, "'settings' must be an object"),
        ("nope", {}, "'messages' must be a list"),
    ],
)
def test_each_field_is_checked(tmp_path, messages, meta, expected):
    h = History(tmp_path / "h.sqlite3")
    with pytest.raises(ImportFileError, match=expected):
        import_json(h, json.dumps(_doc(messages, **meta)))
    assert _counts(h) == (0, 0)


def test_a_parent_must_come_first(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    doc = {"format": "hearth-conversation", "version": 2, "conversation": {},
           "messages": [{"id": 1, "parent": 2, "role": "user", "content": "q"},
                        {"id": 2, "parent": None, "role": "user", "content": "r"}]}
    with pytest.raises(ImportFileError, match="message 1: 'parent' must be null or the id"):
        import_json(h, json.dumps(doc))


def test_garbage_json_and_deep_nesting_are_sentences(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    with pytest.raises(ImportFileError, match=r"x\.json is not valid JSON"):
        import_json(h, "{nope", source="x.json")
    with pytest.raises(ImportFileError, match="nested too deeply"):
        import_json(h, "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ImportFileError, match="not a Hearth conversation export"):
        import_json(h, "[]")


def test_an_oversized_file_is_refused_before_reading(tmp_path, monkeypatch):
    h = History(tmp_path / "h.sqlite3")
    monkeypatch.setattr(importer, "MAX_IMPORT_BYTES", 1000)
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(_doc([{"role": "user", "content": "x" * 2000}])))
    expected = re.escape(f"{path} cannot be imported: it is ") + ".* more than"
    with pytest.raises(ImportFileError, match=expected):
        import_file(h, path)
    assert _counts(h) == (0, 0)


def test_absurd_counts_are_refused(tmp_path, monkeypatch):
    h = History(tmp_path / "h.sqlite3")
    monkeypatch.setattr(importer, "MAX_MESSAGES_PER_CHAT", 3)
    monkeypatch.setattr(importer, "MAX_CHATS", 2)
    with pytest.raises(ImportFileError, match="holds 4 messages, more than the 3"):
        import_json(h, json.dumps(_doc(GOOD * 2)), source="big.json")
    bundle = {"format": "hearth-history", "version": 1, "conversations": [_doc(GOOD)] * 3}
    with pytest.raises(ImportFileError, match=r"big\.json cannot be imported: it holds 3 chats"):
        import_json(h, json.dumps(bundle), source="big.json")
    assert _counts(h) == (0, 0)


def test_non_utf8_file_is_a_sentence(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"format": "hearth-conversation", "title": "caf\xe9"}')
    with pytest.raises(ImportFileError, match=r"latin1\.json cannot be imported: it is not UTF-8"):
        import_file(h, path)


def test_whole_history_export_imports_back(tmp_path):
    h = History(tmp_path / "a.sqlite3")
    for title in ("one", "two"):
        conv = h.create_conversation(title)
        q = h.add_message(conv.id, "user", f"{title}?")
        h.add_message(conv.id, "assistant", "!")
        h.edit_message(q.id, f"{title}, edited?")
    path = tmp_path / "all.json"
    path.write_text(export_all_json(h), encoding="utf-8")
    other = History(tmp_path / "b.sqlite3")
    imported = import_file(other, path)
    assert sorted(c.title for c in imported) == ["one", "two"]
    for conv in imported:
        assert [m.content for m in other.active_path(conv.id)] == [f"{conv.title}, edited?"]
        assert len(other.all_messages(conv.id)) == 3
