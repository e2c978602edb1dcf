"""bench/docs_questions.py's README set quotes README.md and docs/ARCHITECTURE.md: an edit of
either that drops a label's phrase makes that question unanswerable for every retriever (a
stale label, not a retrieval miss), so each label must still be found in them. The headed set
quotes installed distributions' descriptions: the bench skips a label another version
dropped, and with the pinned test requirements none is dropped."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.bench_docs import answers, description, headed_docs, present
from bench.docs_questions import HEADED, HEADED_DISTRIBUTIONS, README_SET

ROOT = Path(__file__).resolve().parents[2]


def test_every_readme_label_is_still_in_the_documents() -> None:
    text = "\n\n".join((ROOT / name).read_text(encoding="utf-8")
                       for name in ("README.md", "docs/ARCHITECTURE.md"))
    stale = [question for question, label in README_SET if not answers(label, text)]
    assert stale == []


def test_a_label_answers_by_any_of_its_phrases() -> None:
    assert answers(("not here", "shown  in\n the status bar"), "it is shown in the status bar")
    assert not answers("shown in the status bar", "shown in the bar")


def test_every_headed_label_is_in_its_installed_description_or_skipped() -> None:
    """The headed set's documents are installed distributions' descriptions: a version
    that rewords a passage drops its question from the bench (``present``), never counts it
    as a miss. Most labels are found (all 30 at the versions they were written against),
    each in one description only."""
    texts = {name: description(name) for name in HEADED_DISTRIBUTIONS}
    assert all(text.strip() for text in texts.values())
    found = present(HEADED, list(texts.values()))
    assert len(found) >= 0.8 * len(HEADED), [q for q, _ in HEADED if (q, _) not in found]
    assert all(sum(answers(label, t) for t in texts.values()) == 1 for _, label in found)
    assert present([("q", "a phrase no description holds")], list(texts.values())) == []


def test_the_headed_documents_have_sections_of_several_chunks(tmp_path) -> None:
    """What the set is for: sections of several neighbouring chunks, which a search's top five
    can fill (the paraphrase set's docstrings have no headings)."""
    from app.documents.chunking import chunk_sections
    from app.documents.parse import parse_file

    crowded = 0
    for path in headed_docs(tmp_path, HEADED_DISTRIBUTIONS):
        counts = Counter(c.heading for c in chunk_sections(parse_file(path).sections))
        crowded += sum(n > 1 for n in counts.values()) >= 2
    assert crowded >= len(HEADED_DISTRIBUTIONS) // 2
