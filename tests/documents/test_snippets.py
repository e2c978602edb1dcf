"""A source's snippet starts and ends at sentence or word boundaries, near the question's
words (app/documents/snippets.py)."""

from __future__ import annotations

from app.documents.chunking import chunk_sections
from app.documents.sections import Section
from app.documents.snippets import SNIPPET_CHARS, snippet

MANUAL = ("The kettle holds 1.7 litres and boils in about three minutes. Descale it monthly "
          "with citric acid, then rinse it twice with clean water. The filter lifts out for "
          "cleaning and goes back with its tab facing the spout. Never run it empty.")


def _body(text: str) -> str:
    return text.removeprefix("…").removesuffix("…")


def test_the_snippet_is_the_sentence_with_the_questions_words():
    got = snippet(MANUAL, "How often should I descale it with citric acid?")
    assert got == "Descale it monthly with citric acid, then rinse it twice with clean water."
    got = snippet(MANUAL, "How does the filter go back?")
    assert got == "The filter lifts out for cleaning and goes back with its tab facing the spout."


def test_a_cut_falls_between_words_and_is_marked():
    for query in ("", "descale", "filter", "tab spout", "litres"):
        got = snippet(MANUAL, query)
        body = _body(got)
        assert len(body) <= SNIPPET_CHARS
        assert body in MANUAL  # the passage's own words, in order
        start = MANUAL.index(body)
        assert start == 0 or MANUAL[start - 1] == " "  # starts at a word
        end = start + len(body)
        # ends at a word, with "…" unless a sentence ends there
        assert end == len(MANUAL) or MANUAL[end] in " ,"
        assert got.endswith("…") != body.endswith(".")


def test_a_chunk_that_starts_with_the_previous_chunks_tail_shows_its_first_sentence():
    text = "\n\n".join(f"Valve {i} opens clockwise and closes in {i + 2} turns."
                       for i in range(40))
    chunks = chunk_sections([Section(text)])
    second = chunks[1].text
    assert second[0].islower() or not second.startswith("Valve")  # starts mid-sentence
    got = snippet(second)
    assert got.startswith("Valve ") and len(_body(got)) <= SNIPPET_CHARS


def test_the_passage_starting_mid_sentence_is_marked_when_that_is_the_match():
    got = snippet("and rinse it twice afterwards. The lid is dishwasher safe.", "rinse twice")
    assert got == "…and rinse it twice afterwards. The lid is dishwasher safe."


def test_a_long_sentence_is_shown_from_just_before_the_first_matched_word():
    words = " ".join(f"word{i}" for i in range(60))
    text = f"{words} the pressure relief valve opens at 3 bar {words}."
    got = snippet(text, "When does the relief valve open?")
    assert got.startswith("…") and got.endswith("…")
    assert "relief valve opens at 3 bar" in got
    assert _body(got).split()[0].startswith("word")  # whole words before the match


def test_a_short_passage_is_shown_whole():
    assert snippet("  Descale\nmonthly.  ", "descale") == "Descale monthly."
    assert snippet("", "anything") == ""
