"""Libraries over a real SQLite file and the real embedder: indexing, search (BM25, vectors,
fused), re-index by content hash, deleted files dropping out, all-or-nothing writes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from app.documents.chunking import Chunk
from app.documents.index import DocumentIndex, fts_query
from app.documents.library import DocumentLibrary
from app.documents.starter_embedder import INT8_LAYOUT
from app.errors import HearthError
from tests.documents.files import write_docx, write_pdf

#: the starter's int8 build today, and the one before it (an install of the Hearth before)
TODAY, EARLIER = f"int8 layout {INT8_LAYOUT}", f"int8 layout {INT8_LAYOUT - 1}"

GARDEN = ("# Garden\n\n## Tomatoes\n\nTomatoes need six to eight hours of direct sun and "
          "deep watering twice a week.\n\n## Roses\n\nPrune roses in late winter, just above "
          "an outward-facing bud.\n")


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "garden.md").write_text(GARDEN)
    write_pdf(folder / "car.pdf", [["The owner's manual."],
                                   ["Change the engine oil every 10,000 kilometres."]])
    write_docx(folder / "office.docx", [("Heading 1", "Printer"),
                                        ("", "The office printer jams when the paper is damp.")])
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 nothing else")
    (folder / "image.txt").write_bytes(bytes(range(256)) * 8)
    return folder


@pytest.fixture
def library(tmp_path, embedder):
    index = DocumentIndex(tmp_path / "index.sqlite3", embedder_id=embedder.id,
                          dims=embedder.dims)
    yield DocumentLibrary(index, embedder)
    index.close()


def test_a_folder_indexes_and_bad_files_get_sentences_while_the_rest_indexes(library, docs):
    report = library.add([docs], "home")
    assert sorted(p.rsplit("/", 1)[1] for p in report.indexed) == [
        "car.pdf", "garden.md", "office.docx"]
    assert sorted(p.rsplit("/", 1)[1] for p in report.failed) == ["broken.pdf", "image.txt"]
    assert any(s.startswith("broken.pdf is not a readable PDF") for s in report.problems)
    assert any(s.startswith("image.txt looks like a binary file") for s in report.problems)
    assert library.index.collections() == [
        {"name": "home", "files": 3, "chunks": 5, "embedder": "all-minilm-l6-v2",
         "roots": [str(docs)]}]


def test_search_finds_the_passage_with_its_file_page_and_heading(library, docs):
    library.add([docs], "home")
    best = library.search("how often should I change the oil", ["home"], top=3)[0]
    assert (best.file, best.page) == (str(docs / "car.pdf"), 2)
    assert "engine oil" in best.text
    best = library.search("when to prune roses", top=1)[0]
    assert (best.heading, best.location()) == ("Garden › Roses", "Garden › Roses")
    best = library.search("paper jam in the printer", top=1)[0]
    assert best.file.endswith("office.docx") and best.heading == "Printer"


def test_vectors_find_what_shares_no_word_and_bm25_what_vectors_miss(library, docs):
    library.add([docs], "home")
    # no word in common with the tomato passage: only the vectors can find it
    vec = library.search("sunlight requirements for vegetables", mode="vector", top=1)[0]
    assert "Tomatoes" in vec.text
    assert not any("Tomatoes" in p.text for p in
                   library.search("sunlight requirements for vegetables", mode="bm25"))
    # an exact figure is BM25's
    assert "10,000" in library.search("10,000", mode="bm25", top=1)[0].text
    fused = library.search("sunlight requirements for vegetables", top=1)[0]
    assert "Tomatoes" in fused.text


def test_a_chunk_is_embedded_with_its_file_title_so_a_query_naming_the_file_finds_it(
        library, tmp_path):
    """Two files say the same words; only their names (the contextual header the embedder
    reads) tell them apart. The passage handed out is the chunk's own text."""
    folder = tmp_path / "manuals"
    folder.mkdir()
    same = "Clean it every month and replace the filter once a year.\n"
    for name in ("aquarium.txt", "coffee-maker.txt"):  # the aquarium is indexed first
        (folder / name).write_text(same)
    library.add([folder], "manuals")
    found = library.search("how often should I clean my coffee maker", mode="vector", top=2)
    assert [Path(p.file).name for p in found] == ["coffee-maker.txt", "aquarium.txt"]
    assert found[0].text == same.strip() and found[0].heading == ""
    found = library.search("aquarium cleaning schedule", mode="vector", top=1)
    assert Path(found[0].file).name == "aquarium.txt"


