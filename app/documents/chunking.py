"""Sections → chunks: paragraphs packed up to a target size, never across a heading or a
page, each chunk starting with the tail of the one before it (overlap)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from app.documents.sections import Section

#: characters a chunk aims for: under the starter embedder's 256 tokens (~4 characters each)
TARGET_CHARS = 800
#: characters of the previous chunk repeated at the start of the next one
OVERLAP_CHARS = 150
_PARAGRAPH = re.compile(r"\n\s*\n")
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


def _pieces(text: str, target: int) -> list[str]:
    """Paragraphs; one longer than ``target`` is cut at sentences, then at words."""
    out: list[str] = []
    for para in _PARAGRAPH.split(text):
        para = para.strip()
        if not para:
            continue
        if len(para) <= target:
            out.append(para)
            continue
        for sentence in _SENTENCE.split(para):
            while len(sentence) > target:
                cut = sentence.rfind(" ", 0, target)
                cut = cut if cut > target // 2 else target
                out.append(sentence[:cut].strip())
                sentence = sentence[cut:].strip()
            if sentence:
                out.append(sentence)
    return out


def _pack(pieces: list[str], target: int, overlap: int) -> list[str]:
    out: list[str] = []
    current: list[str] = []
    size = 0
    for piece in pieces:
        if current and size + len(piece) + 2 > target:
            out.append("\n\n".join(current))
            tail = _tail(out[-1], overlap)
            current, size = ([tail], len(tail)) if tail else ([], 0)
        current.append(piece)
        size += len(piece) + 2
    if current and (not out or current != [_tail(out[-1], overlap)]):
        out.append("\n\n".join(current))
    return out


def _tail(text: str, overlap: int) -> str:
    """The last ``overlap`` characters of ``text``, starting at a word."""
    if overlap <= 0 or len(text) <= overlap:
        return "" if overlap <= 0 else text
    start = text.find(" ", len(text) - overlap)
    return text[start + 1:] if start != -1 else ""
