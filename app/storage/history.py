"""The conversation repository: the only code that reads or writes chat history.

Plain Python (no Qt). One ``History`` per thread: the UI thread owns the app's instance.

Nothing the user wrote is lost by an action that looks like a change:

* **Branches.** A conversation is a tree (see ``app.storage.tree``): each message has a
  parent, the children of one parent are variants of that turn, and each parent shows one
  active child. ``edit_message`` adds the new text as a sibling of the edited message (the
  old one keeps its answers below it), ``regenerate`` adds an empty reply beside the old one,
  ``switch_variant`` shows another sibling, ``active_path`` is the chat on screen with each
  message's ``variant_index`` / ``variant_count`` for the ``‹ i / n ›`` control.
* **Deletes are soft.** ``delete_message`` / ``delete_turn`` / ``delete_conversation`` return a
  ``Deletion`` that ``undo_delete`` restores; rows deleted longer than ``PURGE_AFTER_S`` ago
  are purged when the history is opened. Deleting a reply never deletes the question above
  it; the messages below a deleted one hang from the message above it.
* **All-or-nothing writes.** Every write runs in ``transaction`` (rolls back on any
  exception); text is passed through ``app.text.clean_text`` first.
* **Damaged rows** are read with empty fallbacks and flagged (``damaged``) instead of
  stopping the app; SQLite errors become the ``app.storage.errors`` class that names them.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.chat.parts import PART_TYPES, Part, Reasoning, Text, part_to_dict
from app.errors import StorageError
from app.paths import history_db_path
from app.storage import db
from app.storage.errors import storage_error
from app.storage.records import (
    TITLE_LIMIT,
    Conversation,
    StoredMessage,
    clamp_title,
    conversation_from_row,
    message_from_row,
)
from app.storage.tree import Node, Tree
from app.text import clean_text, clean_value

__all__ = ["Conversation", "Deletion", "History", "ReplyWriter", "StoredMessage"]

TITLE_MAX = 60
STATUSES = ("complete", "streaming", "stopped", "failed")
ROLES = ("system", "user", "assistant", "tool")
PURGE_AFTER_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Deletion:
    """What a delete hid; pass it to ``History.undo_delete`` to bring it back."""

    conversation_id: str
    deleted_at: float
    message_ids: tuple[int, ...] = ()
    whole_conversation: bool = False
    restore_leaf: int | None = None  # the active leaf before, shown again on undo


def title_from_text(text: str) -> str:
    """A conversation title from the first user message: its first non-empty line, shortened."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = line.lstrip("#>*- ").strip()
    if len(line) > TITLE_MAX:
        line = line[: TITLE_MAX - 1].rstrip() + "…"
    return line or "New chat"


