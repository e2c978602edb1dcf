"""History writes are all-or-nothing on any error, and later writes still persist."""

from __future__ import annotations

import json

import pytest

from app.storage import history as history_module
from app.storage.history import History
from app.storage.transfer import import_json


def test_a_non_sqlite_error_midway_rolls_back_and_later_writes_persist(tmp_path, monkeypatch):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = h.create_conversation()

    def broken_title(text: str) -> str:  # runs after the INSERT, inside the transaction
        raise RuntimeError("boom")

    monkeypatch.setattr(history_module, "title_from_text", broken_title)
    with pytest.raises(RuntimeError, match="boom"):
        h.add_message(conv.id, "user", "half written")
    monkeypatch.undo()
    assert not h._conn.in_transaction
    assert h.active_path(conv.id) == []
    h.rename_conversation(conv.id, "Renamed later")
    h.close()

    h = History(path)
    got = h.get_conversation(conv.id)
    assert got is not None and got.title == "Renamed later"
    assert h.active_path(conv.id) == []


def test_an_error_inside_a_grouped_write_undoes_the_whole_group(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = h.create_conversation("Before")
    with pytest.raises(KeyError), h.transaction():
        h.rename_conversation(conv.id, "During")
        h.add_message(conv.id, "user", "inside")
        raise KeyError("not a sqlite error")
    assert not h._conn.in_transaction
    h.update_conversation(conv.id, settings={"top_k": 3})
    h.close()
    h = History(path)
    got = h.get_conversation(conv.id)
    assert got is not None and (got.title, got.settings) == ("Before", {"top_k": 3})
    assert h.active_path(conv.id) == []


def test_importing_a_lone_surrogate_leaves_later_writes_working(tmp_path):
    """The review's case: a "\\ud800" in an export used to leave a transaction open."""
    path = tmp_path / "h.sqlite3"
    h = History(path)
    doc = {
        "format": "hearth-conversation",
        "version": 1,
        "conversation": {"title": "Bad \ud800 title"},
        "messages": [
            {"role": "user", "content": "fine"},
            {"role": "assistant", "content": "broken \ud800 text"},
        ],
    }
    conv = import_json(h, json.dumps(doc))  # json escapes it as \ud800, as a real file would
    assert not h._conn.in_transaction
    h.rename_conversation(conv.id, "Renamed")
    other = h.create_conversation("Another")
    h.close()

    h = History(path)
    assert {c.title for c in h.list_conversations()} == {"Renamed", "Another"}
    assert [m.content for m in h.active_path(conv.id)] == ["fine", "broken \ufffd text"]
    assert h.get_conversation(other.id) is not None


def test_every_text_write_cleans_lone_surrogates(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = h.create_conversation(
        "t\udc80", system_prompt="s\ud800", settings={"k\ud800": ["v\udfff"]}, model_id="m\ud800"
    )
    msg = h.add_message(conv.id, "user", "c\ud800", provenance={"p": "\ud800"})
    h.update_message(msg.id, content="u\udc00")
    edited = h.edit_message(msg.id, "e\ud800")
    h.rename_conversation(conv.id, "r\ud800")
    h.close()
    h = History(path)
    got = h.get_conversation(conv.id)
    assert got is not None
    assert (got.title, got.system_prompt, got.model_id) == ("r\ufffd", "s\ufffd", "m\ufffd")
    assert got.settings == {"k\ufffd": ["v\ufffd"]}
    first = h.get_message(msg.id)
    assert first is not None and (first.content, first.provenance) == ("u\ufffd", {"p": "\ufffd"})
    assert [m.content for m in h.active_path(conv.id)] == ["e\ufffd"]
    assert edited.content == "e\ufffd"
