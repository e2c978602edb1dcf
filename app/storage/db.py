"""SQLite connection and append-only named migrations for the history database.

Every migration is a ``(name, sql)`` pair applied once, in order, and recorded in
``_migrations``. Never edit or reorder a released migration: append a new one. The schema's
major version lives in ``_meta``; a database written by a newer major version is refused
rather than silently misread (major 2 came with branches: an older Hearth would misread a
tree as one long chat, so it refuses the file instead; major 3 with message parts and the
``tool`` role: an older Hearth would send a tool result without its call and show a reply
that only called tools as an empty one).

Every write goes through ``transaction``: one ``BEGIN IMMEDIATE … COMMIT`` (a savepoint when
nested) that rolls back on *any* exception, so a failed write never leaves the connection
inside an open transaction that would swallow the writes after it.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from app.errors import StorageError
from app.storage.errors import storage_error
from app.storage.records import install_text_factory

SCHEMA_MAJOR = 3
BUSY_TIMEOUT_S = 5.0

_savepoints = itertools.count(1)

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
    (
        # Branches: each message has a parent (NULL for the first turn); the children of one
        # parent are variants, the one with the highest active_rank is shown. ``seq`` (the
        # old ``position``) is the insertion order; deleted_at marks a soft delete.
        "m004_branches_and_soft_delete",
        """
        ALTER TABLE messages RENAME COLUMN position TO seq;
        ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages (id);
        ALTER TABLE messages ADD COLUMN active_rank INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE messages ADD COLUMN deleted_at REAL;
        ALTER TABLE conversations ADD COLUMN deleted_at REAL;
        UPDATE messages SET parent_id = (
            SELECT p.id FROM messages p
            WHERE p.conversation_id = messages.conversation_id AND p.seq < messages.seq
            ORDER BY p.seq DESC LIMIT 1
        );
        CREATE INDEX messages_parent ON messages (parent_id);
        """,
    ),
    (
        # A pinned chat stays at the top of the sidebar (1 = pinned).
        "m005_pinned_conversations",
        """
        ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
        """,
    ),
    (
        # A reasoning model's thinking, kept apart from its answer, and how long it thought
        # (milliseconds; 0 = not measured). Each variant (row) keeps its own.
        "m006_message_reasoning",
        """
        ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT '';
        ALTER TABLE messages ADD COLUMN reasoning_ms REAL NOT NULL DEFAULT 0;
        """,
    ),
    (
        # Each new active variant takes MAX(active_rank) + 1 of its chat: without an index
        # that is a scan of the chat per insert, and an import of 50,000 messages quadratic.
        "m007_messages_rank_index",
        """
        CREATE INDEX messages_rank ON messages (conversation_id, active_rank);
        """,
    ),
    (
        # Typed message parts (app/chat/parts.py) and the ``tool`` role. A message's text and
        # thinking stay in ``content`` / ``reasoning`` (streamed, searched, readable in every
        # old row); each other part (attachment, image, source, tool call, tool result) is a
        # row of ``message_parts``: its JSON form by ``type`` (``data`` holds it whole), in
        # order (``ord``), with the file's ``sha256`` for an image or attachment, so the
        # files a history still uses are an index lookup. The role CHECK cannot be altered
        # in SQLite, so ``messages`` is rebuilt: same columns, rows, ids and AUTOINCREMENT
        # high-water mark (a purged id is never handed out again); its self-reference names
        # the new table, which the rename turns into ``messages``.
        "m008_message_parts_and_tool_role",
        """
        CREATE TABLE messages_m008 (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id TEXT NOT NULL
                REFERENCES conversations (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
            content TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL DEFAULT 'complete'
                CHECK (status IN ('complete', 'streaming', 'stopped', 'failed')),
            provenance TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL,
            parent_id INTEGER REFERENCES messages_m008 (id),
            active_rank INTEGER NOT NULL DEFAULT 0,
            deleted_at REAL,
            reasoning TEXT NOT NULL DEFAULT '',
            reasoning_ms REAL NOT NULL DEFAULT 0,
            UNIQUE (conversation_id, seq)
        );
        INSERT INTO messages_m008 (id, conversation_id, seq, role, content, status,
            provenance, created_at, parent_id, active_rank, deleted_at, reasoning, reasoning_ms)
            SELECT id, conversation_id, seq, role, content, status, provenance, created_at,
                parent_id, active_rank, deleted_at, reasoning, reasoning_ms
            FROM messages ORDER BY id;
        INSERT INTO sqlite_sequence (name, seq)
            SELECT 'messages_m008', 0 WHERE NOT EXISTS
                (SELECT 1 FROM sqlite_sequence WHERE name = 'messages_m008');
        UPDATE sqlite_sequence SET seq = MAX(seq, COALESCE(
            (SELECT MAX(seq) FROM sqlite_sequence WHERE name = 'messages'), 0))
            WHERE name = 'messages_m008';
        DROP TABLE messages;
        ALTER TABLE messages_m008 RENAME TO messages;
        CREATE INDEX messages_parent ON messages (parent_id);
        CREATE INDEX messages_rank ON messages (conversation_id, active_rank);
        CREATE TABLE message_parts (
            message_id INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
            ord INTEGER NOT NULL,
            type TEXT NOT NULL,
            data TEXT NOT NULL,
            sha256 TEXT,
            PRIMARY KEY (message_id, ord)
        );
        CREATE INDEX message_parts_sha256 ON message_parts (sha256) WHERE sha256 IS NOT NULL;
        """,
    ),
]


def connect(path: Path | str, *, read_only: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) and migrate the database at ``path``.

    ``read_only`` opens an existing file without writing to it (its migrations must be
    applied already). Raises a ``StorageError`` subclass from ``app.storage.errors`` naming
    the real problem: read-only, disk full, unreachable, locked, damaged, or newer schema.
    """
    memory = str(path) == ":memory:"
    try:
        if memory:
            conn = sqlite3.connect(":memory:", timeout=BUSY_TIMEOUT_S, isolation_level=None)
        elif read_only:
            uri = Path(path).resolve().as_uri() + "?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except (sqlite3.Error, OSError) as exc:
        raise storage_error(exc, path, "opened") from exc
    try:
        conn.row_factory = sqlite3.Row
        install_text_factory(conn)  # invalid UTF-8 in a row is repaired and flagged
        conn.execute("PRAGMA foreign_keys = ON")
        if not read_only:
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        migrate(conn)
    except BaseException as exc:
        conn.close()
        if isinstance(exc, (sqlite3.Error, OSError)):
            raise storage_error(exc, path, "opened") from exc
        raise
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """All-or-nothing block: commits at the end, rolls back on any exception and re-raises.

    The outermost block takes the write lock at once (``BEGIN IMMEDIATE``); a nested block is
    a savepoint, so an error caught inside an outer block undoes only the inner writes.
    """
    if conn.in_transaction:
        name = f"hearth_sp{next(_savepoints)}"
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield conn
        except BaseException:
            _quietly(conn, f"ROLLBACK TO {name}")
            _quietly(conn, f"RELEASE {name}")
            raise
        conn.execute(f"RELEASE {name}")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            _quietly(conn, "ROLLBACK")
        raise


def _quietly(conn: sqlite3.Connection, sql: str) -> None:
    """Run a rollback statement; its own failure must not hide the error that caused it."""
    with suppress(sqlite3.Error):
        conn.execute(sql)


def applied_migrations(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations already applied, in order."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'"
    ).fetchone()
    if not exists:
        with transaction(conn):
            conn.execute(
                "CREATE TABLE IF NOT EXISTS _migrations "
                "(name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
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
        with transaction(conn):
            for statement in _statements(sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (name, time.time())
            )
        applied.append(name)
    if stored_major(conn) != SCHEMA_MAJOR:
        with transaction(conn):
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