class History:
    """Conversations and message trees in SQLite. Every write is committed at once.

    ``read_only`` opens an existing history without writing to it (for a file the user
    cannot write: every write then raises ``HistoryReadOnlyError``). ``housekeeping=False``
    skips the start-up repairs (replies left 'streaming' marked failed, old deletes purged):
    a second connection opened while the app runs (an import job's) must not touch the reply
    the app is streaming.
    """

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        read_only: bool = False,
        purge_after: float = PURGE_AFTER_S,
        housekeeping: bool = True,
    ) -> None:
        self.path = Path(path) if path is not None else history_db_path()
        self.read_only = read_only
        self._conn = db.connect(self.path, read_only=read_only)
        if not read_only and housekeeping:
            try:
                self.recover_interrupted()
                self.purge_deleted(purge_after)
            except BaseException:
                self._conn.close()
                raise

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes: all of them are saved or, on any exception, none (nests)."""
        try:
            with db.transaction(self._conn):
                yield
        except (sqlite3.Error, OSError) as exc:
            raise storage_error(exc, self.path, "saved") from exc

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
            title=clamp_title(clean_text(title)),
            created_at=now,
            updated_at=now,
            system_prompt=clean_text(system_prompt),
            settings=clean_value(dict(settings or {})),
            model_id=None if model_id is None else clean_text(model_id),
        )
        with self.transaction():
            self._conn.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at, system_prompt, "
                "settings, model_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conv.id, conv.title, now, now, conv.system_prompt, json.dumps(conv.settings),
                 conv.model_id),
            )
        return conv

    def get_conversation(self, conversation_id: str) -> Conversation | None:
        """The conversation, or None (also when deleted). ``damaged`` is set when its row
        or any of its messages could not be read as written."""
        rows = self._read(
            "SELECT * FROM conversations WHERE id = ? AND deleted_at IS NULL", (conversation_id,)
        )
        if not rows:
            return None
        conv = conversation_from_row(rows[0])
        if not conv.damaged:
            messages = self._read(
                "SELECT * FROM messages WHERE conversation_id = ? AND deleted_at IS NULL",
                (conversation_id,),
            )
            parts = self._parts(conversation_id)
            conv.damaged = any(message_from_row(r, parts.get(int(r["id"]))).damaged
                               for r in messages)
        return conv

    def list_conversations(self, query: str = "") -> list[Conversation]:
        """Pinned chats first, then most recent first; ``query`` matches titles and message
        text (case-insensitive).

        Here ``damaged`` reflects the conversation's own row only (messages are not read).
        A title longer than ``TITLE_LIMIT`` (an older version stored any length) is cut in
        SQL, so a 50 MB title is never read for the list.
        """
        if not query.strip():
            rows = self._read(
                f"SELECT {_LIST_COLUMNS} FROM conversations c WHERE deleted_at IS NULL "
                "ORDER BY pinned DESC, updated_at DESC, rowid DESC"
            )
        else:
            pattern = "%" + _escape_like(clean_text(query.strip())) + "%"
            rows = self._read(
                f"SELECT {_LIST_COLUMNS} FROM conversations c WHERE c.deleted_at IS NULL AND ("
                "c.title LIKE ?1 ESCAPE '\\' OR EXISTS ("
                "SELECT 1 FROM messages m WHERE m.conversation_id = c.id "
                "AND m.deleted_at IS NULL AND m.content LIKE ?1 ESCAPE '\\')) "
                "ORDER BY pinned DESC, updated_at DESC, rowid DESC",
                (pattern,),
            )
        return [conversation_from_row(row) for row in rows]

    def rename_conversation(self, conversation_id: str, title: str) -> None:
        self._write(
            "UPDATE conversations SET title = ? WHERE id = ?",
            (clamp_title(clean_text(title)), conversation_id),
        )

    def update_conversation(
        self,
        conversation_id: str,
        *,
        system_prompt: str | None = None,
        settings: dict | None = None,
        model_id: str | None = None,
    ) -> None:
        sets: list[str] = []
        args: list[Any] = []
        if system_prompt is not None:
            sets.append("system_prompt = ?")
            args.append(clean_text(system_prompt))
        if settings is not None:
            sets.append("settings = ?")
            args.append(json.dumps(clean_value(settings)))
        if model_id is not None:
            sets.append("model_id = ?")
            args.append(clean_text(model_id))
        if sets:
            self._write(
                f"UPDATE conversations SET {', '.join(sets)} WHERE id = ?",
                (*args, conversation_id),
            )

    def set_pinned(self, conversation_id: str, pinned: bool) -> None:
        """Pin a chat to the top of the list (or unpin it)."""
        self._write(
            "UPDATE conversations SET pinned = ? WHERE id = ?", (int(pinned), conversation_id)
        )

    def touch(self, conversation_id: str, when: float | None = None) -> None:
        self._write(
            "UPDATE conversations SET updated_at = ? WHERE id = ?",
            (time.time() if when is None else when, conversation_id),
        )

    def delete_conversation(self, conversation_id: str) -> Deletion:
        """Hide a conversation (undoable with ``undo_delete`` until purged)."""
        now = time.time()
        self._write(
            "UPDATE conversations SET deleted_at = ? WHERE id = ? AND deleted_at IS NULL",
            (now, conversation_id),
        )
        return Deletion(conversation_id, now, whole_conversation=True)

    # the message tree ---------------------------------------------------------------------

    def active_path(self, conversation_id: str) -> list[StoredMessage]:
        """The chat on screen: root to leaf through each parent's active variant."""
        tree = self._tree(conversation_id)
        rows = self._rows(conversation_id)
        parts = self._parts(conversation_id)
        return [
            message_from_row(rows[mid], parts.get(mid), **tree.variant_fields(mid, depth))
            for depth, mid in enumerate(tree.path())
            if mid in rows
        ]

    def messages(self, conversation_id: str) -> list[StoredMessage]:
        """The messages on screen (``active_path``), for callers that see one chat."""
        return self.active_path(conversation_id)

    def all_messages(self, conversation_id: str) -> list[StoredMessage]:
        """Every live message of every branch, parents before children (insertion order)."""
        tree = self._tree(conversation_id)
        rows = self._rows(conversation_id)
        parts = self._parts(conversation_id)
        return [
            message_from_row(row, parts.get(mid), **tree.variant_fields(mid, tree.depth(mid)))
            for mid, row in rows.items()
            if mid in tree
        ]

    def get_message(self, message_id: int) -> StoredMessage | None:
        """A live message (None when deleted or unknown)."""
        rows = self._read(
            "SELECT * FROM messages WHERE id = ? AND deleted_at IS NULL", (message_id,)
        )
        if not rows:
            return None
        tree = self._tree(rows[0]["conversation_id"])
        if message_id not in tree:
            return None
        parts = self._read("SELECT * FROM message_parts WHERE message_id = ? ORDER BY ord",
                           (message_id,))
        return message_from_row(rows[0], parts,
                                **tree.variant_fields(message_id, tree.depth(message_id)))

    def add_message(
        self,
        conversation_id: str,
        role: str,
        content: str,
        *,
        status: str = "complete",
        provenance: dict | None = None,
        created_at: float | None = None,
        after: int | None = None,
        reasoning: str = "",
        reasoning_ms: float = 0.0,
        parts: Sequence[Part] = (),
    ) -> StoredMessage:
        """Add a message below ``after`` (default: the end of the active path) and show it.

        ``parts``: its parts besides text and thinking (see ``StoredMessage.parts``). The
        first user message also titles an untitled conversation.
        """
        with self.transaction():
            tree = self._tree(conversation_id)
            parent = tree.leaf() if after is None else after
            if parent is not None and parent not in tree:
                raise ValueError(f"message {parent} is not a live message of this chat")
            if parent is not None:
                self._activate(tree, parent)
            new_id = self.insert_message(
                conversation_id, role, content, parent, status=status,
                provenance=provenance, created_at=created_at,
                reasoning=reasoning, reasoning_ms=reasoning_ms, parts=parts,
            )
        message = self.get_message(new_id)
        assert message is not None
        return message

    def edit_message(self, message_id: int, new_text: str) -> StoredMessage:
        """Add ``new_text`` as a new variant beside ``message_id`` and show it.

        The edited message and everything below it stay, one ``switch_variant`` away.
        """
        with self.transaction():
            old, tree = self._live(message_id)
            parent = tree.parent[message_id]
            if parent is not None:
                self._activate(tree, parent)
            kept = self.get_message(message_id)  # its attachments stay with the new text
            new_id = self.insert_message(old["conversation_id"], old["role"], new_text, parent,
                                         parts=kept.parts if kept is not None else ())
        message = self.get_message(new_id)
        assert message is not None
        return message

    def regenerate(self, reply_id: int) -> StoredMessage:
        """Add an empty 'streaming' reply beside the assistant message ``reply_id`` and show
        it; the old reply stays as a variant. Fill it with ``ReplyWriter``."""
        with self.transaction():
            old, tree = self._live(reply_id)
            if old["role"] != "assistant":
                raise ValueError("only an assistant reply can be regenerated")
            parent = tree.parent[reply_id]
            if parent is not None:
                self._activate(tree, parent)
            new_id = self.insert_message(
                old["conversation_id"], "assistant", "", parent, status="streaming"
            )
        message = self.get_message(new_id)
        assert message is not None
        return message

    def switch_variant(self, message_id: int, index: int) -> list[StoredMessage]:
        """Show variant ``index`` (0-based) of ``message_id``'s turn; return the new path.

        Below the chosen variant, the branch it showed last is shown again.
        """
        with self.transaction():
            row, tree = self._live(message_id)
            siblings = tree.siblings(message_id)
            if not 0 <= index < len(siblings):
                raise IndexError(f"variant {index} of {len(siblings)}")
            self._activate(tree, siblings[index])
        return self.active_path(row["conversation_id"])

    def update_message(
        self,
        message_id: int,
        *,
        content: str | None = None,
        status: str | None = None,
        provenance: dict | None = None,
        reasoning: str | None = None,
        reasoning_ms: float | None = None,
        parts: Sequence[Part] | None = None,
    ) -> None:
        """Change a message's fields; ``parts`` (None: unchanged) replaces its other parts."""
        if parts is not None:
            with self.transaction():
                self._update_fields(message_id, content, status, provenance, reasoning,
                                    reasoning_ms)
                self._write_parts(message_id, parts, replace=True)
            return
        self._update_fields(message_id, content, status, provenance, reasoning, reasoning_ms)

    def _update_fields(self, message_id: int, content: str | None, status: str | None,
                       provenance: dict | None, reasoning: str | None,
                       reasoning_ms: float | None) -> None:
        sets: list[str] = []
        args: list[Any] = []
        if content is not None:
            sets.append("content = ?")
            args.append(clean_text(content))
        if reasoning is not None:
            sets.append("reasoning = ?")
            args.append(clean_text(reasoning))
        if reasoning_ms is not None:
            sets.append("reasoning_ms = ?")
            args.append(max(0.0, float(reasoning_ms)))
        if status is not None:
            if status not in STATUSES:
                raise ValueError(f"unknown message status {status!r}")
            sets.append("status = ?")
            args.append(status)
        if provenance is not None:
            sets.append("provenance = ?")
            args.append(json.dumps(clean_value(provenance)))
        if sets:
            self._write(f"UPDATE messages SET {', '.join(sets)} WHERE id = ?", (*args, message_id))

    # deleting and undoing -----------------------------------------------------------------

    def delete_message(self, message_id: int) -> Deletion:
        """Hide one message (one variant); the messages below it follow the one above it."""
        return self._delete([message_id])

    def delete_turn(self, message_id: int) -> Deletion:
        """Delete a user message with the reply shown below it, or a reply alone (never the
        question above it)."""
        with self.transaction():
            row, tree = self._live(message_id)
            ids = [message_id]
            if row["role"] == "user":
                child = tree.active_child(message_id)
                if child is not None and self._role(child) == "assistant":
                    ids.append(child)
            return self._delete(ids)

    def delete_messages_from(self, conversation_id: str, position: int) -> Deletion | None:
        """Hide the message at ``position`` of the active path and everything below it.

        Kept for the controller's old truncate-then-resend flow; ``edit_message`` and
        ``regenerate`` are the non-destructive calls. Undoable like every delete.
        """
        with self.transaction():
            tree = self._tree(conversation_id)
            path = tree.path()
            if not 0 <= position < len(path):
                return None
            return self._delete(tree.subtree(path[position]))

    def undo_delete(self, deletion: Deletion) -> None:
        """Restore what ``deletion`` hid. Raises StorageError once it has been purged."""
        with self.transaction():
            if deletion.whole_conversation:
                cur = self._conn.execute(
                    "UPDATE conversations SET deleted_at = NULL WHERE id = ? AND deleted_at = ?",
                    (deletion.conversation_id, deletion.deleted_at),
                )
                restored = cur.rowcount
            else:
                restored = 0
                for mid in deletion.message_ids:
                    cur = self._conn.execute(
                        "UPDATE messages SET deleted_at = NULL WHERE id = ? AND deleted_at = ?",
                        (mid, deletion.deleted_at),
                    )
                    restored += cur.rowcount
                tree = self._tree(deletion.conversation_id)
                if deletion.restore_leaf is not None and deletion.restore_leaf in tree:
                    self._activate(tree, deletion.restore_leaf)
            if not restored:
                raise StorageError(
                    "This deletion can no longer be undone: it was cleared from the history."
                )

    def purge_deleted(self, older_than: float = PURGE_AFTER_S) -> int:
        """Erase rows deleted more than ``older_than`` seconds ago; return how many messages.

        Children of an erased message are moved up to its parent first, so the tree keeps
        the shape the user saw.
        """
        cutoff = time.time() - older_than
        with self.transaction():
            doomed = [
                r[0]
                for r in self._conn.execute(
                    "SELECT id FROM messages WHERE deleted_at IS NOT NULL AND deleted_at <= ? "
                    "ORDER BY seq",
                    (cutoff,),
                )
            ]
            for mid in doomed:
                self._conn.execute(
                    "UPDATE messages SET parent_id = "
                    "(SELECT parent_id FROM messages WHERE id = ?1) WHERE parent_id = ?1",
                    (mid,),
                )
                self._conn.execute("DELETE FROM messages WHERE id = ?", (mid,))
            self._conn.execute(
                "DELETE FROM conversations WHERE deleted_at IS NOT NULL AND deleted_at <= ?",
                (cutoff,),
            )
        return len(doomed)

    def recover_interrupted(self) -> int:
        """Mark replies left 'streaming' by a crash as failed; return how many."""
        cur = self._write("UPDATE messages SET status = 'failed' WHERE status = 'streaming'", ())
        return cur.rowcount

    # helpers ------------------------------------------------------------------------------

    def _write(self, sql: str, args: tuple) -> sqlite3.Cursor:
        with self.transaction():
            return self._conn.execute(sql, args)

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        try:
            return self._conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise storage_error(exc, self.path, "read") from exc

    def _tree(self, conversation_id: str) -> Tree:
        rows = self._read(
            "SELECT id, parent_id, seq, active_rank, deleted_at FROM messages "
            "WHERE conversation_id = ?",
            (conversation_id,),
        )
        return Tree([
            Node(r[0], r[1], _int(r[2]), _int(r[3]), r[4] is not None) for r in rows
        ])

    def _rows(self, conversation_id: str) -> dict[int, sqlite3.Row]:
        rows = self._read(
            "SELECT * FROM messages WHERE conversation_id = ? AND deleted_at IS NULL "
            "ORDER BY seq",
            (conversation_id,),
        )
        return {int(r["id"]): r for r in rows}

    def _parts(self, conversation_id: str) -> dict[int, list[sqlite3.Row]]:
        """Each message's ``message_parts`` rows, in order."""
        rows = self._read(
            "SELECT p.* FROM message_parts p JOIN messages m ON m.id = p.message_id "
            "WHERE m.conversation_id = ? ORDER BY p.message_id, p.ord",
            (conversation_id,),
        )
        found: dict[int, list[sqlite3.Row]] = {}
        for row in rows:
            found.setdefault(int(row["message_id"]), []).append(row)
        return found

    def _write_parts(self, message_id: int, parts: Sequence[Part], *,
                     replace: bool = False) -> None:
        """Store ``parts`` (each its JSON form, app/chat/parts.py) as the message's; text and
        thinking are refused here: they are ``content`` and ``reasoning``."""
        rows = []
        for ord_, part in enumerate(parts):
            if isinstance(part, (Text, Reasoning)) or PART_TYPES.get(
                    getattr(part, "kind", None)) is not type(part):
                raise ValueError(f"a {type(part).__name__} is not stored as a part "
                                 "(text and thinking are the message's content and reasoning)")
            data = clean_value(part_to_dict(part))
            rows.append((message_id, ord_, part.kind, json.dumps(data, ensure_ascii=False),
                         data.get("sha256") or None))
        with self.transaction():
            if replace:
                self._conn.execute("DELETE FROM message_parts WHERE message_id = ?",
                                   (message_id,))
            self._conn.executemany(
                "INSERT INTO message_parts (message_id, ord, type, data, sha256) "
                "VALUES (?, ?, ?, ?, ?)", rows)

    def _live(self, message_id: int) -> tuple[sqlite3.Row, Tree]:
        rows = self._read(
            "SELECT * FROM messages WHERE id = ? AND deleted_at IS NULL", (message_id,)
        )
        if not rows:
            raise ValueError(f"message {message_id} does not exist or was deleted")
        tree = self._tree(rows[0]["conversation_id"])
        if message_id not in tree:
            raise ValueError(f"message {message_id} does not exist or was deleted")
        return rows[0], tree

    def _role(self, message_id: int) -> str:
        rows = self._read("SELECT role FROM messages WHERE id = ?", (message_id,))
        return rows[0][0] if rows else ""

    def _next_rank(self, conversation_id: str) -> int:
        row = self._conn.execute(
            "SELECT COALESCE(MAX(active_rank), 0) + 1 FROM messages WHERE conversation_id = ?",
            (conversation_id,),
        ).fetchone()
        return int(row[0])

    def _activate(self, tree: Tree, message_id: int) -> None:
        """Make every message from the root down to ``message_id`` its parent's active child."""
        conversation_id = None
        for mid in tree.lineage(message_id):
            if tree.is_active(mid):
                continue
            if conversation_id is None:
                conversation_id = self._conn.execute(
                    "SELECT conversation_id FROM messages WHERE id = ?", (mid,)
                ).fetchone()[0]
            self._conn.execute(
                "UPDATE messages SET active_rank = ? WHERE id = ?",
                (self._next_rank(conversation_id), mid),
            )

    def insert_message(
        self,
        conversation_id: str,
        role: str,
        content: str,
        parent_id: int | None,
        *,
        status: str = "complete",
        provenance: dict | None = None,
        created_at: float | None = None,
        active: bool = True,
        reasoning: str = "",
        reasoning_ms: float = 0.0,
        parts: Sequence[Part] = (),
    ) -> int:
        """Low level, for importers: insert one message below ``parent_id`` (None: a new first
        turn) without touching the other branches; ``active`` makes it its parent's shown
        variant. Returns its id. ``add_message`` is the call for everyone else."""
        if role not in ROLES:
            raise ValueError(f"unknown message role {role!r}")
        if status not in STATUSES:
            raise ValueError(f"unknown message status {status!r}")
        now = time.time() if created_at is None else created_at
        content = clean_text(content)
        prov = json.dumps(clean_value(provenance or {}))
        with self.transaction():
            seq = self._conn.execute(
                "SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()[0]
            rank = self._next_rank(conversation_id) if active else 0
            cur = self._conn.execute(
                "INSERT INTO messages (conversation_id, seq, parent_id, active_rank, role, "
                "content, status, provenance, created_at, reasoning, reasoning_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, seq, parent_id, rank, role, content, status, prov, now,
                 clean_text(reasoning), max(0.0, float(reasoning_ms))),
            )
            new_id = int(cur.lastrowid or 0)
            self._write_parts(new_id, parts)
            self._conn.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id)
            )
            if role == "user":
                self._conn.execute(
                    "UPDATE conversations SET title = ? WHERE id = ? AND title = ''",
                    (title_from_text(content), conversation_id),
                )
            return new_id

    def _delete(self, message_ids: list[int]) -> Deletion:
        now = time.time()
        with self.transaction():
            _, tree = self._live(message_ids[0])
            conversation_id = self._conn.execute(
                "SELECT conversation_id FROM messages WHERE id = ?", (message_ids[0],)
            ).fetchone()[0]
            leaf = tree.leaf()
            for mid in message_ids:
                self._conn.execute(
                    "UPDATE messages SET deleted_at = ? WHERE id = ? AND deleted_at IS NULL",
                    (now, mid),
                )
        return Deletion(
            conversation_id,
            now,
            message_ids=tuple(message_ids),
            restore_leaf=leaf if leaf in message_ids else None,
        )


