"""The bounded walk (symlink loops, huge folders) and chunking by headings with overlap."""

from __future__ import annotations

import itertools
import os

from app.documents.chunking import chunk_sections
from app.documents.sections import Section
from app.documents.walk import walk


def test_a_symlink_loop_is_walked_once(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "note.md").write_text("# Hi\n\ntext\n")
    (tmp_path / "a" / "b" / "up").symlink_to(tmp_path / "a", target_is_directory=True)
    (tmp_path / "a" / "self").symlink_to(tmp_path / "a" / "self")  # ELOOP on stat
    found = walk([tmp_path / "a"])
    assert found.files == [(tmp_path / "a" / "b" / "note.md").resolve()]
    assert found.complete


def test_a_folder_of_100000_files_is_walked_within_bounds_with_a_count(tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(100_000):
        os.close(os.open(folder / f"f{i:06}.txt", os.O_CREAT | os.O_WRONLY))
    found = walk([folder], max_files=20_000)
    assert len(found.files) == 20_000 and found.over_limit == 80_000
    assert not found.complete  # nothing may be dropped on the strength of this walk
    assert found.problems[-1] == ("80,000 more document files were found and not indexed "
                                  "(the limit is 20,000 per add).")


def test_other_types_are_counted_and_hidden_files_left_alone(tmp_path):
    (tmp_path / "x.exe").write_bytes(b"MZ")
    (tmp_path / ".secret.md").write_text("hidden")
    (tmp_path / "ok.txt").write_text("fine")
    found = walk([tmp_path, tmp_path / "missing"])
    assert found.files == [(tmp_path / "ok.txt").resolve()] and found.skipped_types == 1
    assert found.problems == [f"{tmp_path / 'missing'} does not exist (a broken link?)."]


def test_chunks_keep_page_and_heading_and_never_cross_them():
    sections = [Section("One.\n\nTwo.", page=1), Section("Three.", page=2, heading="Intro")]
    chunks = chunk_sections(sections)
    assert [(c.text, c.page, c.heading, c.ordinal) for c in chunks] == [
        ("One.\n\nTwo.", 1, "", 0), ("Three.", 2, "Intro", 1)]
    assert chunks[1].location() == "page 2 · Intro"


def test_long_text_is_packed_by_paragraph_with_overlap():
    paragraphs = [f"Paragraph {i} " + "word " * 60 for i in range(10)]
    chunks = chunk_sections([Section("\n\n".join(paragraphs), heading="H")], target=800,
                            overlap=150)
    assert len(chunks) > 2 and all(len(c.text) <= 800 + 150 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        head = after.text.split("\n\n")[0]
        assert before.text.endswith(head) and 0 < len(head) <= 150  # the overlap
    assert all(f"Paragraph {i} " in "".join(c.text for c in chunks) for i in range(10))


def test_a_paragraph_longer_than_a_chunk_is_cut_at_sentences_then_words():
    text = " ".join(f"Sentence number {i} is here." for i in range(200)) + " " + "x" * 2000
    chunks = chunk_sections([Section(text)], target=500, overlap=50)
    assert all(len(c.text) <= 500 + 50 + 2 for c in chunks)
    assert "Sentence number 199 is here." in "".join(c.text for c in chunks)


def test_a_long_list_is_cut_between_its_items_which_stay_one_per_line():
    items = [f"- item {i} " + " ".join(f"w{i}x{j}" for j in range(25)) for i in range(12)]
    text = "Intro line.\n" + "\n".join(items)  # one paragraph: a Markdown list has no blanks
    chunks = chunk_sections([Section(text, heading="Server")], target=800, overlap=150)
    assert len(chunks) > 2
    for item in items:  # every item whole in a chunk (not cut mid-item at a word)
        assert any(item in c.text for c in chunks), item
    for chunk in chunks:  # bullets keep their own lines, no blank lines put between them
        assert "\n\n-" not in chunk.text
        assert all(line.startswith("- ") for line in chunk.text.split("\n")[1:])


def test_the_embedder_reads_the_file_title_and_heading_path_before_the_text():
    from app.documents.chunking import Chunk, embedding_text

    chunk = Chunk("Bodies are limited.", None, "Hearth › Local server", 3)
    assert embedding_text(chunk, "README") == "README › Hearth › Local server\nBodies are limited."
    assert embedding_text(Chunk("x", 2, "", 0), "") == "x"
    assert embedding_text(Chunk("x", 2, "", 0), "book") == "book\nx"
