"""Large imports: linear in messages (index lookups, not scans), reported as a job with
progress, and still all-or-nothing when cancelled or failing part way."""

from __future__ import annotations

import json
import sqlite3

import pytest

from app.jobs import JobCancelled, JobControl, Progress
from app.storage import importer
from app.storage.errors import HistoryDiskFullError
from app.storage.history import History
from app.storage.importer import import_job, parse_export, write_chats


def _export(n: int, title: str = "Big") -> str:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
                for i in range(n)]
    return json.dumps({"format": "hearth-conversation", "version": 1,
                       "conversation": {"title": title}, "messages": messages})


def _counts(path) -> tuple[int, int]:
    """Counted over a connection of its own: what another program would see."""
    conn = sqlite3.connect(path)
    try:
        return (conn.execute("SELECT COUNT(*) FROM conversations").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
    finally:
        conn.close()


def test_the_next_rank_is_an_index_lookup():
    h = History(":memory:")
    plan = h._conn.execute(
        "EXPLAIN QUERY PLAN SELECT COALESCE(MAX(active_rank), 0) + 1 FROM messages "
        "WHERE conversation_id = ?", ("c",)
    ).fetchall()
    assert [row[3] for row in plan] == [
        "SEARCH messages USING COVERING INDEX messages_rank (conversation_id=?)"
    ]


def _sqlite_steps_per_message(n: int) -> float:
    """SQLite virtual-machine instructions spent per imported message, for an ``n``-message
    chat (a count of work, not a time: the same on any machine)."""
    h = History(":memory:")
    chats = parse_export(_export(n))
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    h._conn.set_progress_handler(tick, 100)
    write_chats(h, chats)
    h._conn.set_progress_handler(None, 100)
    assert len(h.all_messages(h.list_conversations()[0].id)) == n
    return steps[0] * 100 / n


def test_importing_is_linear_in_messages():
    small = _sqlite_steps_per_message(5_000)
    large = _sqlite_steps_per_message(20_000)
    # a scan per insert made the 20k import cost ~4x more per message than the 5k one
    assert large < small * 1.3, (small, large)


def test_the_job_reports_progress_and_returns_the_new_chats(tmp_path, monkeypatch):
    monkeypatch.setattr(importer, "PROGRESS_EVERY", 100)
    db = tmp_path / "h.sqlite3"
    History(db).close()
    path = tmp_path / "big.json"
    path.write_text(_export(1_000), encoding="utf-8")
    seen: list[Progress] = []
    job = import_job(db, path)
    ids = job.work(seen.append, job.control)
    assert seen[0] == Progress(None, "Checking big.json…")
    fractions = [p.fraction for p in seen[1:]]
    assert fractions == [i / 10 for i in range(11)] + [1.0]
    assert seen[5].message == "Importing big.json: 400 of 1,000 messages"
    h = History(db)
    (conv,) = h.list_conversations()
    assert ids == [conv.id] and conv.title == "Big"
    assert len(h.all_messages(conv.id)) == 1_000


@pytest.mark.parametrize("how", ["cancel", "failure"])
def test_a_cancel_or_failure_part_way_leaves_the_history_as_it_was(tmp_path, monkeypatch, how):
    monkeypatch.setattr(importer, "PROGRESS_EVERY", 100)
    db = tmp_path / "h.sqlite3"
    h = History(db)
    kept = h.create_conversation("kept")
    h.add_message(kept.id, "user", "hello")
    path = tmp_path / "big.json"
    path.write_text(_export(1_000), encoding="utf-8")
    before = _counts(db)
    job = import_job(db, path)
    written: list[int] = []

    def report(progress: Progress) -> None:
        if progress.fraction:
            written.append(int(progress.message.split(": ")[1].split(" ")[0].replace(",", "")))
        if progress.fraction and progress.fraction >= 0.5:
            if how == "cancel":
                job.control.cancel()
            else:
                raise OSError(28, "No space left on device")

    with pytest.raises(JobCancelled if how == "cancel" else HistoryDiskFullError):
        job.work(report, job.control)
    assert written[-1] >= 500  # it had written half the chat when it stopped
    assert _counts(db) == before
    assert [c.title for c in h.list_conversations()] == ["kept"]
    assert [m.content for m in h.active_path(kept.id)] == ["hello"]
    h.add_message(kept.id, "assistant", "the history is writable again")


def test_a_cancel_before_writing_writes_nothing(tmp_path):
    db = tmp_path / "h.sqlite3"
    History(db).close()
    path = tmp_path / "one.json"
    path.write_text(_export(4), encoding="utf-8")
    control = JobControl()
    control.cancel()
    job = import_job(db, path)
    with pytest.raises(JobCancelled):
        job.work(lambda _p: None, control)
    assert _counts(db) == (0, 0)


def test_the_jobs_connection_leaves_a_streaming_reply_alone(tmp_path):
    db = tmp_path / "h.sqlite3"
    h = History(db)
    conv = h.create_conversation("live")
    reply = h.add_message(conv.id, "assistant", "", status="streaming")
    path = tmp_path / "one.json"
    path.write_text(_export(2), encoding="utf-8")
    job = import_job(db, path)
    job.work(lambda _p: None, job.control)
    assert h.get_message(reply.id).status == "streaming"
