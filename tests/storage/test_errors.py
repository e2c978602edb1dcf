"""SQLite failures are named for what they are; only a damaged file says "move it aside"."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.errors import DiskFullError, StorageError
from app.storage import db
from app.storage.errors import (
    HistoryBusyError,
    HistoryDamagedError,
    HistoryDiskFullError,
    HistoryReadOnlyError,
    HistoryUnavailableError,
)
from app.storage.history import History

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _not_damaged(err: StorageError) -> None:
    assert "aside" not in str(err) and "damaged" not in str(err).replace("not damaged", "")


def _seeded(path) -> str:
    h = History(path)
    conv = h.create_conversation("kept")
    h.add_message(conv.id, "user", "hello")
    h.close()
    return conv.id


_CHMOD_CHECK = """
import json, stat, sys
from pathlib import Path
from app.storage.history import History
folder = Path(sys.argv[1]); path = folder / "h.sqlite3"
for leftover in folder.glob("h.sqlite3-*"):
    leftover.unlink()
path.chmod(stat.S_IRUSR)
folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
try:
    History(path)
    result = ["opened", ""]
except Exception as exc:
    result = [type(exc).__name__, str(exc)]
finally:
    folder.chmod(stat.S_IRWXU)
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
print(json.dumps(result))
"""

# Root ignores permissions; without these capabilities it obeys them like any user.
_DROP = "-dac_override,-dac_read_search,-fowner"


def test_a_chmod_read_only_history_is_reported_as_read_only(tmp_path):
    folder = tmp_path / "data"
    _seeded(folder / "h.sqlite3")
    command = [sys.executable, "-c", _CHMOD_CHECK, str(folder)]
    if AS_ROOT:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: chmod cannot be tested")
        command = [setpriv, "--bounding-set", _DROP, "--inh-caps", _DROP, *command]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    if AS_ROOT and done.returncode != 0 and "setpriv" in done.stderr:
        pytest.skip(f"cannot drop root's capabilities here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    kind, message = json.loads(done.stdout)
    assert kind == "HistoryReadOnlyError", message
    assert "read-only" in message and "aside" not in message


def test_a_read_only_history_opens_for_reading_and_refuses_writes_by_name(tmp_path):
    """SQLite's read-only open mode: what a chmod'd file gives a non-root user."""
    path = tmp_path / "h.sqlite3"
    conv_id = _seeded(path)
    h = History(path, read_only=True)
    assert [m.content for m in h.active_path(conv_id)] == ["hello"]
    expected = re.escape(f"{path} could not be saved:") + ".*read-only"
    with pytest.raises(HistoryReadOnlyError, match=expected) as e:
        h.rename_conversation(conv_id, "new")
    _not_damaged(e.value)
    assert not h._conn.in_transaction
    h.close()
    assert History(path).get_conversation(conv_id).title == "kept"


def test_query_only_connection_reports_read_only(tmp_path):
    path = tmp_path / "h.sqlite3"
    conv_id = _seeded(path)
    h = History(path)
    h._conn.execute("PRAGMA query_only = ON")
    with pytest.raises(HistoryReadOnlyError):
        h.add_message(conv_id, "user", "more")
    h._conn.execute("PRAGMA query_only = OFF")
    h.add_message(conv_id, "user", "more")
    assert [m.content for m in h.active_path(conv_id)] == ["hello", "more"]


def test_a_history_that_needs_migrating_on_a_read_only_open_says_read_only(tmp_path):
    path = tmp_path / "h.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    conn.close()
    with pytest.raises(HistoryReadOnlyError) as err:
        History(path, read_only=True)
    _not_damaged(err.value)


def test_a_full_disk_is_reported_as_full_and_nothing_is_lost(tmp_path):
    path = tmp_path / "h.sqlite3"
    conv_id = _seeded(path)
    h = History(path)
    pages = h._conn.execute("PRAGMA page_count").fetchone()[0]
    h._conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(HistoryDiskFullError, match="the disk is full") as err:
        h.add_message(conv_id, "assistant", "x" * 200_000)
    assert isinstance(err.value, DiskFullError)
    _not_damaged(err.value)
    assert not h._conn.in_transaction
    h._conn.execute("PRAGMA max_page_count = 1073741823")  # space freed
    h.rename_conversation(conv_id, "after")
    h.close()
    h = History(path)
    assert h.get_conversation(conv_id).title == "after"
    assert [m.content for m in h.active_path(conv_id)] == ["hello"]


def test_a_lock_held_by_another_program_is_reported_as_locked(tmp_path):
    path = tmp_path / "h.sqlite3"
    conv_id = _seeded(path)
    h = History(path)
    h._conn.execute("PRAGMA busy_timeout = 50")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(HistoryBusyError, match="locked by another program") as err:
            h.rename_conversation(conv_id, "x")
        _not_damaged(err.value)
    finally:
        other.execute("ROLLBACK")
        other.close()
    h.rename_conversation(conv_id, "x")


def test_a_folder_in_place_of_the_file_is_unreachable_not_damaged(tmp_path):
    path = tmp_path / "h.sqlite3"
    path.mkdir()
    with pytest.raises(HistoryUnavailableError, match="cannot be reached") as err:
        History(path)
    _not_damaged(err.value)


def test_not_a_database_says_damaged_and_move_aside(tmp_path):
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(HistoryDamagedError, match="Move the file aside"):
        History(path)


def test_corrupt_pages_say_damaged(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = h.create_conversation()
    for i in range(300):
        h.add_message(conv.id, "user", f"message {i} " * 20)
    h._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    h.close()
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(2 * page, len(data), page):  # scribble over every b-tree page header
        data[offset : offset + 16] = b"\xa5" * 16
    path.write_bytes(bytes(data))
    with pytest.raises(HistoryDamagedError, match="damaged"):
        h = History(path)
        h.active_path(conv.id)
        h.list_conversations("message")


def test_migrations_still_name_other_errors(tmp_path, monkeypatch):
    broken = [*db.MIGRATIONS, ("m999_broken", "CREATE TABLE x (a); CREATE TABLE x (b)")]
    monkeypatch.setattr(db, "MIGRATIONS", broken)
    with pytest.raises(StorageError, match="already exists") as err:
        db.connect(tmp_path / "h.sqlite3")
    _not_damaged(err.value)