def test_an_index_of_an_older_chunking_indexes_its_files_again_on_the_next_refresh(
        library, docs):
    import sqlite3

    library.add([docs], "home")
    path = library.index.path
    db = sqlite3.connect(path)  # as an index written before the chunking recipe was recorded
    db.execute("DELETE FROM meta WHERE key = 'chunking'")
    db.commit()
    db.close()
    index = DocumentIndex(path, embedder_id=library.embedder.id, dims=library.embedder.dims)
    older = DocumentLibrary(index, library.embedder)
    try:
        # still searchable meanwhile; each file is re-indexed whole by the next refresh
        assert "engine oil" in older.search("change the engine oil", top=1)[0].text
        report = older.refresh("home")
        assert sorted(Path(p).name for p in report.indexed) == [
            "car.pdf", "garden.md", "office.docx"] and report.unchanged == []
        assert older.refresh("home").indexed == []  # once only
    finally:
        index.close()


def _edit(path: Path, *statements: tuple) -> None:
    """Change the index file as an older Hearth left it (a commit the index sees)."""
    import sqlite3

    db = sqlite3.connect(path)
    for sql, *args in statements:
        db.execute(sql, *args)
    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
    db.commit()
    db.close()


def test_an_index_of_schema_2_is_migrated_and_its_files_are_updated_once(library, docs):
    library.add([docs], "home")
    path = library.index.path
    library.index.close()
    _edit(path, ("ALTER TABLE files DROP COLUMN recipe",),  # as schema 2 wrote it
          ("UPDATE meta SET value = '2' WHERE key = 'schema'",))
    index = DocumentIndex(path, embedder_id=library.embedder.id, dims=library.embedder.dims)
    library.index = index
    assert library.out_of_date() == {"home": 3}  # how they were made is not known
    assert "engine oil" in library.search("change the engine oil", top=1)[0].text
    report = library.update("home")
    assert sorted(Path(p).name for p in report.indexed) == [
        "car.pdf", "garden.md", "office.docx"] and report.removed == []
    assert library.out_of_date() == {} and library.update("home").indexed == []
    assert index._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("4",)


def test_a_file_whose_vectors_came_from_an_older_embedder_build_is_embedded_again(
        library, docs, tmp_path):
    from app.documents.library import recipe_of

    other = tmp_path / "notes"
    other.mkdir()
    (other / "tea.md").write_text("# Tea\n\nBrew green tea at 80 degrees for two minutes.\n")
    library.add([docs], "home")
    library.add([other], "home")
    assert library.embedder.build == TODAY  # the starter's graph today
    assert library.out_of_date() == {}
    car, tea, garden = (str(docs / "car.pdf"), str(other / "tea.md"), str(docs / "garden.md"))
    older = recipe_of(library.embedder).replace(TODAY, EARLIER)
    flat = np.full(384, 384 ** -0.5, np.float32).tobytes()  # not what today's graph gives
    _edit(library.index.path, *[s for p in (car, tea, garden) for s in (
        ("UPDATE files SET recipe = ? WHERE path = ?", (older, p)),
        ("UPDATE chunks SET vector = ? WHERE file_id = (SELECT id FROM files WHERE path = ?)",
         (flat, p)))])
    (docs / "garden.md").rename(tmp_path / "garden.md")  # gone from disk: cannot be updated
    assert library.out_of_date() == {"home": 2}
    assert library.out_of_date(on_disk=False) == {"home": 3}
    cid = library.index.collection_id("home")
    assert library.index.stale_files(cid, recipe_of(library.embedder)) == [car, garden, tea]
    (tmp_path / "garden.md").rename(docs / "garden.md")
    # their content did not change, yet they are not skipped; an add of one folder updates
    # the collection's other stale files (tea.md) too
    report = library.add([docs], "home")
    assert sorted(report.indexed) == [car, garden, tea] and report.removed == []
    assert report.unchanged == [str(docs / "office.docx")]
    assert library.out_of_date() == {} and library.update("home").indexed == []
    vectors = library.index._db.execute("SELECT vector FROM chunks").fetchall()
    assert flat not in {v for (v,) in vectors}
    best = library.search("how often should I change the oil", mode="vector", top=1)[0]
    assert best.file == car


