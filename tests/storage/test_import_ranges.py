"""Every time and number in an export is range-checked before anything is written, and a
row that holds one out of range anyway (edited by hand, an older version) reads as damaged
instead of stopping the app."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest

from app.storage.errors import ImportFileError
from app.storage.history import History
from app.storage.importer import import_file
from app.storage.records import TITLE_LIMIT
from app.storage.transfer import export_json, export_markdown, provenance_line

HOSTILE_TIMES = ["1e18", "-1e15", "-1", "1e308", "1e400", "NaN", "Infinity", "-Infinity",
                 "1000000000000000000000000000000", "true", "\"soon\""]


def _write(tmp_path, conversation: str = "", message: str = "") -> object:
    """An export whose fields are spliced in as raw JSON text (so NaN and 1e400 survive)."""
    text = (
        '{"format": "hearth-conversation", "version": 2, '
        '"conversation": {"title": "T"' + conversation + '}, '
        '"messages": [{"id": 1, "parent": null, "role": "user", "content": "q"' + message
        + '}]}'
    )
    path = tmp_path / "hostile.json"
    path.write_text(text, encoding="utf-8")
    return path


def _counts(h: History) -> tuple[int, int]:
    conn = h._conn
    return (conn.execute("SELECT COUNT(*) FROM conversations").fetchone()[0],
            conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])


@pytest.mark.parametrize("value", HOSTILE_TIMES)
@pytest.mark.parametrize(
    ("where", "field"),
    [("conversation", "updated_at"), ("conversation", "created_at"), ("message", "created_at")],
)
def test_a_time_no_calendar_can_show_is_refused_with_a_sentence(tmp_path, where, field, value):
    h = History(tmp_path / "h.sqlite3")
    splice = f', "{field}": {value}'
    path = _write(tmp_path, **{where: splice})
    with pytest.raises(ImportFileError) as err:
        import_file(h, path)
    sentence = str(err.value)
    assert sentence.startswith(f"{path} cannot be imported: ")
    assert f"'{field}' must be a time in seconds from 0 (1970) to" in sentence
    assert ("message 1: " in sentence) == (where == "message")
    assert "Nothing was imported" in sentence
    assert _counts(h) == (0, 0)


@pytest.mark.parametrize("value", ["-5", "1e300", "Infinity", "NaN", "\"long\""])
def test_a_duration_out_of_range_is_refused(tmp_path, value):
    h = History(tmp_path / "h.sqlite3")
    path = _write(tmp_path, message=f', "reasoning": "hm", "reasoning_ms": {value}')
    with pytest.raises(ImportFileError, match=r"message 1: 'reasoning_ms' must be a duration"):
        import_file(h, path)
    assert _counts(h) == (0, 0)


@pytest.mark.parametrize(
    ("where", "splice", "expected"),
    [
        ("conversation", ', "settings": {"max_tokens": Infinity}',
         "'settings' holds a number that is not finite or is out of range (at max_tokens)"),
        ("conversation", ', "settings": {"temperature": NaN}', "(at temperature)"),
        ("message", ', "provenance": {"stats": {"ttft_ms": 1e400}}', "(at stats.ttft_ms)"),
        ("message", ', "provenance": {"seed": 1' + "0" * 40 + '}', "(at seed)"),
        ("message", ', "provenance": {"x": [1, 2, -Infinity]}', "(at x.2)"),
    ],
)
def test_numbers_inside_settings_and_provenance_must_be_finite(tmp_path, where, splice,
                                                               expected):
    h = History(tmp_path / "h.sqlite3")
    path = _write(tmp_path, **{where: splice})
    with pytest.raises(ImportFileError) as err:
        import_file(h, path)
    assert str(err.value).startswith(f"{path} cannot be imported: ")
    assert expected in str(err.value)
    assert _counts(h) == (0, 0)


def test_times_in_range_still_import(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    path = _write(tmp_path, conversation=', "created_at": 0, "updated_at": 32503679999.5',
                  message=', "created_at": 1700000000, "reasoning": "r", "reasoning_ms": 1500')
    (conv,) = import_file(h, path)
    assert conv.updated_at == 32503679999.5 and not conv.damaged
    (msg,) = h.active_path(conv.id)
    assert msg.created_at == 1700000000 and msg.reasoning_ms == 1500


def test_a_huge_title_is_clamped_on_import_and_rename(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    path = _write(tmp_path)
    text = path.read_text().replace('"title": "T"', '"title": "' + "long " * 20_000 + '"')
    path.write_text(text)
    (conv,) = import_file(h, path)
    stored = h._conn.execute("SELECT title FROM conversations").fetchone()[0]
    assert len(stored) == TITLE_LIMIT and stored.endswith("…")
    assert conv.title == stored
    h.rename_conversation(conv.id, "x" * 1_000_000)
    stored = h._conn.execute("SELECT title FROM conversations").fetchone()[0]
    assert len(stored) == TITLE_LIMIT and stored.startswith("xxx")


def test_a_huge_title_already_stored_is_cut_when_read(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = h.create_conversation("short")
    h.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE conversations SET title = ? WHERE id = ?", ("t" * 5_000_000, conv.id))
    conn.close()
    h = History(path)
    (listed,) = h.list_conversations()
    assert len(listed.title) == TITLE_LIMIT and listed.title.endswith("…")
    assert len(h.get_conversation(conv.id).title) == TITLE_LIMIT


@pytest.mark.parametrize("sql_value", ["1e18", "-1e15", "-1", "9e999", "-9e999", "'soon'"])
def test_a_stored_time_out_of_range_reads_as_damaged(tmp_path, sql_value):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    bad = h.create_conversation("bad")
    h.add_message(bad.id, "user", "question")
    h.add_message(bad.id, "assistant", "answer", reasoning="hm", reasoning_ms=5.0,
                  provenance={"stats": {"ttft_ms": 1.0}})
    h.create_conversation("healthy")
    h.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"UPDATE conversations SET updated_at = {sql_value}, created_at = {sql_value} "
                 "WHERE id = ?", (bad.id,))
    conn.execute(f"UPDATE messages SET created_at = {sql_value} WHERE role = 'user'")
    conn.execute(f"UPDATE messages SET reasoning_ms = {sql_value} WHERE role = 'assistant'")
    conn.close()

    h = History(path)
    listed = {c.title: c for c in h.list_conversations()}
    assert listed["bad"].damaged and not listed["healthy"].damaged
    assert listed["bad"].updated_at == 0.0 and listed["bad"].created_at == 0.0
    dt.date.fromtimestamp(listed["bad"].updated_at)  # what the sidebar does with it
    question, answer = h.active_path(bad.id)
    assert question.damaged and question.created_at == 0.0
    assert answer.reasoning_ms == 0.0 and answer.reasoning == "hm"
    assert answer.damaged
    assert "question" in export_markdown(h, bad.id)
    # what it exports imports again
    again = tmp_path / "again.json"
    again.write_text(export_json(h, bad.id), encoding="utf-8")
    (copy,) = import_file(h, again)
    assert [m.content for m in h.active_path(copy.id)] == ["question", "answer"]


@pytest.mark.parametrize(
    "provenance",
    [
        {"stats": {"ttft_ms": "fast", "prompt_tokens": None, "decode_tok_s": float("inf")}},
        {"stats": "broken", "sampling": [1]},
        {"stats": {"generated_tokens": 10**400, "speculation": "ngram", "proposed": "7"}},
        {"stats": {"speculation": "ngram", "proposed": float("nan"), "accepted": 1e300}},
    ],
)
def test_hostile_provenance_figures_are_shown_not_raised(provenance):
    line = provenance_line(provenance)
    assert isinstance(line, str)
