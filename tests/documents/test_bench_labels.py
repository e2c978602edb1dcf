"""bench/docs_questions.py's README set quotes README.md and docs/ARCHITECTURE.md: an edit of
either that drops a label's phrase makes that question unanswerable for every retriever (a
stale label, not a retrieval miss), so each label must still be found in them."""

from __future__ import annotations

from pathlib import Path

from bench.bench_docs import answers
from bench.docs_questions import README_SET

ROOT = Path(__file__).resolve().parents[2]


def test_every_readme_label_is_still_in_the_documents() -> None:
    text = "\n\n".join((ROOT / name).read_text(encoding="utf-8")
                       for name in ("README.md", "docs/ARCHITECTURE.md"))
    stale = [question for question, label in README_SET if not answers(label, text)]
    assert stale == []


def test_a_label_answers_by_any_of_its_phrases() -> None:
    assert answers(("not here", "shown  in\n the status bar"), "it is shown in the status bar")
    assert not answers("shown in the status bar", "shown in the bar")
