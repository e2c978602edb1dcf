"""PDF → one section per page (pypdf), with the page number; bounded in pages and time.

An encrypted PDF that opens with the empty password (print-protected files) is read; one that
needs a password is refused with a sentence. A PDF whose pages give no text at all is a scan
(no text layer): that is said, since Hearth has no OCR yet.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from app.documents import limits
from app.documents.sections import DocumentError, ParsedFile, Section


def parse_pdf(path: Path) -> ParsedFile:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # malformed files warn per object
    deadline = time.monotonic() + limits.PARSE_SECONDS
    parsed = ParsedFile(path, "pdf")
    try:
        reader = PdfReader(path, strict=False)
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")
            except Exception as exc:  # pypdf: DependencyError (no AES backend), others
                raise DocumentError(f"{path.name} is an encrypted PDF that Hearth cannot "
                                    f"open ({exc}).") from exc
            if not opened:
                raise DocumentError(f"{path.name} is an encrypted PDF (it needs a password); "
                                    "it was skipped.")
        count = len(reader.pages)
        if count > limits.MAX_PDF_PAGES:
            raise DocumentError(f"{path.name} has {count:,} pages, more than the "
                                f"{limits.MAX_PDF_PAGES:,} Hearth indexes in one file.")
        parsed.pages = count
        failed = 0
        for number, page in enumerate(reader.pages, start=1):
            if time.monotonic() > deadline:
                raise DocumentError(f"{path.name} took longer than "
                                    f"{limits.PARSE_SECONDS:.0f} s to read (stopped at page "
                                    f"{number} of {count}); it was skipped.")
            try:
                text = page.extract_text() or ""
            except Exception:  # one broken page must not lose the others
                failed += 1
                continue
            if text.strip():
                parsed.sections.append(Section(text, page=number))
    except DocumentError:
        raise
    except (PdfReadError, Exception) as exc:  # pypdf raises many kinds on malformed input
        raise DocumentError(f"{path.name} is not a readable PDF ({type(exc).__name__}: "
                            f"{exc}).") from exc
    if failed:
        parsed.notes.append(f"{path.name}: {failed} of {count} pages could not be read.")
    if count and not parsed.sections and not failed:
        raise DocumentError(f"{path.name} has no text layer (a scanned PDF?); Hearth cannot "
                            "read text from images yet.")
    if count and not parsed.sections:
        raise DocumentError(f"{path.name}: none of its {count} pages could be read.")
    return parsed
