"""The conversation repository: the only code that reads or writes chat history.

Plain Python (no Qt). One ``History`` per thread: the UI thread owns the app's instance.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import StorageError
from app.paths import history_db_path
from app.storage.db import connect

TITLE_MAX = 60
STATUSES = ("complete", "streaming", "stopped", "failed")


@dataclass
class Conversation:
    id: str
    title: str
    created_at: float
    updated_at: float
    system_prompt: str = ""
    settings: dict = field(default_factory=dict)
    model_id: str | None = None


@dataclass
class StoredMessage:
    id: int
    conversation_id: str
    position: int
    role: str
    content: str
    status: str = "complete"
    provenance: dict = field(default_factory=dict)
    created_at: float = 0.0


def title_from_text(text: str) -> str:
    """A conversation title from the first user message: its first non-empty line, shortened."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = line.lstrip("#>*- ").strip()
    if len(line) > TITLE_MAX:
        line = line[: TITLE_MAX - 1].rstrip() + "…"
    return line or "New chat"


class History:
    """Conversations and messages in SQLite. Every write is committed at once."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else history_db_path()
        self._conn = connect(self.path)
        self.recover_interrupted()

    def close(self) -> None:
        self._conn.close()

    # conversations ------------------------------------------------------------------------

    def create_conversation(
        self,
        title: str = "",
        *,
        system_prompt: str = "",
        settings: dict | None = None,
        model_id: str | None = None,
        created_at: float | None = None,
    ) -> Conversation:
        now = time.time() if created_at is None else created_at
        conv = Conversation(
            id=uuid.uuid4().hex,
            title=title,
            created_at=now,
            updated_at=now,
            system_prompt=system_prompt,
            settings=dict(settings or {}),
            model_id=model_id,
        )
        self._write(
            "INSERT INTO conversations (id, title, created_at, updated_at, system_prompt, "
            "settings, model_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (conv.id, conv.title, now, now, system_prompt, json.dumps(conv.settings), model_id),
        )
        return conv

    def get_conversation(self, conversation_id: str) -> Conversation | None:
        row = self._conn.execute(
            "SELECT * FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        return _conversation(row) if row else None

    def list_conversations(self, query: str = "") -> list[Conversation]:
        """Most recent first; ``query`` matches titles and message text (case-insensitive)."""
        if not query.strip():
            rows = self._conn.execute(
                "SELECT * FROM conversations ORDER BY updated_at DESC, rowid DESC"
            )
        else:
            pattern = "%" + _escape_like(query.strip()) + "%"
            rows = self._conn.execute(
                "SELECT * FROM conversations c WHERE c.title LIKE ?1 ESCAPE '\\' OR EXISTS ("
                "SELECT 1 FROM messages m WHERE m.conversation_id = c.id "
                "AND m.content LIKE ?1 ESCAPE '\\') ORDER BY updated_at DESC, rowid DESC",
                (pattern,),
            )
        return [_conversation(row) for row in rows]

    def rename_conversation(self, conversation_id: str, title: str) -> None:
        self._write("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def update_conversation(
        self,
        conversation_id: str,
        *,
        system_prompt: str | None = None,
        settings: dict | None = None,
        model_id: str | None = None,
    ) -> None:
        sets, args = [], []
        if system_prompt is not None:
            sets.append("system_prompt = ?")
            args.append(system_prompt)
        if settings is not None:
            sets.append("settings = ?")
            args.append(json.dumps(settings))
        if model_id is not None:
            sets.append("model_id = ?")
            args.append(model_id)
        if sets:
            self._write(
                f"UPDATE conversations SET {', '.join(sets)} WHERE id = ?",
                (*args, conversation_id),
            )

    def touch(self, conversation_id: str, when: float | None = None) -> None:
        self._write(
            "UPDATE conversations SET updated_at = ? WHERE id = ?",
            (time.time() if when is None else when, conversation_id),
        )

    def delete_conversation(self, conversation_id: str) -> None:
        """Delete a conversation and (by cascade) its messages."""
        self._write("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # messages -----------------------------------------------------------------------------

    def messages(self, conversation_id: str) -> list[StoredMessage]:
        rows = self._conn.execute(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY position",
            (conversation_id,),
        )
        return [_message(row) for row in rows]

    def get_message(self, message_id: int) -> StoredMessage | None:
        row = self._conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        return _message(row) if row else None

    def add_message(
        self,
        conversation_id: str,
        role: str,
        content: str,
        *,
        status: str = "complete",
        provenance: dict | None = None,
        created_at: float | None = None,
    ) -> StoredMessage:
        """Append a message; the first user message also titles an untitled conversation."""
        now = time.time() if created_at is None else created_at
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            row = self._conn.execute(
                "SELECT COALESCE(MAX(position), -1) + 1 FROM messages WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            position = int(row[0])
            cur = self._conn.execute(
                "INSERT INTO messages (conversation_id, position, role, content, status, "
                "provenance, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    position,
                    role,
                    content,
                    status,
                    json.dumps(provenance or {}),
                    now,
                ),
            )
            self._conn.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id)
            )
            if role == "user":
                self._conn.execute(
                    "UPDATE conversations SET title = ? WHERE id = ? AND title = ''",
                    (title_from_text(content), conversation_id),
                )
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise _storage_error(exc) from exc
        return StoredMessage(
            id=int(cur.lastrowid or 0),
            conversation_id=conversation_id,
            position=position,
            role=role,
            content=content,
            status=status,
            provenance=dict(provenance or {}),
            created_at=now,
        )

    def update_message(
        self,
        message_id: int,
        *,
        content: str | None = None,
        status: str | None = None,
        provenance: dict | None = None,
    ) -> None:
        sets, args = [], []
        if content is not None:
            sets.append("content = ?")
            args.append(content)
        if status is not None:
            if status not in STATUSES:
                raise ValueError(f"unknown message status {status!r}")
            sets.append("status = ?")
            args.append(status)
        if provenance is not None:
            sets.append("provenance = ?")
            args.append(json.dumps(provenance))
        if sets:
            self._write(f"UPDATE messages SET {', '.join(sets)} WHERE id = ?", (*args, message_id))

    def delete_message(self, message_id: int) -> None:
        self._write("DELETE FROM messages WHERE id = ?", (message_id,))

    def delete_messages_from(self, conversation_id: str, position: int) -> None:
        """Delete the message at ``position`` and everything after it."""
        self._write(
            "DELETE FROM messages WHERE conversation_id = ? AND position >= ?",
            (conversation_id, position),
        )

    def recover_interrupted(self) -> int:
        """Mark replies left 'streaming' by a crash as failed; return how many."""
        cur = self._write("UPDATE messages SET status = 'failed' WHERE status = 'streaming'", ())
        return cur.rowcount

    # helpers ------------------------------------------------------------------------------

    def _write(self, sql: str, args: tuple) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, args)
        except sqlite3.Error as exc:
            raise _storage_error(exc) from exc

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")


class ReplyWriter:
    """Saves a streaming reply to the database at most once per ``interval`` seconds.

    The row is created by the caller with status 'streaming'; ``append`` accumulates text
    and writes it when the interval has passed, so a crash loses at most ``interval``
    seconds; ``finish`` writes the final text, status and provenance.
    """

    def __init__(
        self,
        history: History,
        message_id: int,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        text: str = "",
    ) -> None:
        self._history = history
        self.message_id = message_id
        self._interval = interval
        self._clock = clock
        self.text = text
        self._saved = text
        self._last_write = clock()
        self.writes = 0

    def append(self, delta: str) -> None:
        self.text += delta
        if self._clock() - self._last_write >= self._interval:
            self.flush()

    def flush(self) -> None:
        if self.text != self._saved:
            self._history.update_message(self.message_id, content=self.text)
            self._saved = self.text
            self.writes += 1
        self._last_write = self._clock()

    def finish(self, status: str, provenance: dict | None = None) -> None:
        self._history.update_message(
            self.message_id, content=self.text, status=status, provenance=provenance
        )
        self._saved = self.text
        self.writes += 1


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _storage_error(exc: sqlite3.Error) -> StorageError:
    text = str(exc)
    if "full" in text.lower():
        return StorageError(
            "The chat history could not be saved: the disk is full.",
            hint="Free some disk space and try again.",
        )
    return StorageError(
        f"The chat history could not be saved ({text}).",
        hint="Check that the data folder is writable.",
    )


def _conversation(row: sqlite3.Row) -> Conversation:
    return Conversation(
        id=row["id"],
        title=row["title"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        system_prompt=row["system_prompt"],
        settings=json.loads(row["settings"] or "{}"),
        model_id=row["model_id"],
    )


def _message(row: sqlite3.Row) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        conversation_id=row["conversation_id"],
        position=row["position"],
        role=row["role"],
        content=row["content"],
        status=row["status"],
        provenance=json.loads(row["provenance"] or "{}"),
        created_at=row["created_at"],
    )
