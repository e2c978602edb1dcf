"""The fused top five is diverse: a block of neighbouring chunks of one section, which both
lists rank high, does not crowd out a chunk only one list ranks first (app/documents/index.py:
``Fusion.mmr`` and ``Fusion.keep_firsts``, on in ``FUSION``; the opt-in section knobs
``per_section`` / ``section_ranks`` / ``by_section``)."""

from __future__ import annotations

import numpy as np

from app.documents.chunking import Chunk
from app.documents.index import FUSION, DocumentIndex, Fusion

DIMS = 16
QUERY = "How large may a request body be?"
ANSWER = "A request body is limited to 4 MiB."


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def _crowded_index(tmp_path, *, heading: str = "Server") -> tuple[DocumentIndex, int]:
    """A guide whose ``heading`` section has twelve neighbouring chunks that both lists rank
    high (the query's word "request", vectors next to the query's), its "Limits" section the
    answer (BM25's first, the vectors' last), and sixty unheaded notes the vectors rank
    between them."""
    index = DocumentIndex(tmp_path / "fusion.sqlite3", embedder_id="plain", dims=DIMS)
    cid = index.collection_id("c", create=True)
    axis = np.eye(DIMS, dtype=np.float32)
    block = [Chunk(f"The server takes each request from its queue, step {j}.", None, heading, j)
             for j in range(12)]
    chunks = [*block, Chunk(ANSWER, None, "Limits", 12)]
    vectors = [_unit(axis[0] + 0.02 * j * axis[1]) for j in range(12)] + [axis[DIMS - 1]]
    index.replace_file(cid, "/guide.md", sha256="g", size=1, kind="markdown", pages=0,
                       chunks=chunks, vectors=np.stack(vectors))
    notes = [Chunk(f"Unrelated note number {j} about gardening.", None, "", j)
             for j in range(60)]
    index.replace_file(cid, "/notes.txt", sha256="n", size=1, kind="text", pages=0,
                       chunks=notes, vectors=np.stack(
                           [_unit(axis[0] + (1.5 + 0.01 * j) * axis[2 + j % 12])
                            for j in range(60)]))
    return index, cid


def _top(index: DocumentIndex, cid: int, fusion: Fusion) -> list[str]:
    return [p.text for p in index.search(QUERY, np.eye(DIMS, dtype=np.float32)[0], [cid],
                                         top=5, fusion=fusion)]


def test_the_lists_rank_the_answer_first_and_last(tmp_path) -> None:
    index, cid = _crowded_index(tmp_path)
    assert _top(index, cid, FUSION)  # the index answers at all
    bm25 = [p.text for p in index.search(QUERY, None, [cid], top=1, mode="bm25")]
    vector = [p.text for p in index.search(QUERY, np.eye(DIMS, dtype=np.float32)[0], [cid],
                                           top=50, mode="vector")]
    assert bm25 == [ANSWER]
    assert ANSWER not in vector  # past the vector list's fifty candidates
    index.close()


def test_a_block_of_one_section_crowds_the_answer_out_of_plain_fusion(tmp_path) -> None:
    index, cid = _crowded_index(tmp_path)
    plain = Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight)
    top = _top(index, cid, plain)
    assert ANSWER not in top
    assert all(t.startswith("The server") for t in top)
    index.close()


def test_a_section_cap_lets_the_answer_in(tmp_path) -> None:
    index, cid = _crowded_index(tmp_path)
    top = _top(index, cid, Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight, per_section=2))
    assert ANSWER in top
    assert sum(t.startswith("The server") for t in top) == 2
    index.close()


def test_section_ranks_with_a_cap_of_one_keep_one_chunk_of_the_block(tmp_path) -> None:
    index, cid = _crowded_index(tmp_path)
    top = _top(index, cid, Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight, per_section=1,
                                  section_ranks=True))
    assert ANSWER in top
    assert sum(t.startswith("The server") for t in top) == 1
    # each note ranks 2nd, 3rd... among the vector list's sections, not 13th... behind the
    # block's chunks: the first note comes before the answer
    assert top[1].startswith("Unrelated note")
    # section ranks alone: the block's chunks share its first rank in each list and stay
    alone = _top(index, cid, Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight,
                                    section_ranks=True))
    assert all(t.startswith("The server") for t in alone)
    index.close()


def test_sections_fused_as_sections_rank_by_their_own_places(tmp_path) -> None:
    """Fused as sections, each unheaded note ranks where it stands among the vector list's
    sections (2nd, 3rd...: above the answer, BM25's 1st at 0.7 weight); fused as chunks, the
    notes rank behind the block's twelve chunks (13th...), below the answer."""
    index, cid = _crowded_index(tmp_path)
    as_sections = _top(index, cid, Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight,
                                          per_section=1, by_section=True))
    as_chunks = _top(index, cid, Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight,
                                        per_section=1))
    assert as_sections[0].startswith("The server") and as_chunks[0].startswith("The server")
    assert as_sections[1].startswith("Unrelated note") and ANSWER in as_sections
    assert as_chunks[1] == ANSWER
    index.close()


def test_chunks_under_no_heading_are_sections_of_their_own(tmp_path) -> None:
    """A plain text file has no headings: a cap per section must not become a cap per file
    (the paraphrase set's docstrings lost a third of their recall that way)."""
    index, cid = _crowded_index(tmp_path)
    capped = Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight, per_section=1)
    found = index.search("gardening note", np.eye(DIMS, dtype=np.float32)[2], [cid], top=5,
                         fusion=capped)
    assert len(found) == 5
    assert all(p.file == "/notes.txt" for p in found)
    index.close()


