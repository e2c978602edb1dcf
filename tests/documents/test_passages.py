"""A search never hands out the same passage twice: over a real index (SQLite FTS5 + vectors,
the real chunker), neighbouring chunks of one file that say the same thing become one
passage, and a file indexed in two collections is listed once. The embedder is a small
bag-of-words stand-in, so this runs without the starter embedder's wheel."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from app.documents.chunking import OVERLAP_CHARS, TARGET_CHARS, chunk_sections
from app.documents.index import DocumentIndex
from app.documents.library import DocumentLibrary
from app.documents.parse import parse_file
from app.documents.passages import MERGE_LIMIT

DIMS = 64


class Words:
    id = "words-test"
    dims = DIMS

    def embed_documents(self, texts):
        return self._vectors(texts)

    def embed_queries(self, texts):
        return self._vectors(texts)

    def _vectors(self, texts):
        out = np.zeros((len(texts), DIMS), np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, zlib.crc32(word.strip(".,").encode()) % DIMS] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


@pytest.fixture
def library(tmp_path):
    index = DocumentIndex(tmp_path / "index.sqlite3", embedder_id=Words.id, dims=DIMS)
    yield DocumentLibrary(index, Words())
    index.close()


def _filled(sentences, limit: int) -> str:
    """As many of ``sentences`` (cycled) as fit in ``limit`` characters, space-joined."""
    text, i = "", 0
    while len(f"{text} {sentences[i % len(sentences)]}".strip()) <= limit:
        text = f"{text} {sentences[i % len(sentences)]}".strip()
        i += 1
    return text


SHORT = "Water the tomatoes every evening in July."
#: long enough that it does not fit beside SHORT in one chunk, short enough to be one piece
LONG = _filled(["Tomatoes ripen on the vine when the nights stay warm; pick them when they "
                "give a little under the thumb.", "Keep the soil moist."], TARGET_CHARS - 20)


def _texts(passages) -> list[str]:
    return [p.text for p in passages]


def test_a_short_chunk_repeated_at_the_start_of_the_next_is_one_passage(library, tmp_path):
    garden = tmp_path / "garden.txt"
    garden.write_text(f"{SHORT}\n\n{LONG}\n", encoding="utf-8")
    chunks = chunk_sections(parse_file(garden).sections)
    assert len(SHORT) + len(LONG) + 2 > TARGET_CHARS
    assert [c.text for c in chunks] == [SHORT, f"{SHORT}\n\n{LONG}"]  # the overlap
    library.add([garden], "home")
    found = library.search("water the tomatoes every evening", ["home"], top=5)
    assert _texts(found) == [f"{SHORT}\n\n{LONG}"]  # once, with all that both say
    for mode in ("bm25", "vector"):
        assert len(library.search("water the tomatoes every evening", ["home"], top=5,
                                  mode=mode)) == 1


def test_a_file_in_two_collections_is_one_passage(library, tmp_path):
    note = tmp_path / "kettle.txt"
    note.write_text("Descale the kettle monthly with citric acid.\n", encoding="utf-8")
    library.add([note], "home")
    library.add([note], "chat-1")  # attached to a chat too
    found = library.search("descale the kettle", ["home", "chat-1"], top=5)
    assert _texts(found) == ["Descale the kettle monthly with citric acid."]


def test_neighbours_sharing_most_of_the_shorter_become_one_passage_others_stay(library,
                                                                                tmp_path):
    first = _filled([f"Step {i}: loosen the pump housing bolt number {i} slowly."
                     for i in range(1, 40)], TARGET_CHARS - 17) + " Keep every bolt."
    while len(first) + len(" Go on.") <= TARGET_CHARS:
        first += " Go on."
    assert TARGET_CHARS - 30 < len(first) <= TARGET_CHARS
    tail_note = "Then refit the pump housing."  # the next chunk: the tail, then this
    pump = tmp_path / "pump.txt"
    pump.write_text(f"{first}\n\n{tail_note}\n", encoding="utf-8")
    chunks = [c.text for c in chunk_sections(parse_file(pump).sections)]
    assert len(chunks) == 2 and chunks[1].endswith(tail_note)
    shared = len(chunks[1]) - len(tail_note) - 2
    assert OVERLAP_CHARS - 20 < shared <= OVERLAP_CHARS  # most of the second chunk
    library.add([pump], "home")
    (passage,) = library.search("pump housing bolt", ["home"], top=5)
    assert passage.text == f"{first}\n\n{tail_note}" and len(passage.text) <= MERGE_LIMIT
    # ordinary overlap (the tail of a full chunk at the start of another full one) stays two
    second = _filled([f"Stage {i}: refit the pump housing bolt number {i} firmly."
                      for i in range(1, 40)], TARGET_CHARS - 100)
    pump.write_text(f"{first}\n\n{second}\n", encoding="utf-8")
    library.refresh("home")
    assert len(library.search("pump housing bolt", ["home"], top=5)) == 2
