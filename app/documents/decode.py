"""Bytes of a text file → str: UTF-8 (with or without BOM), UTF-16 by its BOM, else
Windows-1252 with a note; a file that looks binary (NUL bytes, control characters) is refused."""

from __future__ import annotations

import codecs
from pathlib import Path

from app.documents.sections import DocumentError

_SAMPLE = 8192
_CONTROL = bytes(range(0, 32)).replace(b"\t", b"").replace(b"\n", b"").replace(b"\r", b"") \
    .replace(b"\x0c", b"").replace(b"\x1b", b"")


def decode_text(path: Path, data: bytes) -> tuple[str, str | None]:
    """The text and a note (None when it was plain UTF-8)."""
    if data.startswith(codecs.BOM_UTF8):
        return _strict(path, data[3:], "utf-8"), None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return _strict(path, data, "utf-16"), None
    sample = data[:_SAMPLE]
    if b"\0" in sample or (sample and sum(sample.count(b) for b in _CONTROL) > len(sample) // 20):
        raise DocumentError(f"{path.name} looks like a binary file, not text "
                            f"(its name says {path.suffix or 'no type'}); it was skipped.")
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        text = data.decode("cp1252", errors="replace")
        return text, (f"{path.name} is not UTF-8 (byte {exc.start} is not valid); it was read "
                      "as Windows-1252, so some characters may be wrong.")


def _strict(path: Path, data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{path.name} starts as {encoding.upper()} but byte {exc.start} "
                            "is not valid; it was skipped.") from exc
