"""Export of a reasoning model's replies: JSON keeps the thinking as its own field (and the
import reads it back, per variant); Markdown folds it under "Thought for N s"."""

from __future__ import annotations

import json

import pytest

from app.storage.errors import ImportFileError
from app.storage.history import History
from app.storage.importer import parse_export
from app.storage.transfer import export_json, export_markdown, import_json, thought_summary

THOUGHT = "The user greets me.\n\nI should greet back.\n</details> is not the end."


def _chat(tmp_path) -> tuple[History, str]:
    h = History(tmp_path / "h.sqlite3")
    conv = h.create_conversation("Greetings")
    h.add_message(conv.id, "user", "Hello")
    first = h.add_message(conv.id, "assistant", "Hi!", reasoning=THOUGHT, reasoning_ms=12_300)
    again = h.regenerate(first.id)
    h.update_message(again.id, content="Hello to you.", status="complete",
                     reasoning="Another thought.", reasoning_ms=800)
    return h, conv.id


def test_json_keeps_reasoning_per_variant_and_imports_it_back(tmp_path):
    h, cid = _chat(tmp_path)
    text = export_json(h, cid)
    replies = [m for m in json.loads(text)["messages"] if m["role"] == "assistant"]
    assert [(m["content"], m["reasoning"], m["reasoning_ms"]) for m in replies] == [
        ("Hi!", THOUGHT, 12_300), ("Hello to you.", "Another thought.", 800)]
    user = json.loads(text)["messages"][0]
    assert "reasoning" not in user and user["content"] == "Hello"

    imported = import_json(h, text)
    stored = [m for m in h.all_messages(imported.id) if m.role == "assistant"]
    assert [(m.content, m.reasoning, m.reasoning_ms, m.active) for m in stored] == [
        ("Hi!", THOUGHT, 12_300, False), ("Hello to you.", "Another thought.", 800, True)]
    h.close()


def test_an_export_without_reasoning_imports_with_none(tmp_path):
    doc = {"format": "hearth-conversation", "version": 2, "conversation": {"title": "t"},
           "messages": [{"id": 1, "parent": None, "role": "user", "content": "hi"}]}
    (chat,) = parse_export(json.dumps(doc))
    assert (chat.messages[0].reasoning, chat.messages[0].reasoning_ms) == ("", 0.0)
    doc["messages"][0]["reasoning_ms"] = -5
    with pytest.raises(ImportFileError, match=r"chat\.json .*'reasoning_ms' must be a duration"):
        parse_export(json.dumps(doc), source="chat.json")


def test_markdown_folds_the_thinking_above_the_answer(tmp_path):
    h, cid = _chat(tmp_path)
    md = export_markdown(h, cid)  # the active variant: the regenerated reply
    assert "<details><summary>Thought for 1 s</summary>\n\n> Another thought.\n\n</details>" \
        "\n\nHello to you." in md
    h.switch_variant(h.active_path(cid)[1].id, 0)
    md = export_markdown(h, cid)
    block = md.split("<details><summary>Thought for 12 s</summary>", 1)[1]
    quoted, answer = block.split("</details>\n\n", 1)
    assert quoted.strip().splitlines() == [
        "> The user greets me.", ">", "> I should greet back.", "> &lt;/details> is not the end."]
    assert answer.startswith("Hi!")
    assert md.count("<details>") == 1  # the user's turn has no block
    h.close()


def test_thought_summary_words():
    assert thought_summary(0) == "Thoughts"
    assert thought_summary(300) == "Thought for less than a second"
    assert thought_summary(12_300) == "Thought for 12 s"
    assert thought_summary(125_000) == "Thought for 2 min 5 s"
    assert thought_summary(120_000) == "Thought for 2 min"


def test_markdown_names_the_attached_files_and_lists_sources_as_footnotes(tmp_path):
    from app.chat.parts import Attachment, Source

    h = History(tmp_path / "h.sqlite3")
    conv = h.create_conversation("Kettle")
    kettle = Source(document="kettle.md", location="Kettle › Descaling",
                    text="Descale the kettle\nmonthly with citric acid.", path="/d/kettle.md")
    manual = Source(document="manual_v2.pdf", location="page 4", text="Rinse *twice*.")
    h.add_message(conv.id, "user", "How often do I descale?", parts=(
        Attachment(name="manual_v2.pdf", path="/d/manual_v2.pdf"), kettle, manual))
    h.add_message(conv.id, "assistant", "Monthly, with citric acid.")
    h.add_message(conv.id, "user", "And the boiler?", parts=(
        Source(document="boiler.md", location="", text="1.5 bar when cold."),))
    md = export_markdown(h, conv.id)
    you, reply, again = md.split("## ")[1:4]
    assert "_Attached: manual\\_v2.pdf_" in you and "[^" not in you
    assert reply.startswith("Assistant\n\nMonthly, with citric acid.\n\nSources: [^1] [^2]\n")
    assert "Sources: [^3]" in again  # no reply yet: under the question itself
    assert md.rstrip().endswith(
        "[^1]: kettle.md · Kettle › Descaling — “Descale the kettle monthly with citric "
        "acid.”\n[^2]: manual\\_v2.pdf · page 4 — “Rinse \\*twice\\*.”\n"
        "[^3]: boiler.md — “1.5 bar when cold.”")
    exported = json.loads(export_json(h, conv.id))  # JSON: every source, whole
    kinds = [p["type"] for p in exported["messages"][0]["parts"]]
    assert kinds == ["attachment", "source", "source"]
    assert exported["messages"][0]["parts"][1]["text"] == kettle.text
    h.close()