def test_the_embedder_build_names_the_graph_it_runs(embedder_dir, tmp_path):
    import json

    from app.documents.embedding import graph_build

    assert graph_build(embedder_dir) == TODAY
    folder = tmp_path / "layout2"
    folder.mkdir()
    meta = json.loads((embedder_dir / "embedder.json").read_text())
    (folder / "embedder.json").write_text(json.dumps({**meta, "int8_layout": 2}))
    (folder / "model.onnx").symlink_to(embedder_dir / "model.onnx")
    assert graph_build(folder) == "fp32"  # its int8 graph is lost: the reference runs
    (folder / "model_int8.onnx").symlink_to(embedder_dir / "model_int8.onnx")
    assert graph_build(folder) == "int8 layout 2"
    assert graph_build(folder, "fp32") == "fp32"


def test_a_library_embedded_by_the_earlier_int8_layout_is_stale_once_its_graph_is_rebuilt(
        embedder_dir, docs, tmp_path):
    """The real chain: a starter folder of the int8 layout before indexes a library; opening the
    library converts the folder to today's graph, and the library's files are stale until
    ``update`` embeds them again by it."""
    import json
    import shutil

    from app.documents.embedders import EmbedderStore
    from app.documents.embedding import EmbeddingThread
    from app.documents.open import OpenLibrary
    from app.documents.starter_embedder import EMBEDDER_ID, INT8_GRAPH

    root = tmp_path / "embedders"
    old = root / EMBEDDER_ID
    old.mkdir(parents=True)
    for name in ("model.onnx", "tokenizer.json"):
        (old / name).symlink_to(embedder_dir / name)
    shutil.copy(embedder_dir / INT8_GRAPH, old / INT8_GRAPH)
    meta = json.loads((embedder_dir / "embedder.json").read_text())
    (old / "embedder.json").write_text(json.dumps({**meta, "int8_layout": INT8_LAYOUT - 1}))
    path = tmp_path / "index.sqlite3"
    with EmbeddingThread(old, threads=1) as earlier:
        assert earlier.build == EARLIER
        index = DocumentIndex(path, embedder_id=earlier.id, dims=earlier.dims)
        DocumentLibrary(index, earlier).add([docs], "home")
        index.close()
    opened = OpenLibrary(path, store=EmbedderStore(root), threads=1, checkpoint=lambda: None)
    try:
        library = opened.library
        assert library.embedder.build == TODAY  # the folder gained today's graph
        assert library.out_of_date() == {"home": 3}
        assert "engine oil" in library.search("change the engine oil", top=1)[0].text
        report = library.update("home")
        assert sorted(Path(p).name for p in report.indexed) == [
            "car.pdf", "garden.md", "office.docx"]
        assert library.out_of_date() == {}
    finally:
        opened.close()


def test_unchanged_files_are_skipped_changed_ones_reindexed_and_deleted_ones_dropped(
        library, docs):
    library.add([docs], "home")
    again = library.add([docs], "home")
    assert again.indexed == [] and len(again.unchanged) == 3
    (docs / "garden.md").write_text(GARDEN.replace("Roses", "Tulips").replace("roses", "tulips"))
    (docs / "car.pdf").unlink()
    report = library.refresh("home")
    assert report.indexed == [str(docs / "garden.md")]
    assert report.removed == [str(docs / "car.pdf")]
    assert all("car.pdf" not in p.file for p in library.search("engine oil", top=10))
    assert library.search("prune tulips", top=1)[0].heading == "Garden › Tulips"
    assert not any("Roses" in p.heading for p in library.search("roses", top=10))


