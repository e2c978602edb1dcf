"""Each format read from a real file, and each hostile file refused with a sentence that
names it, within bounded memory and time."""

from __future__ import annotations

import json
import time
import zipfile

import pytest

from app.documents import limits
from app.documents.parse import kind_of, parse_file
from app.documents.sections import DocumentError
from tests.documents.files import (
    write_docx,
    write_encrypted_pdf,
    write_pdf,
    write_zip_bomb_docx,
)


def test_a_pdf_gives_one_section_per_page_with_its_number(tmp_path):
    pdf = write_pdf(tmp_path / "guide.pdf", [["The first page."], [], ["Page three (last)."]])
    parsed = parse_file(pdf)
    assert parsed.kind == "pdf" and parsed.pages == 3
    assert [(s.page, s.text.strip()) for s in parsed.sections] == [
        (1, "The first page."), (3, "Page three (last).")]


def test_an_encrypted_pdf_is_refused_with_a_sentence(tmp_path):
    pdf = write_encrypted_pdf(tmp_path / "locked.pdf", [["secret"]])
    with pytest.raises(DocumentError, match=r"^locked\.pdf is an encrypted PDF"):
        parse_file(pdf)


def test_a_pdf_that_opens_with_the_empty_password_is_read(tmp_path):
    pdf = write_encrypted_pdf(tmp_path / "printonly.pdf", [["Readable anyway."]], password="")
    assert "Readable anyway." in parse_file(pdf).sections[0].text


def test_a_malformed_pdf_is_refused_with_a_sentence(tmp_path):
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >>\ngarbage\x00\xff" * 50)
    with pytest.raises(DocumentError, match=r"^broken\.pdf is not a readable PDF"):
        parse_file(bad)


def test_a_scanned_pdf_without_a_text_layer_says_so(tmp_path):
    scan = write_pdf(tmp_path / "scan.pdf", [[], []])
    with pytest.raises(DocumentError, match=r"^scan\.pdf has no text layer.*no OCR|cannot read "
                                            r"text from images"):
        parse_file(scan)


def test_a_2_gb_file_is_refused_by_its_size_unread(tmp_path):
    huge = tmp_path / "huge.pdf"
    with huge.open("wb") as fh:  # sparse: no disk used
        fh.truncate(2 << 30)
    start = time.monotonic()
    with pytest.raises(DocumentError, match=r"^huge\.pdf is 2\.1 GB, more than"):
        parse_file(huge)
    assert time.monotonic() - start < 5  # refused before reading (a promise, generous)
    text = tmp_path / "big.txt"
    with text.open("wb") as fh:
        fh.truncate(limits.MAX_TEXT_BYTES + 1)
    with pytest.raises(DocumentError, match=r"^big\.txt is .* more than"):
        parse_file(text)


def test_a_docx_gives_sections_by_heading_with_its_tables(tmp_path):
    doc = write_docx(tmp_path / "manual.docx", [
        ("Title", "Manual"), ("", "Welcome."), ("Heading 1", "Install"),
        ("", "Run the installer."), ("table", "OS|Command\nLinux|apt install hearth"),
        ("Heading 2", "Linux"), ("", "Use apt."), ("Heading 1", "Use"), ("", "Click Send.")])
    parsed = parse_file(doc)
    assert [(s.heading, s.text) for s in parsed.sections] == [
        ("Manual", "Welcome."),
        ("Manual › Install", "Run the installer.\n\nOS | Command\nLinux | apt install hearth"),
        ("Manual › Install › Linux", "Use apt."),
        ("Manual › Use", "Click Send."),
    ]


def test_a_docx_zip_bomb_is_refused_before_it_is_unpacked(tmp_path):
    bomb = write_zip_bomb_docx(tmp_path / "bomb.docx", unpacked_mb=64)
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(DocumentError, match=r"^bomb\.docx: word/document\.xml unpacks to .* "
                                            r"times its size"):
        parse_file(bomb)


def test_a_docx_whose_members_add_up_past_the_bound_is_refused(tmp_path, monkeypatch):
    doc = write_docx(tmp_path / "big.docx", [("", "x" * 4000)])
    monkeypatch.setattr(limits, "MAX_DOCX_UNCOMPRESSED", 10_000)
    with pytest.raises(DocumentError, match=r"^big\.docx would unpack to"):
        parse_file(doc)


