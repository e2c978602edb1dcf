"""A library's cheap check against its folders (walk + stat against the size and mtime
indexed, ``DocumentLibrary.changes``), what it drops and indexes (``drop_gone``,
``sync_files``: the content hash decides), how often it runs (``LibraryWatch``), and the
schema-4 migration that records the mtime. Real SQLite files and real files in tmp_path; the
embedder is a bag-of-words stand-in that counts what it embeds."""

from __future__ import annotations

import os
import sqlite3
import zlib
from pathlib import Path

import numpy as np
import pytest

from app.documents.freshness import LibraryWatch, has_watched_folders
from app.documents.index import SCHEMA_VERSION, DocumentIndex
from app.documents.library import DocumentLibrary

DIMS = 64


class Words:
    id = "words-test"
    dims = DIMS

    def __init__(self) -> None:
        self.embedded: list[str] = []  # every document text embedded

    def _vectors(self, texts):
        out = np.zeros((len(texts), DIMS), np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, zlib.crc32(word.encode()) % DIMS] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)

    def embed_documents(self, texts):
        self.embedded.extend(texts)
        return self._vectors(texts)

    def embed_queries(self, texts):
        return self._vectors(texts)


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kettle.md").write_text("# Kettle\n\nDescale the kettle with citric acid.\n")
    (folder / "boiler.md").write_text("# Boiler\n\nThe boiler reads 1.5 bar when cold.\n")
    (folder / "garden.txt").write_text("Water the tomatoes every evening.\n")
    return folder


def _library(path: Path, embedder: Words) -> DocumentLibrary:
    return DocumentLibrary(DocumentIndex(path, embedder_id=embedder.id, dims=DIMS), embedder)