def test_collections_are_searched_apart_and_removed(library, docs, tmp_path):
    other = tmp_path / "other.md"
    other.write_text("# Tea\n\nBrew green tea at 80 degrees for two minutes.\n")
    library.add([docs], "home")
    library.add([other], "kitchen")
    assert all(p.file == str(other) for p in library.search("tea", ["kitchen"], top=5))
    assert all(p.file != str(other) for p in library.search("tea", ["home"], top=5))
    assert library.remove("home", [docs / "garden.md"]) == 1
    assert library.remove("kitchen") == 1
    assert [c["name"] for c in library.index.collections()] == ["home"]
    with pytest.raises(HearthError, match="no document collection named 'kitchen'"):
        library.search("tea", ["kitchen"])


def test_each_collection_keeps_its_embedder_and_its_dims(tmp_path):
    index = DocumentIndex(tmp_path / "i.sqlite3", embedder_id="a", dims=4)
    old = index.collection_id("old", create=True)
    index.close()
    index = DocumentIndex(tmp_path / "i.sqlite3", embedder_id="b", dims=8)  # another default
    new = index.collection_id("new", create=True)
    wide = index.collection_id("wide", create=True, embedder_id="c", dims=6)
    assert [index.collection_embedder(c) for c in (old, new, wide)] == [
        ("a", 4), ("b", 8), ("c", 6)]
    with pytest.raises(ValueError, match="collection's dims"):
        index.replace_file(old, "/x.txt", sha256="x", size=1, kind="text", pages=0,
                           chunks=[Chunk("x", None, "", 0)], vectors=np.ones((1, 8), np.float32))
    assert [c["embedder"] for c in index.collections()] == ["b", "a", "c"]  # by name
    index.close()


def test_an_index_of_schema_1_gives_its_collections_the_index_embedder(tmp_path):
    import sqlite3

    path = tmp_path / "i.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema', '1'), ('embedder', 'a'), ('dims', '4'),
                                ('generation', '3');
        CREATE TABLE collections(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
                                 created REAL NOT NULL);
        INSERT INTO collections VALUES (1, 'home', 0);""")
    db.commit()
    db.close()
    index = DocumentIndex(path, embedder_id="b", dims=8)
    assert index.collection_embedder(index.collection_id("home")) == ("a", 4)
    assert index.collections()[0]["embedder"] == "a"
    index.close()


def test_libraries_of_two_embedders_are_searched_each_with_its_own_query(tmp_path):
    """A collection's vectors are only compared with its own embedder's query vector."""
    index = DocumentIndex(tmp_path / "i.sqlite3", embedder_id="a", dims=4)
    first = index.collection_id("first", create=True)
    second = index.collection_id("second", create=True, embedder_id="b", dims=3)
    index.replace_file(first, "/a.txt", sha256="a", size=1, kind="text", pages=0,
                       chunks=[Chunk(f"alpha {i}", None, "", i) for i in range(2)],
                       vectors=np.eye(2, 4, dtype=np.float32))
    index.replace_file(second, "/b.txt", sha256="b", size=1, kind="text", pages=0,
                       chunks=[Chunk(f"beta {i}", None, "", i) for i in range(2)],
                       vectors=np.eye(2, 3, dtype=np.float32))
    queries = {"a": np.eye(4, dtype=np.float32)[1], "b": np.eye(3, dtype=np.float32)[0]}
    found = index.search("nothing", queries, [first, second], top=2, mode="vector")
    assert [p.text for p in found] == ["alpha 1", "beta 0"] or \
        [p.text for p in found] == ["beta 0", "alpha 1"]
    hybrid = index.search("alpha beta", queries, [first, second], top=4)
    assert {p.text for p in hybrid} == {"alpha 0", "alpha 1", "beta 0", "beta 1"}
    # kept between searches: each embedder's vectors, and the ids BM25's filter reads
    assert set(index._matrices) == {("a",), ("b",), ("a", "b")}
    with pytest.raises(ValueError, match="query vector per embedder"):
        index.search("x", queries["a"], [first, second], mode="vector")
    index.set_embedder(second, "a", 4)  # its vectors go with the old embedder
    assert index.collection_embedder(second) == ("a", 4) and index.files(second) == []
    index.close()


def test_the_fts_query_lets_no_syntax_through():
    assert fts_query('NEAR(ab cd) OR "x" AND -yy* col:zz') == \
        '"near" OR "ab" OR "cd" OR "yy" OR "col" OR "zz"'
    assert fts_query("?!") == ""
    assert fts_query("what is it") == '"what" OR "is" OR "it"'  # nothing but function words


CRASH = textwrap.dedent("""
    import os, sys
    import numpy as np
    from pathlib import Path
    from app.documents.chunking import Chunk
    from app.documents.index import DocumentIndex
    index = DocumentIndex(Path(sys.argv[1]), embedder_id="t", dims=4)
    cid = index.collection_id("c")
    chunks = [Chunk(f"fresh words {i}", None, "", i) for i in range(5)]
    vectors = np.eye(5, 4, dtype=np.float32)
    def crash(i):
        if i == 2:
            os._exit(3)  # the process dies in the middle of the file's transaction
    index.replace_file(cid, "/docs/a.md", sha256="new", size=1, kind="markdown", pages=0,
                       chunks=chunks, vectors=vectors, on_chunk=crash)
