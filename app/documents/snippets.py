"""A passage's snippet: the few words of it shown under a reply (app/ui/sources_list.py).

A passage is a chunk, and a chunk starts with the tail of the one before it
(app/documents/chunking.py), so its first characters are usually the end of a sentence;
its own cut at the size limit falls mid-word. ``snippet`` picks the sentence that holds most
of the question's words (or, with none, the passage's first whole sentence), starts there,
and ends at a sentence end, else at a word, within ``limit`` characters; "…" marks each side
where a sentence is cut. A sentence too long for the limit is shown from a word shortly
before the first matched word.
"""

from __future__ import annotations

import re

#: characters of the passage a snippet shows (its "…" not counted)
SNIPPET_CHARS = 90
#: words of context kept before the first matched word when a sentence must be cut
LEAD_WORDS = 3
ELLIPSIS = "…"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+", re.UNICODE)
#: words shorter than this never count as a match ("is", "to", ...), numbers always do
_MIN_TERM = 3
#: a query word and a passage word match when they start with the same this-many letters
#: (or are equal): "saved" finds "save", "requests" finds "request"
_STEM = 4


def snippet(text: str, query: str = "", limit: int = SNIPPET_CHARS) -> str:
    """The part of ``text`` to show for a search by ``query`` (see the module)."""
    folded = " ".join(text.split())
    sentences = _sentences(folded)
    if not sentences:
        return ""
    terms = _stems(query)
    counts = [len(terms & _stems(folded[a:b])) for a, b in sentences]
    best = max(counts)
    # no word of the question: the first whole sentence (the chunk's own start)
    first = 1 if len(sentences) > 1 and _mid_sentence(folded) else 0
    pick = counts.index(best) if best else first
    start, end = sentences[pick]
    if end - start > limit and best:
        start = _lead(folded, start, end, terms)
    cut = start + limit
    if cut >= len(folded):
        stop = len(folded)
    else:
        ends = [b for _, b in sentences if start < b <= cut]
        stop = ends[-1] if ends else _word_end(folded, start, cut)
    body = folded[start:stop].rstrip()
    if stop < len(folded):
        body = body.rstrip(",;:–—-").rstrip()  # "…" stands for what follows
    cut_head = (not _starts_sentence(folded, start)) if start else _mid_sentence(folded)
    head = ELLIPSIS if cut_head else ""
    tail = "" if stop >= len(folded) or any(b == stop for _, b in sentences) else ELLIPSIS
    return f"{head}{body}{tail}"


def _sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of ``text`` (whitespace folded)."""
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


def _stems(text: str) -> set[str]:
    return {w[:_STEM] for w in _WORD.findall(text.lower()) if _term(w)}


def _term(word: str) -> bool:
    return len(word) >= _MIN_TERM or word.isdigit()


def _mid_sentence(text: str) -> bool:
    """Whether ``text`` starts inside a sentence (its first letter is lower case)."""
    first = next((c for c in text if c.isalpha()), "")
    return first.islower()


def _starts_sentence(text: str, at: int) -> bool:
    return text[:at].rstrip().endswith((".", "!", "?"))


def _lead(text: str, start: int, end: int, terms: set[str]) -> int:
    """A word start ``LEAD_WORDS`` words before the first word of ``terms`` in
    ``text[start:end]`` (or ``start``)."""
    words = list(_WORD.finditer(text, start, end))
    first = next((i for i, w in enumerate(words) if _term(w.group())
                  and w.group().lower()[:_STEM] in terms), 0)
    if first <= LEAD_WORDS:
        return start
    at = words[first - LEAD_WORDS].start()
    space = text.rfind(" ", start, at)  # the whole token ("`--queue`", not "queue`")
    return space + 1 if space >= start else at


def _word_end(text: str, start: int, cut: int) -> int:
    """Where to end a snippet cut at ``cut``: the last space before it (a word kept whole),
    or ``cut`` when a single word fills the window."""
    space = text.rfind(" ", start, cut + 1)
    return space if space > start else cut