def test_a_zip_that_is_not_a_word_document_is_refused(tmp_path):
    fake = tmp_path / "fake.docx"
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(DocumentError, match=r"^fake\.docx is not a Word document"):
        parse_file(fake)
    (tmp_path / "junk.docx").write_bytes(b"not a zip at all")
    with pytest.raises(DocumentError, match=r"^junk\.docx is not a readable DOCX"):
        parse_file(tmp_path / "junk.docx")


def test_html_gives_text_by_heading_without_scripts_or_styles(tmp_path):
    page = tmp_path / "page.html"
    page.write_text("<html><head><title>T</title><style>p{color:red}</style></head><body>"
                    "<h1>Hearth</h1><p>A local chat&nbsp;app.</p><script>alert(1)</script>"
                    "<h2>Install</h2><ul><li>Download</li><li>Run</li></ul></body></html>")
    parsed = parse_file(page)
    assert [(s.heading, s.text) for s in parsed.sections] == [
        ("Hearth", "A local chat\xa0app."), ("Hearth › Install", "Download\n\nRun")]


def test_markdown_gives_a_section_per_heading_with_the_path_above_it(tmp_path):
    md = tmp_path / "notes.md"
    md.write_text("Intro line.\n\n# Guide\n\nText one.\n\n```\n# not a heading\n```\n\n"
                  "## Install\n\nText two.\n\n# Other\n\nText three.\n")
    assert [(s.heading, s.text) for s in parse_file(md).sections] == [
        ("", "Intro line."), ("Guide", "Text one.\n\n```\n# not a heading\n```"),
        ("Guide › Install", "Text two."), ("Other", "Text three.")]


def test_source_code_is_cut_into_line_ranges(tmp_path):
    code = tmp_path / "tool.py"
    code.write_text("\n".join(f"x{i} = {i}" if i % 10 else "" for i in range(1, 131)))
    sections = parse_file(code).sections
    assert parse_file(code).kind == "code"
    assert sections[0].heading.startswith("lines 1-")
    assert "\n".join(s.text for s in sections).count("x11 = 11") == 1
    assert all(len(s.text.splitlines()) <= 60 for s in sections)


def test_csv_rows_become_column_value_lines(tmp_path):
    table = tmp_path / "people.csv"
    table.write_text("name,city\nAnna,Oslo\nBen,Lima\n")
    sections = parse_file(table).sections
    assert [(s.heading, s.text) for s in sections] == [
        ("rows 2-3", "name: Anna; city: Oslo\nname: Ben; city: Lima")]


def test_json_leaves_become_path_value_lines(tmp_path):
    data = tmp_path / "config.json"
    data.write_text(json.dumps({"server": {"port": 8080, "hosts": ["a", "b"]}, "debug": True}))
    assert [(s.heading, s.text) for s in parse_file(data).sections] == [
        ("server", "server.port: 8080\nserver.hosts[0]: a\nserver.hosts[1]: b"),
        ("debug", "debug: true")]
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(DocumentError, match=r"^bad\.json is not valid JSON"):
        parse_file(tmp_path / "bad.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DocumentError, match=r"^deep\.json is JSON nested too deeply"):
        parse_file(tmp_path / "deep.json")


def test_a_binary_file_named_txt_is_refused(tmp_path):
    fake = tmp_path / "photo.txt"
    fake.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(DocumentError, match=r"^photo\.txt looks like a binary file"):
        parse_file(fake)


def test_non_utf8_text_is_read_as_windows_1252_with_a_note(tmp_path):
    latin = tmp_path / "café.txt"
    latin.write_bytes("Crème brûlée for the café.".encode("cp1252"))
    parsed = parse_file(latin)
    assert parsed.sections[0].text == "Crème brûlée for the café."
    assert parsed.notes and parsed.notes[0].startswith("café.txt is not UTF-8")


def test_utf16_with_a_bom_is_read(tmp_path):
    wide = tmp_path / "wide.txt"
    wide.write_bytes("Hello from Windows.".encode("utf-16"))
    assert parse_file(wide).sections[0].text == "Hello from Windows."


def test_types_by_name():
    from pathlib import Path

    assert [kind_of(Path(n)) for n in ("a.PDF", "b.docx", "c.htm", "d.md", "e.rs", "f.tsv",
                                       "g.jsonl", "h.txt", "i.exe")] == [
        "pdf", "docx", "html", "markdown", "code", "csv", "json", "text", None]
