"""One file → ``ParsedFile`` (its sections), by its type; every problem is a ``DocumentError``
whose sentence names the file, and every read is bounded (``limits``)."""

from __future__ import annotations

import os
from pathlib import Path

from app.documents import limits
from app.documents.decode import decode_text
from app.documents.docx_file import parse_docx
from app.documents.html_file import html_sections
from app.documents.pdf_file import parse_pdf
from app.documents.sections import DocumentError, ParsedFile
from app.documents.text_formats import (
    code_sections,
    csv_sections,
    json_sections,
    markdown_sections,
    plain_sections,
)
from app.units import format_bytes

_CODE = (
    ".py .pyi .js .mjs .ts .tsx .jsx .c .h .cc .cpp .hpp .cxx .java .kt .go .rs .rb .php .sh "
    ".bash .zsh .swift .cs .scala .lua .r .m .pl .ps1 .bat .sql .css .scss .toml .yaml .yml "
    ".ini .cfg .xml .proto .cmake .mk .gradle .dart .ex .exs .hs .jl .vue .svelte")
CODE_SUFFIXES = frozenset(_CODE.split())
KINDS: dict[str, str] = {
    ".pdf": "pdf", ".docx": "docx",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".md": "markdown", ".markdown": "markdown",
    ".txt": "text", ".text": "text", ".rst": "text", ".log": "text",
    ".csv": "csv", ".tsv": "csv",
    ".json": "json", ".jsonl": "json",
    **{s: "code" for s in CODE_SUFFIXES},
}


def kind_of(path: Path) -> str | None:
    """The format Hearth reads ``path`` as, from its name (None: not a document type)."""
    return KINDS.get(path.suffix.lower())


def parse_file(path: Path) -> ParsedFile:
    kind = kind_of(path)
    if kind is None:
        raise DocumentError(f"{path.name} is not a type Hearth reads "
                            f"({path.suffix or 'no extension'}).")
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise DocumentError(f"{path.name} cannot be read ({exc.strerror or exc}).") from exc
    bound = limits.MAX_TEXT_BYTES if kind not in ("pdf", "docx") else limits.MAX_FILE_BYTES
    if size > bound:
        raise DocumentError(f"{path.name} is {format_bytes(size)}, more than the "
                            f"{format_bytes(bound)} Hearth indexes for a {kind} file; it was "
                            "skipped.")
    if kind == "pdf":
        return parse_pdf(path)
    if kind == "docx":
        return parse_docx(path)
    try:
        with path.open("rb") as fh:
            data = fh.read(bound + 1)
    except OSError as exc:
        raise DocumentError(f"{path.name} cannot be read ({exc.strerror or exc}).") from exc
    text, note = decode_text(path, data)
    parsed = ParsedFile(path, kind, notes=[note] if note else [])
    if kind == "markdown":
        parsed.sections = markdown_sections(text)
    elif kind == "html":
        parsed.sections = html_sections(text)
    elif kind == "code":
        parsed.sections = code_sections(text)
    elif kind == "csv":
        parsed.sections = csv_sections(path, text)
    elif kind == "json":
        parsed.sections = json_sections(path, text)
    else:
        parsed.sections = plain_sections(text)
    return parsed
