"""The migrated schema is exactly what we expect; newer databases are refused."""

from __future__ import annotations

import sqlite3

import pytest

from app.errors import StorageError
from app.storage import db

EXPECTED_SCHEMA = [
    (
        "index",
        "conversations_updated",
        "CREATE INDEX conversations_updated ON conversations (updated_at DESC)",
    ),
    (
        "index",
        "message_parts_sha256",
        "CREATE INDEX message_parts_sha256 ON message_parts (sha256) WHERE sha256 IS NOT NULL",
    ),
    ("index", "messages_parent", "CREATE INDEX messages_parent ON messages (parent_id)"),
    (
        "index",
        "messages_rank",
        "CREATE INDEX messages_rank ON messages (conversation_id, active_rank)",
    ),
    ("table", "_meta", "CREATE TABLE _meta ( key TEXT PRIMARY KEY, value TEXT NOT NULL )"),
    (
        "table",
        "_migrations",
        "CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)",
    ),
    (
        "table",
        "conversations",
        "CREATE TABLE conversations ( id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '', "
        "created_at REAL NOT NULL, updated_at REAL NOT NULL, system_prompt TEXT NOT NULL "
        "DEFAULT '', settings TEXT NOT NULL DEFAULT '{}', model_id TEXT , deleted_at REAL, "
        "pinned INTEGER NOT NULL DEFAULT 0)",
    ),
    (
        "table",
        "message_parts",
        "CREATE TABLE message_parts ( message_id INTEGER NOT NULL REFERENCES messages (id) "
        "ON DELETE CASCADE, ord INTEGER NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL, "
        "sha256 TEXT, PRIMARY KEY (message_id, ord) )",
    ),
    (
        "table",
        "messages",
        'CREATE TABLE "messages" ( id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT '
        "NOT NULL REFERENCES conversations (id) ON DELETE CASCADE, seq INTEGER NOT NULL, "
        "role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')), content "
        "TEXT NOT NULL DEFAULT '', status TEXT NOT NULL DEFAULT 'complete' CHECK (status IN "
        "('complete', 'streaming', 'stopped', 'failed')), provenance TEXT NOT NULL DEFAULT "
        "'{}', created_at REAL NOT NULL, parent_id INTEGER REFERENCES \"messages\" (id), "
        "active_rank INTEGER NOT NULL DEFAULT 0, deleted_at REAL, reasoning TEXT NOT NULL DEFAULT "
        "'', reasoning_ms REAL NOT NULL DEFAULT 0, UNIQUE (conversation_id, seq) )",
    ),
]


def test_fresh_database_has_exact_schema(tmp_path):
    conn = db.connect(tmp_path / "h.sqlite3")
    assert db.schema_snapshot(conn) == EXPECTED_SCHEMA
    assert db.applied_migrations(conn) == [name for name, _ in db.MIGRATIONS]
    assert db.stored_major(conn) == db.SCHEMA_MAJOR
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_migrations_are_named_unique_and_idempotent(tmp_path):
    names = [name for name, _ in db.MIGRATIONS]
    assert len(set(names)) == len(names)
    path = tmp_path / "h.sqlite3"
    db.connect(path).close()
    conn = db.connect(path)
    assert db.migrate(conn) == []
    assert db.schema_snapshot(conn) == EXPECTED_SCHEMA


def test_newer_major_is_refused(tmp_path):
    path = tmp_path / "h.sqlite3"
    conn = db.connect(path)
    conn.execute(
        "UPDATE _meta SET value = ? WHERE key = 'schema_major'", (str(db.SCHEMA_MAJOR + 1),)
    )
    conn.close()
    with pytest.raises(StorageError, match="newer version of Hearth"):
        db.connect(path)


def test_not_a_database_is_a_readable_error(tmp_path):
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError, match="cannot be opened"):
        db.connect(path)


def test_partial_migration_rolls_back(tmp_path, monkeypatch):
    broken = [*db.MIGRATIONS, ("m999_broken", "CREATE TABLE x (a); CREATE TABLE x (b)")]
    monkeypatch.setattr(db, "MIGRATIONS", broken)
    with pytest.raises(StorageError, match="already exists"):
        db.connect(tmp_path / "h.sqlite3")
    conn = sqlite3.connect(tmp_path / "h.sqlite3")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "x" not in tables
    assert "m999_broken" not in {r[0] for r in conn.execute("SELECT name FROM _migrations")}


def test_m006_adds_reasoning_to_a_database_with_messages(tmp_path):
    """A history written before reasoning was stored migrates with every message intact."""
    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    names = [name for name, _ in db.MIGRATIONS]
    upto = names.index("m006_message_reasoning")
    for name, sql in db.MIGRATIONS[:upto]:
        for statement in db._statements(sql):
            old.execute(statement)
        old.execute("INSERT INTO _migrations VALUES (?, 0)", (name,))
    old.execute("INSERT INTO _meta VALUES ('schema_major', '2')")
    old.execute("INSERT INTO conversations (id, title, created_at, updated_at) "
                "VALUES ('c1', 'Old chat', 1, 2)")
    old.execute("INSERT INTO messages (conversation_id, seq, role, content, created_at) "
                "VALUES ('c1', 0, 'user', 'Hello', 1)")
    old.execute("INSERT INTO messages (conversation_id, seq, parent_id, role, content, "
                "provenance, created_at) VALUES ('c1', 1, 1, 'assistant', 'Hi!', "
                "'{\"model\": \"m\"}', 2)")
    old.close()

    conn = db.connect(path)
    assert db.applied_migrations(conn)[-3:] == ["m006_message_reasoning",
                                                "m007_messages_rank_index",
                                                "m008_message_parts_and_tool_role"]
    assert db.schema_snapshot(conn) == EXPECTED_SCHEMA
    rows = conn.execute("SELECT role, content, provenance, parent_id, reasoning, reasoning_ms "
                        "FROM messages ORDER BY seq").fetchall()
    assert [tuple(r) for r in rows] == [
        ("user", "Hello", "{}", None, "", 0),
        ("assistant", "Hi!", '{"model": "m"}', 1, "", 0),
    ]
    conn.close()

    from app.storage.history import History

    history = History(path)
    reply = history.active_path("c1")[1]
    assert (reply.content, reply.reasoning, reply.reasoning_ms, reply.damaged) == (
        "Hi!", "", 0.0, False)
    history.close()
