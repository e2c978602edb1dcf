"""History repository: round trip, search, cascade, streaming saves, export/import."""

from __future__ import annotations

import json

from app.storage.history import History, ReplyWriter, title_from_text
from app.storage.transfer import import_json, to_json, to_markdown


def test_round_trip_survives_reopen(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = h.create_conversation(system_prompt="Be brief.", settings={"temperature": 0.2})
    h.add_message(conv.id, "user", "What is 2+2?\nPlease answer.")
    prov = {"model": "tiny", "provider": "cpu", "seed": 7, "stats": {"generated_tokens": 3}}
    h.add_message(conv.id, "assistant", "4", provenance=prov)
    h.close()

    h2 = History(path)
    got = h2.get_conversation(conv.id)
    assert got is not None
    assert got.title == "What is 2+2?"
    assert got.system_prompt == "Be brief."
    assert got.settings == {"temperature": 0.2}
    msgs = h2.messages(conv.id)
    assert [(m.role, m.content, m.position) for m in msgs] == [
        ("user", "What is 2+2?\nPlease answer.", 0),
        ("assistant", "4", 1),
    ]
    assert msgs[1].provenance == prov


def test_most_recent_first_and_search(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    a = h.create_conversation("Alpha", created_at=100.0)
    b = h.create_conversation("Beta", created_at=200.0)
    assert [c.id for c in h.list_conversations()] == [b.id, a.id]
    h.add_message(a.id, "user", "tell me about zebras_100%")
    assert [c.id for c in h.list_conversations()] == [a.id, b.id]
    assert [c.id for c in h.list_conversations("ZEBRAS")] == [a.id]
    assert [c.id for c in h.list_conversations("bet")] == [b.id]
    # LIKE wildcards in the query are literal
    assert [c.id for c in h.list_conversations("s_100%")] == [a.id]
    assert h.list_conversations("s%1") == []


def test_cascade_delete(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv = h.create_conversation()
    h.add_message(conv.id, "user", "hi")
    h.add_message(conv.id, "assistant", "hello")
    h.delete_conversation(conv.id)
    assert h.get_conversation(conv.id) is None
    assert h.list_conversations() == []
    # deletes are soft until purged; the purge removes the messages by cascade
    assert h.purge_deleted(older_than=0) == 0
    count = h._conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    assert count == 0
    assert h._conn.execute("SELECT COUNT(*) FROM conversations").fetchone()[0] == 0


def test_delete_from_position_truncates(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv = h.create_conversation()
    for i in range(4):
        h.add_message(conv.id, "user" if i % 2 == 0 else "assistant", str(i))
    h.delete_messages_from(conv.id, 2)
    assert [m.content for m in h.messages(conv.id)] == ["0", "1"]
    assert h.add_message(conv.id, "user", "again").position == 2


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_reply_saved_while_streaming_at_most_every_second(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = h.create_conversation()
    h.add_message(conv.id, "user", "hi")
    row = h.add_message(conv.id, "assistant", "", status="streaming")
    clock = FakeClock()
    writer = ReplyWriter(h, row.id, clock=clock)
    for i in range(50):  # 50 tokens over 2.45 s
        clock.now = i * 0.05
        writer.append(f"t{i} ")
    assert writer.writes == 2  # at t=1.0 and t=2.0, not per token
    # a second connection (as after a crash) sees everything up to the last second
    other = History(path)
    saved = other.get_message(row.id)
    assert saved is not None
    assert saved.content == "".join(f"t{i} " for i in range(41))
    other.close()
    writer.finish("complete", {"finish_reason": "eos"})
    final = h.get_message(row.id)
    assert final is not None
    assert final.status == "complete"
    assert final.content == writer.text
    assert final.provenance == {"finish_reason": "eos"}


def test_reasoning_is_saved_apart_from_the_answer_while_streaming(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = h.create_conversation()
    h.add_message(conv.id, "user", "hi")
    row = h.add_message(conv.id, "assistant", "", status="streaming")
    clock = FakeClock()
    writer = ReplyWriter(h, row.id, clock=clock)
    for i in range(30):  # 1.45 s of thinking, then the answer
        clock.now = i * 0.05
        writer.append_reasoning(f"r{i} ")
    other = History(path)  # a crash now keeps the thinking up to the last second
    saved = other.get_message(row.id)
    assert saved is not None
    assert (saved.content, saved.reasoning) == ("", "".join(f"r{i} " for i in range(21)))
    clock.now = 2.0
    writer.append("The answer.")
    saved = other.get_message(row.id)
    assert saved is not None
    assert saved.reasoning == writer.reasoning and saved.content == "The answer."
    other.close()
    writer.finish("complete", {}, reasoning_ms=1450.0)
    final = h.get_message(row.id)
    assert final is not None
    assert (final.content, final.reasoning, final.reasoning_ms) == (
        "The answer.", writer.reasoning, 1450.0)
    h.close()


def test_interrupted_reply_is_marked_failed_on_reopen(tmp_path):
    path = tmp_path / "h.sqlite3"
    h = History(path)
    conv = h.create_conversation()
    row = h.add_message(conv.id, "assistant", "partial", status="streaming")
    h.close()
    saved = History(path).get_message(row.id)
    assert saved is not None
    assert (saved.status, saved.content) == ("failed", "partial")


def test_export_import_round_trip(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    conv = h.create_conversation("My chat", system_prompt="sys", settings={"top_k": 5})
    h.add_message(conv.id, "user", "Question?")
    prov = {
        "model": "m",
        "provider": "cpu",
        "sampling": {"temperature": 0.5, "top_p": 0.9, "top_k": 5},
        "seed": 3,
        "stats": {"prompt_tokens": 9, "generated_tokens": 2, "ttft_ms": 12.0, "decode_tok_s": 40.0},
        "finish_reason": "eos",
    }
    h.add_message(conv.id, "assistant", "Answer.", provenance=prov)
    conv = h.get_conversation(conv.id)
    text = to_json(conv, h.messages(conv.id))
    assert json.loads(text)["messages"][1]["provenance"] == prov
    md = to_markdown(conv, h.messages(conv.id))
    assert "# My chat" in md and "Answer." in md and "provider cpu" in md and "seed 3" in md

    new = import_json(h, text)
    assert new.id != conv.id
    assert (new.title, new.system_prompt, new.settings) == ("My chat", "sys", {"top_k": 5})
    got = [(m.role, m.content, m.provenance) for m in h.messages(new.id)]
    want = [(m.role, m.content, m.provenance) for m in h.messages(conv.id)]
    assert got == want


def test_title_from_text():
    assert title_from_text("\n\n# Hello there\nmore") == "Hello there"
    assert len(title_from_text("x" * 200)) == 60
    assert title_from_text("   ") == "New chat"


def test_pinned_chats_come_first_and_the_pin_persists(tmp_path):
    path = tmp_path / "h.sqlite3"
    history = History(path)
    old = history.create_conversation("old", created_at=1.0)
    new = history.create_conversation("new", created_at=2.0)
    assert [c.title for c in history.list_conversations()] == ["new", "old"]
    history.set_pinned(old.id, True)
    history.close()
    history = History(path)
    listed = history.list_conversations()
    assert [(c.title, c.pinned) for c in listed] == [("old", True), ("new", False)]
    assert [c.title for c in history.list_conversations("o")] == ["old"]
    history.set_pinned(old.id, False)
    assert [c.title for c in history.list_conversations()] == ["new", "old"]
    assert history.get_conversation(new.id).pinned is False
    history.close()
