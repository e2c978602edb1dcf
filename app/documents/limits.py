"""The bounds every document job stays within (memory and time), in one place."""

from __future__ import annotations

#: a file larger than this is refused before a byte is read (a 2 GB file gets a sentence)
MAX_FILE_BYTES = 256 << 20
#: text formats (plain, Markdown, code, CSV, JSON, HTML) are read whole, so their bound is lower
MAX_TEXT_BYTES = 32 << 20
#: a DOCX whose members unpack to more than this is refused before it is opened (zip bombs)
MAX_DOCX_UNCOMPRESSED = 128 << 20
#: a DOCX member that unpacks to more than this many times its packed size is refused
MAX_ZIP_RATIO = 200
MAX_PDF_PAGES = 5_000
#: seconds one file's parsing may take (checked between pages and sections)
PARSE_SECONDS = 120.0
#: files one walk of a folder yields; the rest are counted and reported
MAX_WALK_FILES = 20_000
#: entries one walk looks at (unsupported ones included), so a huge folder stays bounded
MAX_WALK_ENTRIES = 200_000
#: text one file contributes to the index, in characters
MAX_TEXT_CHARS = 20_000_000