def test_each_lists_first_chunk_is_kept_in_place_of_the_last(tmp_path) -> None:
    index, cid = _crowded_index(tmp_path)
    plain = Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight)
    kept = Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight, keep_firsts=True)
    before, after = _top(index, cid, plain), _top(index, cid, kept)
    assert after == [*before[:4], ANSWER]  # BM25's first; the vectors' first is before[0]
    index.close()


def test_maximal_marginal_relevance_breaks_up_a_block_of_near_duplicates(tmp_path) -> None:
    """The block's vectors are all but one vector: after its best chunk, the next ones are
    worth less than a chunk unlike it (the answer: BM25's first, at half the block's
    score)."""
    index, cid = _crowded_index(tmp_path)
    diverse = _top(index, cid, Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight, mmr=0.7))
    assert diverse[0] == "The server takes each request from its queue, step 0."
    assert diverse[1] == ANSWER
    assert sum(t.startswith("The server") for t in diverse) == 4
    # all relevance, no diversity: the fused order
    assert _top(index, cid, Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight, mmr=1.0)) == \
        _top(index, cid, Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight))
    index.close()


def test_the_default_fusion_lets_the_answer_in_and_leaves_single_lists_alone(tmp_path) -> None:
    """``FUSION`` (chosen on the tuning splits, bench/docs_questions.py) diversifies the fused
    list and keeps each list's first; "bm25" and "vector" stay each retriever's own ranking."""
    index, cid = _crowded_index(tmp_path)
    top = _top(index, cid, FUSION)
    assert ANSWER in top and sum(t.startswith("The server") for t in top) < 5
    query = np.eye(DIMS, dtype=np.float32)[0]
    plain = Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight)
    for mode in ("bm25", "vector"):
        assert [p.text for p in index.search(QUERY, query, [cid], top=5, mode=mode)] == [
            p.text for p in index.search(QUERY, query, [cid], top=5, mode=mode, fusion=plain)]
    index.close()


CONTINUED = "It takes at most 4 MiB, and the limit counts the headers too."


def _split_answer_index(tmp_path, lead: str = "A request body: ") -> tuple[DocumentIndex,
                                                                           int]:
    """An answer cut in two: "Limits" #0 (both lists' first) says what it is about, #1 (the
    words "request body" once more, a vector near the query) ends it, and eight
    notes (a file each) rank between them in both lists, none continuing a fused chunk."""
    index = DocumentIndex(tmp_path / "follow.sqlite3", embedder_id="plain", dims=DIMS)
    cid = index.collection_id("c", create=True)
    axis = np.eye(DIMS, dtype=np.float32)
    limits = [Chunk("How large may a request body be? The request body limit is set "
                    "per server.", None, "Limits", 0),
              Chunk(f"{lead}{CONTINUED}", None, "Limits", 1)]
    index.replace_file(cid, "/guide.md", sha256="g", size=1, kind="markdown", pages=0,
                       chunks=limits, vectors=np.stack(
                           [axis[0], _unit(axis[0] + 1.2 * axis[1])]))
    for j in range(8):  # one file each: no note continues another
        index.replace_file(cid, f"/note{j}.txt", sha256=f"n{j}", size=1, kind="text", pages=0,
                           chunks=[Chunk(f"A request body note {j}, about request body "
                                         "logging.", None, "", 0)],
                           vectors=_unit(axis[0] + (0.5 + 0.05 * j) * axis[2 + j])[None])
    return index, cid


def _fused(index: DocumentIndex, cid: int, follow: float, mode: str = "hybrid") -> list[str]:
    fusion = Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight, follow=follow)
    return [p.text for p in index.search(QUERY, np.eye(DIMS, dtype=np.float32)[0], [cid],
                                         top=5, mode=mode, fusion=fusion)]


def test_a_chunk_that_continues_a_fused_one_ranks_with_its_help(tmp_path) -> None:
    index, cid = _split_answer_index(tmp_path)
    plain = _fused(index, cid, 0.0)
    assert plain[0].startswith("How large") and not any(CONTINUED in t for t in plain)
    followed = _fused(index, cid, 0.5)
    assert followed[0].startswith("How large") and CONTINUED in followed[1]
    index.close()


def test_follow_leaves_single_lists_alone(tmp_path) -> None:
    index, cid = _split_answer_index(tmp_path)
    for mode in ("bm25", "vector"):
        assert _fused(index, cid, 0.5, mode) == _fused(index, cid, 0.0, mode)
    index.close()


def test_only_a_chunk_both_lists_rank_is_helped(tmp_path) -> None:
    """Without the query's words the continuation is the vectors' 10th and not in BM25's
    list: what the chunk before it scores does not lift it."""
    index, cid = _split_answer_index(tmp_path, lead="")
    assert not any(CONTINUED in t for t in _fused(index, cid, 0.0, "bm25"))
    vector = index.search(QUERY, np.eye(DIMS, dtype=np.float32)[0], [cid], top=10,
                          mode="vector")
    assert CONTINUED in vector[9].text
    assert not any(CONTINUED in t for t in _fused(index, cid, 0.5))
    index.close()
