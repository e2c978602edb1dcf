"""SQLite connection and append-only named migrations for the history database.

Every migration is a ``(name, sql)`` pair applied once, in order, and recorded in
``_migrations``. Never edit or reorder a released migration: append a new one. The schema's
major version lives in ``_meta``; a database written by a newer major version is refused
rather than silently misread.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from app.errors import StorageError

SCHEMA_MAJOR = 1

MIGRATIONS: list[tuple[str, str]] = [
    (
        "m001_meta",
        """
        CREATE TABLE _meta (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        """,
    ),
    (
        "m002_conversations",
        """
        CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            system_prompt TEXT NOT NULL DEFAULT '',
            settings TEXT NOT NULL DEFAULT '{}',
            model_id TEXT
        );
        CREATE INDEX conversations_updated ON conversations (updated_at DESC);
        """,
    ),
    (
        "m003_messages",
        """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id TEXT NOT NULL
                REFERENCES conversations (id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            content TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL DEFAULT 'complete'
                CHECK (status IN ('complete', 'streaming', 'stopped', 'failed')),
            provenance TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL,
            UNIQUE (conversation_id, position)
        );
        """,
    ),
]


def connect(path: Path | str) -> sqlite3.Connection:
    """Open (creating if needed) and migrate the database at ``path``.

    Raises StorageError with an actionable sentence when the file cannot be opened, is not a
    database, or was written by a newer Hearth.
    """
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(str(path), timeout=5.0, isolation_level=None)
    except sqlite3.Error as exc:
        raise StorageError(
            f"The chat history at {path} cannot be opened ({exc}).",
            hint="Check that the data folder exists and is writable.",
        ) from exc
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        migrate(conn)
    except StorageError:
        conn.close()
        raise
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StorageError(
            f"The chat history at {path} cannot be opened ({exc}).",
            hint="Move the file aside to start a fresh history, or restore a backup.",
        ) from exc
    return conn


def applied_migrations(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations already applied, in order."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    return [row[0] for row in conn.execute("SELECT name FROM _migrations ORDER BY rowid")]


def stored_major(conn: sqlite3.Connection) -> int | None:
    """The schema major version recorded in the database, or None for a fresh one."""
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_meta'"
    ).fetchone()
    if not has_meta:
        return None
    row = conn.execute("SELECT value FROM _meta WHERE key = 'schema_major'").fetchone()
    return int(row[0]) if row else None


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply the pending migrations in order; return the names applied now."""
    major = stored_major(conn)
    if major is not None and major > SCHEMA_MAJOR:
        raise StorageError(
            f"The chat history was written by a newer version of Hearth (schema {major}, "
            f"this version reads up to {SCHEMA_MAJOR}).",
            hint="Update Hearth, or move the history file aside to start a fresh one.",
        )
    done = set(applied_migrations(conn))
    applied: list[str] = []
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (name, time.time())
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(name)
    conn.execute(
        "INSERT OR REPLACE INTO _meta (key, value) VALUES ('schema_major', ?)",
        (str(SCHEMA_MAJOR),),
    )
    return applied


def _statements(sql: str) -> list[str]:
    """Split a migration's SQL into statements (migrations hold no literal semicolons)."""
    return [part.strip() for part in sql.split(";") if part.strip()]


def schema_snapshot(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(type, name, sql) of every schema object, for the exact-schema test."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
    )
    return [(r[0], r[1], " ".join((r[2] or "").split())) for r in rows]
