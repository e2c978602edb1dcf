"""Real document files for the tests: PDFs written by hand (a text layer per page), DOCX by
python-docx, and the hostile ones (encrypted, malformed, scanned, zip bomb, binary, huge)."""

from __future__ import annotations

import zipfile
from pathlib import Path


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf_bytes(pages: list[list[str]]) -> bytes:
    """A PDF whose page i shows the lines of pages[i] in Helvetica (no lines: a blank page,
    as a scan without a text layer reads)."""
    objects: list[bytes] = []
    n_pages = len(pages)
    font_id = 3 + 2 * n_pages
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n_pages))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n_pages} >>".encode())
    for i, lines in enumerate(pages):
        content = "BT /F1 12 Tf 14 TL 72 720 Td " + " ".join(
            f"({_escape(line)}) Tj T*" for line in lines) + " ET" if lines else ""
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode())
        data = content.encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


def write_pdf(path: Path, pages: list[list[str]]) -> Path:
    path.write_bytes(pdf_bytes(pages))
    return path


def write_encrypted_pdf(path: Path, pages: list[list[str]], password: str = "secret") -> Path:
    from pypdf import PdfReader, PdfWriter

    plain = write_pdf(path.with_suffix(".plain.pdf"), pages)
    writer = PdfWriter(clone_from=PdfReader(plain))
    writer.encrypt(user_password=password, owner_password=password + "-owner",
                   algorithm="RC4-128")
    with path.open("wb") as fh:
        writer.write(fh)
    plain.unlink()
    return path


def write_docx(path: Path, blocks: list[tuple[str, str]]) -> Path:
    """(style, text) blocks: "Heading 1".."Heading 3", "Title", "" for a body paragraph,
    "table" for a table whose rows are the text's lines split at "|"."""
    import docx

    document = docx.Document()
    for style, text in blocks:
        if style == "table":
            rows = [r.split("|") for r in text.splitlines()]
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            for i, row in enumerate(rows):
                for j, cell in enumerate(row):
                    table.cell(i, j).text = cell
        elif style:
            document.add_paragraph(text, style=style)
        else:
            document.add_paragraph(text)
    document.save(str(path))
    return path


def write_zip_bomb_docx(path: Path, unpacked_mb: int = 64) -> Path:
    """A .docx whose document.xml unpacks to ``unpacked_mb`` MiB of spaces (a few dozen KiB
    packed): python-docx would read it all into memory."""
    block = b" " * (1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        with zf.open("word/document.xml", "w", force_zip64=True) as member:
            for _ in range(unpacked_mb):
                member.write(block)
    return path
