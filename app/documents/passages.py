"""The passages a search hands out are distinct: no two of them say the same thing.

Chunks overlap by design (each starts with the tail of the one before it,
app/documents/chunking.py), so neighbours of the same file often both rank; when a chunk is
short its whole text is the start of the next one, and a file in two collections (a library
and the chat's own) is indexed twice. Listing both would give the model the same passage
twice and the reply two sources with the same snippet.

``distinct(passages, top)`` walks the ranked passages (best first) and keeps ``top`` of them:
a passage whose text is already in a kept one of the same file is dropped; one that shares
at least ``NEAR_DUPLICATE`` of the shorter text with its neighbour in the file (same page and
heading, next or previous chunk) is merged into it (the earlier chunk's text, then what the
later one adds), in the better one's place and with its score, while the merged text stays
within ``MERGE_LIMIT`` characters (else the lower-ranked one is dropped). Ordinary overlap
(the 150-character tail of an 800-character chunk) is below the bar: both stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from app.documents.chunking import TARGET_CHARS


class _Passage(Protocol):
    """What this needs of ``app.documents.index.Passage`` (a frozen dataclass; the index
    imports this module, not the other way round)."""

    @property
    def file(self) -> str: ...
    @property
    def page(self) -> int | None: ...
    @property
    def heading(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def ordinal(self) -> int: ...


Passage = TypeVar("Passage", bound=_Passage)

#: the share of the shorter passage's text two neighbours must share to be one passage
NEAR_DUPLICATE = 0.5
#: a merged passage is at most this long (two chunks)
MERGE_LIMIT = 2 * TARGET_CHARS
#: how many ranked candidates a search fetches per passage it hands out
CANDIDATES_PER_PASSAGE = 3


def distinct(passages: Sequence[Passage], top: int) -> list[Passage]:
    """The first ``top`` distinct passages of ``passages`` (best first); see the module."""
    kept: list[Passage] = []
    for passage in passages:
        if len(kept) >= top:
            break
        for i, other in enumerate(kept):
            joined = _joined(other, passage)
            if joined is not None:
                kept[i] = joined
                break
        else:
            kept.append(passage)
    return kept


def _fold(text: str) -> str:
    return " ".join(text.split())


def _joined(better: Passage, worse: Passage) -> Passage | None:
    """``better`` standing for both when they say the same thing (None: they do not)."""
    if better.file != worse.file:
        return None
    a, b = _fold(better.text), _fold(worse.text)
    if b in a:
        return better
    if a in b:  # the lower-ranked one holds it all: its text, in the better one's place
        return replace(better, text=worse.text, page=worse.page, heading=worse.heading)
    if (better.page, better.heading) != (worse.page, worse.heading) or abs(
            better.ordinal - worse.ordinal) != 1 or better.ordinal < 0:
        return None
    first, second = (better, worse) if better.ordinal < worse.ordinal else (worse, better)
    shared = _boundary(first.text, second.text)
    if shared < NEAR_DUPLICATE * min(len(first.text), len(second.text)):
        return None  # ordinary overlap: two passages
    text = first.text + second.text[shared:]
    if len(text) > MERGE_LIMIT:
        return better
    return replace(better, text=text, ordinal=first.ordinal)


def _boundary(first: str, second: str) -> int:
    """How many characters at the end of ``first`` start ``second``."""
    for size in range(min(len(first), len(second)), 0, -1):
        if first.endswith(second[:size]):
            return size
    return 0
