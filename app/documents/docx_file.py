"""DOCX → sections by heading (python-docx), tables as "cell | cell" rows, in body order.

The zip is checked before python-docx opens it: its members' declared sizes are summed and
each member's packed-to-unpacked ratio is bounded, so a zip bomb is refused unread.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from app.documents import limits
from app.documents.sections import DocumentError, ParsedFile, Section


def check_zip(path: Path) -> None:
    """Refuse a zip whose contents would unpack past the bounds (raises DocumentError)."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise DocumentError(f"{path.name} is not a readable DOCX file ({exc}).") from exc
    total = sum(i.file_size for i in infos)
    if total > limits.MAX_DOCX_UNCOMPRESSED:
        raise DocumentError(f"{path.name} would unpack to {total / (1 << 20):,.0f} MiB, more "
                            f"than the {limits.MAX_DOCX_UNCOMPRESSED >> 20} MiB allowed (a zip "
                            "bomb?); it was skipped.")
    for info in infos:
        if info.file_size > (1 << 20) and info.file_size > limits.MAX_ZIP_RATIO * max(
                info.compress_size, 1):
            raise DocumentError(f"{path.name}: {info.filename} unpacks to "
                                f"{info.file_size // max(info.compress_size, 1):,} times its "
                                "size (a zip bomb?); it was skipped.")
    if not any(i.filename == "word/document.xml" for i in infos):
        raise DocumentError(f"{path.name} is not a Word document (it has no "
                            "word/document.xml).")


def parse_docx(path: Path) -> ParsedFile:
    check_zip(path)
    import docx
    from docx.oxml.ns import qn

    try:
        document = docx.Document(str(path))
    except Exception as exc:  # python-docx / lxml raise several kinds on a damaged file
        raise DocumentError(f"{path.name} is not a readable DOCX file ({exc}).") from exc
    parsed = ParsedFile(path, "docx")
    headings: list[tuple[int, str]] = []
    body: list[str] = []

    def close() -> None:
        text = "\n\n".join(b for b in body if b.strip())
        if text.strip():
            parsed.sections.append(Section(text, heading=" › ".join(h for _, h in headings)))
        body.clear()

    paragraphs = {p._p: p for p in document.paragraphs}
    tables = {t._tbl: t for t in document.tables}
    for child in document.element.body.iterchildren():
        if child.tag == qn("w:p") and child in paragraphs:
            para = paragraphs[child]
            level = _heading_level(para.style.name if para.style is not None else "")
            if level is not None and para.text.strip():
                close()
                while headings and headings[-1][0] >= level:
                    headings.pop()
                headings.append((level, para.text.strip()))
            else:
                body.append(para.text)
        elif child.tag == qn("w:tbl") and child in tables:
            rows = [" | ".join(c.text.strip() for c in row.cells)
                    for row in tables[child].rows]
            body.append("\n".join(r for r in rows if r.strip(" |")))
    close()
    return parsed


def _heading_level(style: str) -> int | None:
    """0 for the title (above every heading), 1.. for "Heading N", None for body text."""
    if style == "Title":
        return 0
    if style.startswith("Heading "):
        tail = style.removeprefix("Heading ").strip()
        return int(tail) if tail.isdigit() else None
    return None