def _touch(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def test_changes_finds_edited_new_touched_and_gone_files_and_only_new_text_is_embedded(
        tmp_path):
    docs = _folder(tmp_path)
    embedder = Words()
    library = _library(tmp_path / "index.sqlite3", embedder)
    library.add([docs], "home")
    assert not library.changes("home")  # nothing changed: nothing to do
    (docs / "kettle.md").write_text("# Kettle\n\nDescale the kettle with white vinegar.\n")
    (docs / "boiler.md").unlink()
    (docs / "fridge.md").write_text("# Fridge\n\nDefrost the freezer every spring.\n")
    _touch(docs / "garden.txt")
    found = library.changes("home")
    assert sorted(p.name for p in found.changed) == ["fridge.md", "garden.txt", "kettle.md"]
    assert [Path(p).name for p in found.gone] == ["boiler.md"]
    assert library.drop_gone("home", found.gone) == 1
    assert all(Path(p.file).name != "boiler.md" for p in library.search("boiler bar cold"))
    embedder.embedded.clear()
    report = library.sync_files("home", found.changed)
    assert sorted(Path(p).name for p in report.indexed) == ["fridge.md", "kettle.md"]
    assert [Path(p).name for p in report.unchanged] == ["garden.txt"]
    assert not any("tomatoes" in t.lower() for t in embedder.embedded)  # not embedded again
    assert not library.changes("home")  # the touched file's new stat was recorded
    assert Path(library.search("white vinegar", top=1)[0].file).name == "kettle.md"
    library.index.close()


def test_the_watch_walks_a_library_at_most_once_per_interval_and_drops_gone_files(tmp_path):
    docs = _folder(tmp_path)
    library = _library(tmp_path / "index.sqlite3", Words())
    library.add([docs], "home")
    walked: list[str] = []
    real = library.changes
    library.changes = lambda name: (walked.append(name), real(name))[1]
    now = [0.0]
    watch = LibraryWatch(120, clock=lambda: now[0])
    (docs / "boiler.md").unlink()
    (docs / "fridge.md").write_text("Defrost the freezer every spring.\n")
    changed = watch.check(library, ["home"])
    assert walked == ["home"] and [p.name for p in changed["home"]] == ["fridge.md"]
    assert all(Path(p.file).name != "boiler.md" for p in library.search("boiler bar cold"))
    now[0] = 119.0
    assert watch.check(library, ["home"]) == {} and walked == ["home"]  # not due
    now[0] = 120.0
    watch.check(library, ["home", "gone-library"])  # a removed library is skipped
    assert walked == ["home", "home", "gone-library"]
    library.index.close()


def test_an_index_of_schema_3_gains_the_mtime_in_one_step_and_nothing_is_embedded_again(
        tmp_path):
    docs = _folder(tmp_path)
    embedder = Words()
    path = tmp_path / "index.sqlite3"
    library = _library(path, embedder)
    library.add([docs], "home")
    library.index.close()
    db = sqlite3.connect(path)  # as schema 3 wrote it
    db.execute("ALTER TABLE files DROP COLUMN mtime_ns")
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema'")
    db.commit()
    db.close()
    library = _library(path, embedder)
    assert library.index._db.execute(
        "SELECT value FROM meta WHERE key = 'schema'").fetchone() == (str(SCHEMA_VERSION),)
    assert SCHEMA_VERSION == 4
    found = library.changes("home")  # the stat is unknown: each file is looked at once
    assert len(found.changed) == 3 and found.gone == []
    embedder.embedded.clear()
    report = library.sync_files("home", found.changed)
    assert len(report.unchanged) == 3 and embedder.embedded == []  # same hashes
    assert not library.changes("home")
    library.index.close()


def test_a_failed_migration_leaves_the_index_as_it_was(tmp_path):
    docs = _folder(tmp_path)
    path = tmp_path / "index.sqlite3"
    library = _library(path, Words())
    library.add([docs], "home")
    library.index.close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE files DROP COLUMN mtime_ns")
    db.execute("ALTER TABLE files DROP COLUMN recipe")
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema'")
    db.execute("CREATE TRIGGER last_step BEFORE INSERT ON meta WHEN new.key = 'chunking' "
               "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END")  # the last step fails
    db.commit()
    db.close()
    with pytest.raises(sqlite3.Error, match="the disk is full"):
        DocumentIndex(path, embedder_id="words-test", dims=DIMS)
    db = sqlite3.connect(path)
    columns = {r[1] for r in db.execute("PRAGMA table_info(files)")}
    schema = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    db.close()
    assert "mtime_ns" not in columns and "recipe" not in columns and schema == ("2",)
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER last_step")
    db.commit()
    db.close()
    index = DocumentIndex(path, embedder_id="words-test", dims=DIMS)  # the next start
    columns = {r[1] for r in index._db.execute("PRAGMA table_info(files)")}
    assert {"mtime_ns", "recipe"} <= columns and index.stale_files(1, "any") != []
    index.close()


def test_a_file_that_cannot_be_indexed_is_not_handed_back_until_it_changes(tmp_path):
    docs = _folder(tmp_path)
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 nothing else")
    library = _library(tmp_path / "index.sqlite3", Words())
    report = library.add([docs], "home")
    assert [Path(p).name for p in report.failed] == ["broken.pdf"]
    assert not library.changes("home")  # it failed as it is: no update every check
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 still nothing, but other bytes")
    assert [p.name for p in library.changes("home").changed] == ["broken.pdf"]
    library.index.close()


def test_has_watched_folders_answers_from_the_index_without_changing_it(tmp_path):
    path = tmp_path / "index.sqlite3"
    assert not has_watched_folders(path) and not path.exists()  # nothing created
    docs = _folder(tmp_path)
    library = _library(path, Words())
    assert not has_watched_folders(path)  # no collections
    library.add([docs / "kettle.md"], "chat-c0ffee")  # a chat's attached file
    library.index.collection_id("empty", create=True, embedder_id=Words.id, dims=DIMS)
    assert not has_watched_folders(path)  # a library without folders has none to check
    library.add([docs], "home")
    assert has_watched_folders(path)
    library.index.close()
    (tmp_path / "junk.sqlite3").write_bytes(b"not an index\n" * 100)
    assert not has_watched_folders(tmp_path / "junk.sqlite3")