class ReplyWriter:
    """Saves a streaming reply to the database at most once per ``interval`` seconds.

    The row is created by the caller with status 'streaming'; ``append`` accumulates the
    answer's text and ``append_reasoning`` the model's thinking (kept apart), and either
    writes both when the interval has passed, so a crash loses at most ``interval``
    seconds; ``finish`` writes the final text, reasoning, status and provenance.
    """

    def __init__(
        self,
        history: History,
        message_id: int,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        text: str = "",
        reasoning: str = "",
    ) -> None:
        self._history = history
        self.message_id = message_id
        self._interval = interval
        self._clock = clock
        self.text = text
        self.reasoning = reasoning
        self._saved = (text, reasoning)
        self._last_write = clock()
        self.writes = 0

    def append(self, delta: str) -> None:
        self.text += delta
        self._maybe_flush()

    def append_reasoning(self, delta: str) -> None:
        self.reasoning += delta
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if self._clock() - self._last_write >= self._interval:
            self.flush()

    def flush(self) -> None:
        if (self.text, self.reasoning) != self._saved:
            self._history.update_message(self.message_id, content=self.text,
                                         reasoning=self.reasoning)
            self._saved = (self.text, self.reasoning)
            self.writes += 1
        self._last_write = self._clock()

    def finish(self, status: str, provenance: dict | None = None, *,
               reasoning_ms: float | None = None, parts: Sequence[Part] | None = None) -> None:
        """Write the final text and reasoning with ``status``, ``provenance``, how long
        the model thought (``reasoning_ms``; None leaves it as stored) and its other parts
        (``parts``, the tool calls it made; None leaves them as stored)."""
        self._history.update_message(
            self.message_id, content=self.text, status=status, provenance=provenance,
            reasoning=self.reasoning, reasoning_ms=reasoning_ms, parts=parts,
        )
        self._saved = (self.text, self.reasoning)
        self.writes += 1


#: the conversation columns the list reads: the title cut one character past the limit, so
#: ``clamp_title`` still sees that it was longer
_LIST_COLUMNS = (
    f"c.id, substr(c.title, 1, {TITLE_LIMIT + 1}) AS title, c.created_at, c.updated_at, "
    "c.system_prompt, c.settings, c.model_id, c.pinned"
)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
