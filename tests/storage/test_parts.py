"""Message parts and the tool role in the history: migration m008, reads, writes, export and
import (old and new shapes)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from app.chat.parts import (
    PARTS_VERSION,
    Attachment,
    ChatMessage,
    Reasoning,
    Source,
    Text,
    ToolCall,
    ToolResult,
)
from app.errors import StorageError
from app.storage import db
from app.storage.history import History
from app.storage.importer import FORMAT_VERSION, parse_export
from app.storage.transfer import export_json, export_markdown, import_json

SOURCE = Source("manual.pdf", "page 3", "Press the red button.", path="/docs/manual.pdf",
                score=0.75)
CALL = ToolCall("call_1", "get_weather", '{"city": "Oslo"}')
RESULT = ToolResult("call_1", '{"temp": 4}', name="get_weather")
FILE = Attachment("notes.txt", "/files/notes.txt", sha256="ab" * 32, mime="text/plain",
                  text="Buy milk.")


def _tool_turn(h: History) -> str:
    """A chat whose answer called a tool: user (with sources and a file), assistant (its
    thinking, a line and the call), the tool's result, and the final answer."""
    conv = h.create_conversation()
    h.add_message(conv.id, "user", "Weather in Oslo?", parts=(SOURCE, FILE))
    h.add_message(conv.id, "assistant", "Let me look.", reasoning="Need the tool.",
                  parts=(CALL,))
    h.add_message(conv.id, "tool", "", parts=(RESULT,))
    h.add_message(conv.id, "assistant", "It is 4 degrees in Oslo.")
    return conv.id


def _typed(h: History, conversation_id: str) -> list[ChatMessage]:
    return [m.chat_message() for m in h.active_path(conversation_id)]


EXPECTED = [
    ChatMessage("user", (Text("Weather in Oslo?"), SOURCE, FILE)),
    ChatMessage("assistant", (Reasoning("Need the tool."), Text("Let me look."), CALL)),
    ChatMessage("tool", (RESULT,)),
    ChatMessage("assistant", (Text("It is 4 degrees in Oslo."),)),
]


def test_a_tool_turn_with_sources_reads_back_as_its_parts(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = _tool_turn(h)
    h.close()
    again = History(path)
    assert _typed(again, conv) == EXPECTED
    assert not again.get_conversation(conv).damaged
    # the file's hash is an index lookup
    rows = again._conn.execute("SELECT type FROM message_parts WHERE sha256 = ?",
                               ("ab" * 32,)).fetchall()
    assert [r[0] for r in rows] == ["attachment"]


def test_a_tool_turn_round_trips_through_export_and_import(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv = _tool_turn(h)
    text = export_json(h, conv)
    doc = json.loads(text)
    assert (doc["version"], doc["parts_version"]) == (FORMAT_VERSION, PARTS_VERSION) == (3, 1)
    assert doc["messages"][2] == {**doc["messages"][2], "role": "tool", "parts": [
        {"type": "tool_result", "call_id": "call_1", "content": '{"temp": 4}',
         "is_error": False, "name": "get_weather", "duration_ms": None}]}
    other = History(tmp_path / "other.sqlite3")
    imported = import_json(other, text)
    assert _typed(other, imported.id) == EXPECTED
    md = export_markdown(h, conv)
    assert '`get_weather({"city": "Oslo"})`' in md and "## Tool" in md


def test_an_export_without_parts_imports_as_before(tmp_path):
    old = {"format": "hearth-conversation", "version": 2,
           "conversation": {"title": "Old"},
           "messages": [{"id": 1, "parent": None, "role": "user", "content": "hi"},
                        {"id": 2, "parent": 1, "role": "assistant", "content": "hello",
                         "reasoning": "greet"}]}
    h = History(tmp_path / "h.sqlite3")
    conv = import_json(h, json.dumps(old))
    assert _typed(h, conv.id) == [
        ChatMessage("user", (Text("hi"),)),
        ChatMessage("assistant", (Reasoning("greet"), Text("hello"))),
    ]


@pytest.mark.parametrize(("version", "message", "problem"), [
    (3, {"role": "user", "content": "x", "parts": [{"type": "video"}]},
     "message 1, part 1: Unknown message part type 'video'"),
    (3, {"role": "assistant", "content": "x",
         "parts": [{"type": "tool_call", "id": "c", "name": "f", "arguments": 5}]},
     "message 1, part 1: The tool_call part's 'arguments' must be text"),
    (3, {"role": "user", "content": "x", "parts": [{"type": "text", "text": "y"}]},
     "text and thinking belong in 'content'"),
    (3, {"role": "user", "content": "x", "parts": {"type": "source"}}, "'parts' must be a list"),
    (2, {"id": 1, "role": "tool", "content": "x"}, "'role' must be user, assistant or system"),
])
def test_a_wrong_part_is_refused_with_a_sentence(version, message, problem):
    doc = {"format": "hearth-conversation", "version": version, "messages": [
        {"id": 1, **message}]}
    with pytest.raises(StorageError, match="cannot be imported") as caught:
        parse_export(json.dumps(doc), source="chat.json")
    assert problem in str(caught.value)


def test_an_export_with_newer_parts_is_refused():
    doc = {"format": "hearth-conversation", "version": 3, "parts_version": PARTS_VERSION + 1,
           "messages": []}
    with pytest.raises(StorageError, match="newer version of Hearth"):
        parse_export(json.dumps(doc))


def test_a_damaged_part_row_is_left_out_and_flagged(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv = _tool_turn(h)
    h._conn.execute("UPDATE message_parts SET data = '{not json' WHERE type = 'source'")
    user = h.active_path(conv)[0]
    assert user.damaged and user.parts == (FILE,)
    assert h.get_conversation(conv).damaged


def test_text_is_not_stored_as_a_part(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv = h.create_conversation()
    with pytest.raises(ValueError, match="content and reasoning"):
        h.add_message(conv.id, "user", "x", parts=(Text("y"),))


def test_m008_rebuilds_messages_keeping_rows_ids_and_the_id_high_water_mark(tmp_path):
    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    names = [name for name, _ in db.MIGRATIONS]
    for name, sql in db.MIGRATIONS[: names.index("m008_message_parts_and_tool_role")]:
        for statement in db._statements(sql):
            old.execute(statement)
        old.execute("INSERT INTO _migrations VALUES (?, 0)", (name,))
    old.execute("INSERT INTO _meta VALUES ('schema_major', '2')")
    old.execute("INSERT INTO conversations (id, title, created_at, updated_at) "
                "VALUES ('c1', 'Old chat', 1, 2)")
    for mid, parent, role, text in [(1, None, "user", "Q"), (2, 1, "assistant", "A"),
                                    (3, 2, "user", "Q2"), (9, 3, "assistant", "gone")]:
        old.execute("INSERT INTO messages (id, conversation_id, seq, parent_id, role, content, "
                    "created_at, active_rank) VALUES (?, 'c1', ?, ?, ?, ?, 1, ?)",
                    (mid, mid, parent, role, text, mid))
    old.execute("DELETE FROM messages WHERE id = 9")  # purged: its id must not come back
    old.close()

    h = History(path)
    assert db.stored_major(h._conn) == 3
    assert [(m.id, m.parent_id, m.role, m.content) for m in h.active_path("c1")] == [
        (1, None, "user", "Q"), (2, 1, "assistant", "A"), (3, 2, "user", "Q2")]
    reply = h.add_message("c1", "tool", "", parts=(RESULT,))
    assert reply.id == 10 and reply.parts == (RESULT,)
    assert h._conn.execute("PRAGMA foreign_key_check").fetchall() == []
