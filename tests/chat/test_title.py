"""app/chat/title.py: the prompt and settings a title is asked with, and what is kept of
the model's answer (one line, no quotes or Markdown, bounded)."""

from __future__ import annotations

import threading

import pytest

from app.chat.title import (
    TITLE_MAX_CHARS,
    TITLE_MAX_TOKENS,
    clean_title,
    generate_title,
    title_settings,
)
from tests.workers.fake_engine import FakeEngine


@pytest.mark.parametrize(("raw", "title"), [
    ("Apples and pears", "Apples and pears"),
    ('  "Apples and pears."\n', "Apples and pears"),
    ("“Äpfel und Birnen”", "Äpfel und Birnen"),
    ("**Title:** *Apples* and `pears`!", "Apples and pears"),
    ("## Fruit basics\nHere is why: …", "Fruit basics"),
    ("\n\n  Title: 'Fruit'  ", "Fruit"),
    ("<think>the user asks about fruit</think>Fruit talk", "Fruit talk"),
    ("<think>still thinking about it", ""),
    ("...\n---\n", ""),
    ("", ""),
])
def test_clean_title_keeps_one_plain_line(raw, title):
    assert clean_title(raw) == title


def test_a_long_title_is_cut_at_a_word():
    title = clean_title("word " * 40)
    assert len(title) <= TITLE_MAX_CHARS and title.endswith("word…")
    assert "\n" not in title


def test_generate_title_asks_briefly_and_greedily_without_thinking():
    engine = FakeEngine(script=["“Apples", " and", " pears", ".”", "\n", "Because"])
    title = generate_title(engine, "Tell me about apples and pears", "Both are fruit.")
    assert title == "Apples and pears"
    (messages,) = engine.calls
    assert messages[0].role == "system" and "title" in messages[0].content
    assert "Tell me about apples and pears" in messages[1].content
    assert "Both are fruit." in messages[1].content
    (settings,) = engine.settings
    assert settings == title_settings()
    assert settings.max_new_tokens == TITLE_MAX_TOKENS
    assert settings.sampling.greedy and settings.thinking == "off"
    assert engine.conversations == [(None, None)]  # no conversation's cache is touched


def test_generate_title_reads_only_the_start_of_a_long_exchange():
    engine = FakeEngine(script=["Long"])
    generate_title(engine, "q" * 50_000, "a" * 50_000)
    assert len(engine.calls[0][1].content) < 2000


def test_a_cancelled_title_is_empty():
    cancel = threading.Event()
    cancel.set()
    engine = FakeEngine(script=["Never"])
    assert generate_title(engine, "q", "a", cancel=cancel) == ""
    assert engine.calls == []