""")


def test_a_crash_while_writing_a_file_leaves_its_previous_version_whole(tmp_path):
    path = tmp_path / "i.sqlite3"
    index = DocumentIndex(path, embedder_id="t", dims=4)
    cid = index.collection_id("c", create=True)
    index.replace_file(cid, "/docs/a.md", sha256="old", size=1, kind="markdown", pages=0,
                       chunks=[Chunk("old text", None, "", 0)],
                       vectors=np.ones((1, 4), np.float32) / 2)
    index.close()
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", CRASH, str(path)], cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": ""}, timeout=60)
    assert done.returncode == 3
    index = DocumentIndex(path, embedder_id="t", dims=4)
    [record] = index.files(cid)
    assert (record.sha256, record.chunks) == ("old", 1)
    assert index.bm25_ids("fresh", [cid], 10) == []
    assert len(index.bm25_ids("old text", [cid], 10)) == 1
    index.close()


def test_bm25_finds_a_small_collections_passage_under_a_big_ones(tmp_path):
    index = DocumentIndex(tmp_path / "i.sqlite3", embedder_id="t", dims=4)
    big, small = (index.collection_id(n, create=True) for n in ("big", "small"))
    many = [Chunk(f"tea note {i}: tea tea tea", None, "", i) for i in range(300)]
    index.replace_file(big, "/big.txt", sha256="b", size=1, kind="text", pages=0, chunks=many,
                       vectors=np.full((300, 4), 0.5, np.float32))
    index.replace_file(small, "/small.txt", sha256="s", size=1, kind="text", pages=0,
                       chunks=[Chunk("one cup of tea", None, "", 0)],
                       vectors=np.full((1, 4), 0.5, np.float32))
    [only] = index.bm25_ids("tea", [small], 5)
    assert index.search("tea", None, [small], mode="bm25")[0].file == "/small.txt"
    assert only not in index.bm25_ids("tea", [big], 400)
    index.close()


def _plain_index(tmp_path, texts: list[str]) -> tuple[DocumentIndex, int]:
    """An index of ``texts`` with one-hot vectors (chunk i points along axis i)."""
    index = DocumentIndex(tmp_path / "plain.sqlite3", embedder_id="plain", dims=8)
    cid = index.collection_id("c", create=True)
    vectors = np.eye(8, dtype=np.float32)[:len(texts)]
    index.replace_file(cid, "/plain.txt", sha256="x", size=1, kind="text", pages=0,
                       chunks=[Chunk(t, None, "", i) for i, t in enumerate(texts)],
                       vectors=vectors)
    return index, cid


def test_fusion_weights_decide_between_the_two_lists(tmp_path):
    from app.documents.index import Fusion

    index, cid = _plain_index(tmp_path, ["walrus tusks", "nothing here", "penguin",
                                         *(f"filler {n}" for n in range(5))])
    # the vector list: "penguin" first, "walrus tusks" last (8th); BM25: "walrus tusks" only
    query = np.eye(8, dtype=np.float32)[2] - 0.3 * np.eye(8, dtype=np.float32)[0]
    both = [p.text for p in index.search("walrus", query, [cid], top=2)]
    assert set(both) == {"walrus tusks", "penguin"}
    lean_bm25 = Fusion(k=5, bm25_weight=2.0, vector_weight=1.0)
    lean_vector = Fusion(k=5, bm25_weight=0.5, vector_weight=1.0)
    assert index.search("walrus", query, [cid], top=1, fusion=lean_bm25)[0].text == \
        "walrus tusks"
    assert index.search("walrus", query, [cid], top=1, fusion=lean_vector)[0].text == "penguin"
    index.close()


def test_a_term_in_too_many_chunks_leaves_the_bm25_query(tmp_path, monkeypatch):
    from app.documents import index as index_module

    monkeypatch.setattr(index_module, "COMMON_TERM_CHUNKS", 2)
    index, cid = _plain_index(tmp_path, ["kettle boils water", "kettle descaling",
                                         "kettle lid", "water filter"])
    # "kettle" is in three chunks (over the bound of two): "water" alone ranks
    assert index.bm25_ids("kettle water", [cid], 5) == index.bm25_ids("water", [cid], 5)
    assert len(index.bm25_ids("kettle water", [cid], 5)) == 2
    assert len(index.bm25_ids("kettle", [cid], 5)) == 3  # alone, it stays
    index.close()


def test_a_hybrid_query_scores_the_vectors_while_bm25_ranks(tmp_path, monkeypatch):
    """The vector product runs on the index's scorer thread at the same time as FTS5 ranks:
    BM25 here waits until the vector scoring has begun, which a serial search never does."""
    import threading

    from app.documents import index as index_module

    index, cid = _plain_index(tmp_path, ["walrus tusks", "nothing here", "penguin",
                                         *(f"filler {n}" for n in range(5))])
    query = np.eye(8, dtype=np.float32)[2] - 0.3 * np.eye(8, dtype=np.float32)[0]
    serial = [p.chunk_id for p in index.search("walrus", query, [cid], top=3)]
    scoring, overlapped, threads = threading.Event(), [], []
    top_by_dot, bm25_ids = index_module.top_by_dot, index.bm25_ids

    def vectors(*args):
        threads.append(threading.current_thread().name)
        scoring.set()
        return top_by_dot(*args)

    def bm25(*args):
        overlapped.append(scoring.wait(timeout=5))
        return bm25_ids(*args)

    monkeypatch.setattr(index_module, "top_by_dot", vectors)
    monkeypatch.setattr(index, "bm25_ids", bm25)
    assert [p.chunk_id for p in index.search("walrus", query, [cid], top=3)] == serial
    assert overlapped == [True] and threads[0].startswith("hearth-docs-scorer")
    index.close()


class _CancelsOnFirstCall:
    """An embedder that presses Cancel as its first call ends (a user clicking during a long
    file); it counts the texts it embedded."""

    id, dims = "cancel-test", 4

    def __init__(self, control=None) -> None:
        self.control, self.texts = control, 0

    def embed_documents(self, texts):
        self.texts += len(texts)
        if self.control is not None:
            self.control.cancel()
        return np.full((len(texts), self.dims), 0.5, np.float32)

    embed_queries = embed_documents


def test_a_2_gb_file_in_a_folder_gets_its_size_in_a_sentence_and_the_rest_indexes(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    with (folder / "huge.txt").open("wb") as fh:  # sparse: no disk used
        fh.truncate(2 << 30)
    (folder / "small.md").write_text("# Small\n\nA small file.\n")
    index = DocumentIndex(tmp_path / "i.sqlite3", embedder_id="cancel-test", dims=4)
    report = DocumentLibrary(index, _CancelsOnFirstCall()).add([folder], "c")
    assert [Path(p).name for p in report.indexed] == ["small.md"]
    assert report.problems == [
        "huge.txt is 2.1 GB, more than the 268.4 MB Hearth indexes in one file; it was skipped."]
    index.close()


def test_cancel_during_a_long_file_stops_within_it_and_keeps_its_previous_version(tmp_path):
    from app.documents.library import EMBED_SLICE
    from app.jobs import JobCancelled, JobControl

    folder = tmp_path / "docs"
    folder.mkdir()
    book = folder / "book.md"
    book.write_text("# Book\n\nThe first edition.\n")
    index = DocumentIndex(tmp_path / "i.sqlite3", embedder_id="cancel-test", dims=4)
    DocumentLibrary(index, _CancelsOnFirstCall()).add([folder], "c")
    book.write_text("# Book\n\n" + "\n\n".join(
        f"Paragraph {i} of the second edition. " * 20 for i in range(8 * EMBED_SLICE)))
    control = JobControl()
    embedder = _CancelsOnFirstCall(control)
    with pytest.raises(JobCancelled):
        DocumentLibrary(index, embedder).add([folder], "c", control=control)
    assert embedder.texts == EMBED_SLICE  # one slice, not the whole file
    cid = index.collection_id("c")
    [record] = index.files(cid)
    assert record.chunks == 1 and index.bm25_ids("first edition", [cid], 5)
    assert index.bm25_ids("paragraph", [cid], 5) == []
    index.close()


def test_a_file_a_removed_link_led_to_drops_out_and_a_missing_path_makes_no_library(tmp_path):
    folder, elsewhere = tmp_path / "docs", tmp_path / "elsewhere.md"
    folder.mkdir()
    (folder / "own.md").write_text("# Own\n\nA file of the folder.\n")
    elsewhere.write_text("# Zebras\n\nZebras have stripes.\n")
    (folder / "link.md").symlink_to(elsewhere)
    index = DocumentIndex(tmp_path / "i.sqlite3", embedder_id="cancel-test", dims=4)
    library = DocumentLibrary(index, _CancelsOnFirstCall())
    assert sorted(library.add([folder], "c").indexed) == [str(folder / "own.md"), str(elsewhere)]
    (folder / "link.md").unlink()  # the target is still on disk, outside the folder
    assert library.add([folder], "c").removed == [str(elsewhere)]
    assert library.refresh("c").removed == [] and len(index.files(index.collection_id("c"))) == 1
    typo = tmp_path / "no-such-folder"
    report = library.add([typo], "typo")
    assert report.problems == [f"{typo} does not exist (a broken link?)."]
    assert [c["name"] for c in index.collections()] == ["c"]
    library.add([folder, typo], "c")  # a missing path is not kept as one of the roots
    assert index.roots(index.collection_id("c")) == [str(folder)]
    index.close()


def test_a_file_written_by_another_thread_during_a_search_commits_before_or_after_it(
        tmp_path, monkeypatch):
    """An update job re-indexes a file (``replace_file``, on the documents thread) while a
    chat's search runs (on the generation thread): the write waits for the search, which
    answers from the index as it was. Here the write starts while the vectors are scored
    and would commit at once; a search that let it in between its queries looked up chunk
    ids the write had just deleted (a KeyError broke the chat's reply off)."""
    import threading

    from app.documents import index as index_module

    index, cid = _plain_index(tmp_path, ["walrus tusks", "walrus penguin", "penguin",
                                         *(f"filler {n}" for n in range(5))])
    query = np.eye(8, dtype=np.float32)[2] - 0.3 * np.eye(8, dtype=np.float32)[0]
    before = [(p.chunk_id, p.text) for p in index.search("walrus", query, [cid], top=3)]
    top_by_dot = index_module.top_by_dot
    writers: list[threading.Thread] = []

    def rewrite() -> None:
        index.replace_file(cid, "/plain.txt", sha256="y", size=2, kind="text", pages=0,
                           chunks=[Chunk("walrus tusks again", None, "", 0)],
                           vectors=np.eye(8, dtype=np.float32)[:1])

    def vectors(*args):
        if not writers:
            writers.append(threading.Thread(target=rewrite))
            writers[0].start()
            writers[0].join(timeout=0.5)  # committed by now unless the search holds it off
        return top_by_dot(*args)

    monkeypatch.setattr(index_module, "top_by_dot", vectors)
    during = [(p.chunk_id, p.text) for p in index.search("walrus", query, [cid], top=3)]
    writers[0].join(timeout=10)
    assert not writers[0].is_alive()
    assert during == before  # the index as it was when the search began
    assert [p.text for p in index.search("walrus", query, [cid], top=3)] == [
        "walrus tusks again"]
    index.close()
