"""What a parser gives: a file's text as sections (a page, a heading's body), with notes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.errors import HearthError


class DocumentError(HearthError):
    """A file that cannot be indexed; the message names the file and the problem."""


@dataclass(frozen=True)
class Section:
    text: str
    page: int | None = None  # 1-based, for paged formats (PDF)
    heading: str = ""  # "Install › Linux" for Markdown / DOCX / HTML, "lines 1-40" for code


@dataclass
class ParsedFile:
    path: Path
    kind: str  # "pdf", "docx", "html", "markdown", "text", "code", "csv", "json"
    sections: list[Section] = field(default_factory=list)
    pages: int = 0
    notes: list[str] = field(default_factory=list)  # sentences: read, but with a caveat

    @property
    def chars(self) -> int:
        return sum(len(s.text) for s in self.sections)
