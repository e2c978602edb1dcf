"""Sections → chunks: paragraphs packed up to a target size, never across a heading or a
page, each chunk starting with the tail of the one before it (overlap).

A paragraph longer than a chunk is cut at its list items first (a Markdown list is one
paragraph: its bullets, one per line, would otherwise be cut mid-item at sentences), then at
sentences, then at words. What the embedder reads for a chunk (``embedding_text``) starts
with a contextual header, its file's title and heading path ("README › Hearth › Local
server"); the passage a search hands out stays the chunk's own text. Both were chosen on
the tuning split of bench/docs_questions.py (see its docstring).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from app.documents.sections import Section

#: characters a chunk aims for, chosen on the tuning split (600-1000 tried): about 220 tokens
#: on average in bench_docs.py's documents; a chunk past the starter embedder's 256 tokens
#: (a fifth of them there) is embedded by its first 256, and BM25 reads all of it
TARGET_CHARS = 900
#: characters of the previous chunk repeated at the start of the next one
OVERLAP_CHARS = 150
#: how chunks are cut and embedded; an index made by an older recipe indexes its files again
#: (app/documents/index.py). 2: list items, contextual headers, 900 characters.
CHUNKING_VERSION = 2
_PARAGRAPH = re.compile(r"\n\s*\n")
#: a line break before a list item ("- ", "* ", "+ ", "1. ", "2) ")
_ITEM = re.compile(r"\n(?=[ \t]*(?:[-*+]|\d+[.)])[ \t]+\S)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Chunk:
    text: str
    page: int | None
    heading: str
    ordinal: int  # its place in the file, from 0

    def location(self) -> str:
        """"page 3 · Install › Linux", "page 3", "Install", or ""."""
        parts = [f"page {self.page}"] if self.page is not None else []
        if self.heading:
            parts.append(self.heading)
        return " · ".join(parts)


def chunk_sections(sections: Iterable[Section], *, target: int = TARGET_CHARS,
                   overlap: int = OVERLAP_CHARS) -> list[Chunk]:
    chunks: list[Chunk] = []
    for section in sections:
        for text in _pack(_pieces(section.text, target), target, overlap):
            chunks.append(Chunk(text, section.page, section.heading, len(chunks)))
    return chunks


def embedding_text(chunk: Chunk, title: str) -> str:
    """What the embedder reads for ``chunk`` of the file titled ``title`` (its name without
    the suffix): the title and the heading path as a first line, then the chunk's text."""
    header = " › ".join(part for part in (title, chunk.heading) if part)
    return f"{header}\n{chunk.text}" if header else chunk.text


def _pieces(text: str, target: int) -> list[tuple[str, str]]:
    """(piece, the separator before it): paragraphs; one longer than ``target`` is cut at its
    list items (kept one per line), then at sentences, then at words."""
    out: list[tuple[str, str]] = []
    for para in _PARAGRAPH.split(text):
        para = para.strip()
        if not para:
            continue
        if len(para) <= target:
            out.append((para, "\n\n"))
            continue
        for n, item in enumerate(_ITEM.split(para)):
            item = item.strip()
            if len(item) <= target:
                if item:
                    out.append((item, "\n" if n else "\n\n"))
                continue
            for sentence in _SENTENCE.split(item):
                while len(sentence) > target:
                    cut = sentence.rfind(" ", 0, target)
                    cut = cut if cut > target // 2 else target
                    out.append((sentence[:cut].strip(), "\n\n"))
                    sentence = sentence[cut:].strip()
                if sentence:
                    out.append((sentence, "\n\n"))
    return out


def _pack(pieces: list[tuple[str, str]], target: int, overlap: int) -> list[str]:
    out: list[str] = []
    current = ""
    size = 0
    tail = ""
    for piece, sep in pieces:
        if current and size + len(piece) + 2 > target:
            out.append(current)
            tail = _tail(current, overlap)
            current, size = tail, len(tail)
        current = f"{current}{sep}{piece}" if current else piece
        size += len(piece) + 2
    if current and (not out or current != tail):
        out.append(current)
    return out


def _tail(text: str, overlap: int) -> str:
    """The last ``overlap`` characters of ``text``, starting at a word."""
    if overlap <= 0 or len(text) <= overlap:
        return "" if overlap <= 0 else text
    start = text.find(" ", len(text) - overlap)
    return text[start + 1:] if start != -1 else ""
