"""The document index: one SQLite file with collections, files, chunks, an FTS5 table over
the chunks (BM25) and each chunk's vector beside it (float32 blob).

- Writing a file is one transaction (``replace_file``): its old chunks go, its new ones come,
  its row records the content hash. A crash at any point leaves the file as it was before.
- Vector search reads a collection's vectors into one numpy matrix, kept until the index
  changes (``generation`` counts commits), then ranks by dot product (the vectors are unit).
- ``search`` fuses the BM25 ranks and the vector ranks by reciprocal rank fusion, then hands
  out distinct passages only (app/documents/passages.py: overlapping neighbours of one file
  become one, a file in two collections is listed once).
- Each collection (a library) records its embedder and dims: its vectors are only ever
  compared with a query embedded by the same embedder. Collections of different embedders
  searched together give one vector ranking each (``search`` takes a query vector per
  embedder id). Changing a collection's embedder (``set_embedder``) drops its vectors in
  the same transaction; its files are indexed again from its folders.
- Each file records the recipe its chunks and vectors were made by (``files.recipe``:
  the chunking version and the embedder's id and graph build, ``library.recipe_of``). A file
  of another recipe stays searchable (its old chunks, its old vectors) and is *stale*:
  ``stale_files`` lists them, and indexing it again is not skipped for an unchanged hash.
  ``meta.chunking`` records the chunking the index was last opened with; an older one marks
  every file stale (recipe cleared). Schema 3 added the column: an index of schema 1 or 2 is
  migrated in one transaction (its files' recipes unknown, so stale).
- Each file records its size and mtime (``files.mtime_ns``, schema 4) as indexed, so a cheap
  walk + stat finds what may have changed (``file_stats``); the content hash still decides
  whether it is indexed again (``set_stat`` records a touched-but-identical file's new stat).
  Schema 3 and older migrate in the same one transaction (mtime unknown: -1).

sqlite-vec was the other option; this Python's sqlite3 cannot load extensions, and a numpy
matrix scan stays well under the latency goal at 100k chunks of 384 dims (bench_docs.py).
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.documents.chunking import CHUNKING_VERSION, Chunk
from app.errors import HearthError

SCHEMA_VERSION = 4  # 2: collections.embedder / dims; 3: files.recipe; 4: files.mtime_ns
MODES = ("hybrid", "bm25", "vector")
#: a query term in more chunks than this is left out of BM25 when rarer terms remain
COMMON_TERM_CHUNKS = 5000


@dataclass(frozen=True)
class Fusion:
    """Weighted reciprocal rank fusion: a chunk scores ``weight / (k + rank)`` per list."""

    k: float = 60.0  # Cormack et al.'s constant (Elastic's default)
    bm25_weight: float = 1.0
    vector_weight: float = 1.0
    candidates: int = 50  # ranks taken from each retriever before fusion
    #: at most this many of the fused passages from one section (file, page, heading); 0: any
    per_section: int = 0
    #: each list ranks sections, not chunks: a chunk's rank there is its section's (the
    #: section's chunks after its first do not push other sections down that list)
    section_ranks: bool = False
    #: sections fused by their ranks in each list (a section ranks where its best chunk
    #: does); the fused list is the sections in that order, each one's chunks best first
    by_section: bool = False
    #: maximal marginal relevance (Carbonell & Goldstein 1998) over the fused list: each next
    #: passage is the one best at ``mmr`` x its fused score (the first's = 1) minus
    #: (1 - ``mmr``) x its cosine to the closest one already picked (the chunk vectors the
    #: index holds); 1.0: the fused order as it is. Only when two lists or more are fused:
    #: a single list ("bm25", "vector") is that retriever's ranking as it is
    mmr: float = 1.0
    #: each list's first chunk is among the passages handed out (in place of the last
    #: one): fusion never drops what one retriever ranks first because the other does not
    keep_firsts: bool = False
    #: a chunk every list ranks also scores this share of the fused score of the chunk
    #: before it in its section (file, page, heading): the text it continues. An answer that
    #: starts in one chunk and ends in the next ranks with the first one's help; 0: off.
    #: Only when two lists or more are fused
    follow: float = 0.0


#: the fusion Hearth searches with, chosen on the tuning split of bench_docs.py's paraphrase
#: set (bench/docs_questions.py) over k in 1..100, BM25 weight 0.5..2, 20 or 50 candidates and
#: four chunk sizes: a small k trusts each list's first ranks, and BM25 counts a little less
#: than the vectors (questions rarely use the passage's own words). The chunking was chosen
#: again at this fusion on the same split (app/documents/chunking.py). Then, on both tuning
#: splits (paraphrase and headed): maximal marginal relevance at 0.7 with each list's first
#: kept, against a block of one section's chunks that both lists like filling the top five
#: (0.6-0.9 tie on recall@5; 0.65-0.75 lead on MRR@10, 0.7 is their middle). Its
#: held-out splits and the README set, none used to choose, are reported beside it. The
#: section knobs (``per_section``, ``section_ranks``, ``by_section``) stay off: on the headed
#: tuning split no setting of them beat plain fusion. Then ``follow`` (a chunk both lists
#: rank scores a share of the fused score of the chunk before it): recall@5 on both tuning
#: splits holds at shares 0.1-0.3 and falls at 0.35; 0.15, the middle of (0, 0.3], is on
#: (MRR@10 there 0.611 -> 0.599 on the paraphrase split, 0.712 unchanged on the headed one).
FUSION = Fusion(k=5.0, bm25_weight=0.7, mmr=0.7, keep_firsts=True, follow=0.15)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS collections(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created REAL NOT NULL,
    embedder TEXT, dims INTEGER);
CREATE TABLE IF NOT EXISTS roots(
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL, PRIMARY KEY(collection_id, path));
CREATE TABLE IF NOT EXISTS files(
    id INTEGER PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL, kind TEXT NOT NULL,
    pages INTEGER NOT NULL, indexed REAL NOT NULL, recipe TEXT NOT NULL DEFAULT '',
    mtime_ns INTEGER NOT NULL DEFAULT -1, UNIQUE(collection_id, path));
CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL, page INTEGER, heading TEXT NOT NULL, text TEXT NOT NULL,
    vector BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_file ON chunks(file_id);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    heading, text, content='chunks', content_rowid='id', tokenize='porter unicode61');
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, heading, text) VALUES (new.id, new.heading, new.text);
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, heading, text)
        VALUES ('delete', old.id, old.heading, old.text);
END;
"""


@dataclass(frozen=True)
class Passage:
    """One search result: a chunk with its file and its fused score."""

    file: str  # the file's path
    page: int | None
    heading: str
    text: str
    score: float
    chunk_id: int
    ordinal: int = -1  # the chunk's place in its file (-1: not known)

    def location(self) -> str:
        return Chunk(self.text, self.page, self.heading, 0).location()

    def to_dict(self) -> dict:
        return {"file": self.file, "page": self.page, "heading": self.heading,
                "text": self.text, "score": round(self.score, 6)}


@dataclass(frozen=True)
class FileRecord:
    path: str
    sha256: str
    size: int
    kind: str
    pages: int
    chunks: int


class DocumentIndex:
    """The index file. One connection, used from one thread at a time (a lock guards it)."""

    def __init__(self, path: Path, *, embedder_id: str, dims: int) -> None:
        """``embedder_id`` / ``dims``: the embedder of collections made without one named."""
        self.path = path
        self.embedder_id = embedder_id
        self.dims = dims
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise HearthError(f"The document index {path} cannot be opened ({exc}).") from exc
        self._lock = threading.RLock()
        # embedder ids -> (generation, collections, chunk ids, vectors)
        self._matrices: dict[tuple[str, ...], tuple[int, tuple[int, ...], np.ndarray,
                                                    np.ndarray]] = {}
        self._df: dict[str, int] = {}  # a query term's chunk count (capped), per generation
        self._df_generation = -1
        self._scorer_pool: ThreadPoolExecutor | None = None
        self._check_meta(embedder_id, dims)

    def _check_meta(self, embedder_id: str, dims: int) -> None:
        meta = dict(self._db.execute("SELECT key, value FROM meta"))
        if not meta:
            with self._transaction():
                self._db.executemany("INSERT INTO meta VALUES (?, ?)", [
                    ("schema", str(SCHEMA_VERSION)), ("embedder", embedder_id),
                    ("dims", str(dims)), ("generation", "0"),
                    ("chunking", str(CHUNKING_VERSION))])
            return
        if int(meta.get("schema", "0")) > SCHEMA_VERSION:
            raise HearthError(f"The document index {self.path} is from a newer Hearth.")
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(collections)")}
        file_columns = {r[1] for r in self._db.execute("PRAGMA table_info(files)")}
        old_chunking = int(meta.get("chunking", "1")) < CHUNKING_VERSION
        if ("embedder" in columns and "recipe" in file_columns and "mtime_ns" in file_columns
                and not old_chunking):
            return
        with self._transaction() as db:  # every step of the migration, or none
            if "embedder" not in columns:  # schema 1: one embedder for the whole index
                db.execute("ALTER TABLE collections ADD COLUMN embedder TEXT")
                db.execute("ALTER TABLE collections ADD COLUMN dims INTEGER")
                db.execute("UPDATE collections SET embedder = ?, dims = ?",
                           (meta.get("embedder"), int(meta.get("dims", "0"))))
            if "recipe" not in file_columns:  # schema 2: how its files were made is unknown
                db.execute("ALTER TABLE files ADD COLUMN recipe TEXT NOT NULL DEFAULT ''")
            if "mtime_ns" not in file_columns:  # schema 3: the stat is unknown, so checked
                db.execute("ALTER TABLE files ADD COLUMN mtime_ns INTEGER NOT NULL DEFAULT -1")
            if old_chunking:  # cut or embedded another way: every file is stale
                db.execute("UPDATE files SET recipe = ''")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('chunking', ?)",
                       (str(CHUNKING_VERSION),))

    def close(self) -> None:
        if self._scorer_pool is not None:
            self._scorer_pool.shutdown(wait=True)
        self._db.close()

    # -- writing ------------------------------------------------------------------------

    class _Tx:
        def __init__(self, index: DocumentIndex) -> None:
            self.index = index

        def __enter__(self) -> sqlite3.Connection:
            self.index._lock.acquire()
            self.index._db.execute("BEGIN IMMEDIATE")
            return self.index._db

        def __exit__(self, exc_type, exc, tb) -> None:
            db = self.index._db
            try:
                if exc_type is None:
                    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 "
                               "WHERE key = 'generation'")
                    db.execute("COMMIT")
                else:
                    db.execute("ROLLBACK")
            finally:
                self.index._lock.release()

    def _transaction(self) -> DocumentIndex._Tx:
        return DocumentIndex._Tx(self)

    def collection_id(self, name: str, *, create: bool = False, embedder_id: str | None = None,
                      dims: int | None = None) -> int | None:
        """The collection's id; with ``create``, a new one made with ``embedder_id`` / ``dims``
        (default: the index's)."""
        with self._lock:
            row = self._db.execute("SELECT id FROM collections WHERE name = ?",
                                   (name,)).fetchone()
        if row is not None or not create:
            return row[0] if row else None
        with self._transaction() as db:
            return db.execute(
                "INSERT INTO collections(name, created, embedder, dims) VALUES (?, ?, ?, ?)",
                (name, time.time(), embedder_id or self.embedder_id,
                 dims or self.dims)).lastrowid

    def collection_embedder(self, collection: int) -> tuple[str, int]:
        """The embedder id and dims of ``collection``'s vectors."""
        with self._lock:
            row = self._db.execute("SELECT embedder, dims FROM collections WHERE id = ?",
                                   (collection,)).fetchone()
        if row is None:
            raise ValueError(f"no collection {collection}")
        return row[0], int(row[1])

    def set_embedder(self, collection: int, embedder_id: str, dims: int) -> None:
        """Give ``collection`` another embedder: its files and vectors go in the same
        transaction (its folders stay, to be indexed again)."""
        with self._transaction() as db:
            db.execute("DELETE FROM files WHERE collection_id = ?", (collection,))
            db.execute("UPDATE collections SET embedder = ?, dims = ? WHERE id = ?",
                       (embedder_id, dims, collection))

    def add_roots(self, collection: int, roots: Sequence[str]) -> None:
        with self._transaction() as db:
            db.executemany("INSERT OR IGNORE INTO roots VALUES (?, ?)",
                           [(collection, r) for r in roots])

    def roots(self, collection: int) -> list[str]:
        with self._lock:
            return [r for (r,) in self._db.execute(
                "SELECT path FROM roots WHERE collection_id = ? ORDER BY path", (collection,))]

    def file_hash(self, collection: int, path: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT sha256 FROM files WHERE collection_id = ? AND "
                                   "path = ?", (collection, path)).fetchone()
        return row[0] if row else None

    def file_recipe(self, collection: int, path: str) -> str | None:
        """The recipe the file's chunks and vectors were made by (None: not indexed)."""
        with self._lock:
            row = self._db.execute("SELECT recipe FROM files WHERE collection_id = ? AND "
                                   "path = ?", (collection, path)).fetchone()
        return row[0] if row else None

    def stale_files(self, collection: int, recipe: str) -> list[str]:
        """The paths of ``collection``'s files made by another recipe than ``recipe``."""
        with self._lock:
            return [p for (p,) in self._db.execute(
                "SELECT path FROM files WHERE collection_id = ? AND recipe != ? ORDER BY path",
                (collection, recipe))]

    def file_stats(self, collection: int) -> dict[str, tuple[int, int]]:
        """Each of ``collection``'s files: (size, mtime_ns) as recorded when indexed."""
        with self._lock:
            return {p: (size, mtime) for p, size, mtime in self._db.execute(
                "SELECT path, size, mtime_ns FROM files WHERE collection_id = ?",
                (collection,))}

    def set_stat(self, collection: int, path: str, size: int, mtime_ns: int) -> None:
        """Record a file's size and mtime (its content unchanged: nothing else moves)."""
        with self._lock:  # no generation bump: no chunk changed
            self._db.execute("UPDATE files SET size = ?, mtime_ns = ? WHERE collection_id = ? "
                             "AND path = ?", (size, mtime_ns, collection, path))

    def replace_file(self, collection: int, path: str, *, sha256: str, size: int, kind: str,
                     pages: int, chunks: Sequence[Chunk], vectors: np.ndarray,
                     recipe: str = "", mtime_ns: int = -1,
                     on_chunk: Callable[[int], None] | None = None) -> None:
        """The file's chunks and vectors, all or nothing (``recipe``: what made them;
        ``on_chunk``: a test's crash point)."""
        dims = self.collection_embedder(collection)[1]
        if len(chunks) != len(vectors) or (len(vectors) and vectors.shape[1] != dims):
            raise ValueError("one vector of the collection's dims per chunk")
        vectors = np.ascontiguousarray(vectors, np.float32)
        with self._transaction() as db:
            db.execute("DELETE FROM files WHERE collection_id = ? AND path = ?",
                       (collection, path))
            file_id = db.execute(
                "INSERT INTO files(collection_id, path, sha256, size, kind, pages, indexed, "
                "recipe, mtime_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (collection, path, sha256, size, kind, pages, time.time(), recipe,
                 mtime_ns)).lastrowid
            for i, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True)):
                db.execute("INSERT INTO chunks(file_id, ordinal, page, heading, text, vector) "
                           "VALUES (?, ?, ?, ?, ?, ?)",
                           (file_id, chunk.ordinal, chunk.page, chunk.heading, chunk.text,
                            vector.tobytes()))
                if on_chunk is not None:
                    on_chunk(i)

    def drop_files(self, collection: int, paths: Sequence[str]) -> int:
        with self._transaction() as db:
            return sum(db.execute("DELETE FROM files WHERE collection_id = ? AND path = ?",
                                  (collection, p)).rowcount for p in paths)

    def drop_collection(self, collection: int) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM collections WHERE id = ?", (collection,))

    def drop_root(self, collection: int, root: str) -> int:
        """Forget a root and the files under it; the number of files dropped."""
        prefix = root.rstrip("/") + "/"
        with self._transaction() as db:
            db.execute("DELETE FROM roots WHERE collection_id = ? AND path = ?",
                       (collection, root))
            return db.execute(
                "DELETE FROM files WHERE collection_id = ? AND (path = ? OR substr(path, 1, ?) "
                "= ?)", (collection, root, len(prefix), prefix)).rowcount

    # -- reading ------------------------------------------------------------------------

    def collections(self) -> list[dict]:
        with self._lock:
            rows = self._db.execute(
                "SELECT c.name, COUNT(DISTINCT f.id), COUNT(ch.id), c.embedder FROM collections c "
                "LEFT JOIN files f ON f.collection_id = c.id "
                "LEFT JOIN chunks ch ON ch.file_id = f.id GROUP BY c.id ORDER BY c.name"
            ).fetchall()
            roots = self._db.execute("SELECT c.name, r.path FROM roots r JOIN collections c "
                                     "ON c.id = r.collection_id ORDER BY r.path").fetchall()
        return [{"name": n, "files": f, "chunks": c, "embedder": e,
                 "roots": [p for name, p in roots if name == n]} for n, f, c, e in rows]

    def files(self, collection: int) -> list[FileRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT f.path, f.sha256, f.size, f.kind, f.pages, COUNT(ch.id) FROM files f "
                "LEFT JOIN chunks ch ON ch.file_id = f.id WHERE f.collection_id = ? "
                "GROUP BY f.id ORDER BY f.path", (collection,)).fetchall()
        return [FileRecord(*r) for r in rows]

    def generation(self) -> int:
        with self._lock:
            return int(self._db.execute(
                "SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    def search(self, query: str, query_vector: np.ndarray | Mapping[str, np.ndarray] | None,
               collections: Sequence[int], *, top: int = 5, mode: str = "hybrid",
               fusion: Fusion = FUSION) -> list[Passage]:
        """The ``top`` distinct passages: BM25, vector, or both fused by reciprocal rank.

        ``query_vector``: the query embedded by the collections' embedder, or a mapping of
        embedder id to the query embedded by it (one vector ranking per embedder: a
        collection's vectors are only compared with its own embedder's query).

        The whole search holds the index's lock: a file written meanwhile by another thread
        (``replace_file``, ``drop_files``: an update job beside a chat's search) commits
        wholly before or after it, never between its queries (a chunk ranked by one and
        gone from the next broke the search off with a KeyError)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        if not collections:
            return []
        with self._lock:  # reentrant: the helpers below take it too
            return self._search(query, query_vector, collections, top, mode, fusion)

    def _search(self, query: str, query_vector: np.ndarray | Mapping[str, np.ndarray] | None,
                collections: Sequence[int], top: int, mode: str,
                fusion: Fusion) -> list[Passage]:
        ranked: list[tuple[float, list[int]]] = []
        vectors: list[Future] = []
        if mode in ("hybrid", "vector") and query_vector is not None:
            groups = self.by_embedder(collections)
            if not isinstance(query_vector, Mapping):
                if len(groups) > 1:
                    raise ValueError("collections of several embedders need a query vector "
                                     "per embedder")
                query_vector = dict.fromkeys(groups, query_vector)
            # the matrix products run on the scorer thread while FTS5 ranks on this one
            # (both release the GIL): a hybrid query costs about the slower of the two
            run = self._scorer().submit if mode == "hybrid" else _done
            for embedder_id, group in groups.items():
                ids, matrix = self.matrix(group)
                vectors.append(run(top_by_dot, ids, matrix, query_vector[embedder_id],
                                   fusion.candidates))
        if mode in ("hybrid", "bm25"):
            ranked.append((fusion.bm25_weight,
                           self.bm25_ids(query, collections, fusion.candidates)))
        for future in vectors:
            ranked.append((fusion.vector_weight, future.result()))
        from app.documents.passages import CANDIDATES_PER_PASSAGE, distinct

        diverse = fusion.per_section > 0 or fusion.section_ranks or fusion.by_section
        sections = self._sections([c for _, ids in ranked for c in ids]) if diverse else {}
        scores: dict[int, float] = {}
        for weight, ids in ranked:
            ranks = _section_ranks(ids, sections) if fusion.section_ranks else range(len(ids))
            for chunk_id, rank in zip(ids, ranks, strict=True):
                scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (fusion.k + rank + 1)
        if fusion.follow > 0 and len(ranked) > 1:
            both = set(ranked[0][1]).intersection(*(set(ids) for _, ids in ranked[1:]))
            scores = self._followed(scores, both, fusion.follow)
        best = sorted(scores, key=lambda c: -scores[c])
        if fusion.by_section:
            best = _by_section(best, ranked, sections, fusion.k)
        if fusion.per_section > 0:
            best = _capped(best, sections, fusion.per_section)
        if fusion.mmr < 1.0 and len(ranked) > 1 and len(best) > 1:  # hybrid only
            best = _diverse(best, scores, self._vectors(best), fusion.mmr,
                            top * CANDIDATES_PER_PASSAGE)
        best = best[:top * CANDIDATES_PER_PASSAGE]
        kept = distinct(self._passages(best, scores), top)  # no passage twice
        if fusion.keep_firsts and 1 < len(ranked) < top:  # room for the fused ones too
            firsts = list(dict.fromkeys(ids[0] for _, ids in ranked if ids))
            kept = _with_firsts(kept, self._passages(firsts, scores), top)
        return kept

    def _followed(self, scores: dict[int, float], both: set[int],
                  share: float) -> dict[int, float]:
        """``scores`` with each chunk of ``both`` given ``share`` of the fused score of the
        chunk before it in its section, where that one is fused too (``Fusion.follow``)."""
        ids = list(scores)
        marks = ",".join("?" * len(ids))
        with self._lock:
            places = {r[0]: r[1:] for r in self._db.execute(
                f"SELECT id, file_id, page, heading, ordinal FROM chunks WHERE id IN ({marks})",
                ids)}
        at = {place: scores[c] for c, place in places.items()}
        out = dict(scores)
        for c in both:
            file_id, page, heading, ordinal = places[c]
            before = at.get((file_id, page, heading, ordinal - 1))
            if before is not None:
                out[c] += share * before
        return out

    def _vectors(self, ids: list[int]) -> list[np.ndarray]:
        """The stored vectors of the chunks ``ids``, in that order."""
        marks = ",".join("?" * len(ids))
        with self._lock:
            blobs = dict(self._db.execute(
                f"SELECT id, vector FROM chunks WHERE id IN ({marks})", ids))
        return [np.frombuffer(blobs[i], np.float32) for i in ids]

    def _sections(self, ids: list[int]) -> dict[int, tuple]:
        """Each chunk id's section: (file id, page, heading); a chunk under no heading (plain
        text, a PDF without an outline) is a section of its own."""
        if not ids:
            return {}
        unique = list(dict.fromkeys(ids))
        marks = ",".join("?" * len(unique))
        with self._lock:
            return {r[0]: r[1:] if r[3] else (r[0],) for r in self._db.execute(
                f"SELECT id, file_id, page, heading FROM chunks WHERE id IN ({marks})",
                unique)}

    def bm25_ids(self, query: str, collections: Sequence[int], limit: int) -> list[int]:
        """The best ``limit`` chunks by BM25 within ``collections``.

        FTS5 ranks fastest with nothing joined (``ORDER BY rank LIMIT``), so the top rows are
        taken from it alone and filtered by the collections' chunk ids; only when the filter
        leaves too few is the joined (slower) query run."""
        match = self._selective(fts_query(query))
        if not match:
            return []
        wide = limit * 8
        with self._lock:
            rows = [r for (r,) in self._db.execute(
                "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?",
                (match, wide))]
        ids, _ = self.matrix(collections)  # sorted chunk ids: membership by bisection
        found = np.asarray(rows, np.int64)
        at = np.minimum(np.searchsorted(ids, found), max(len(ids) - 1, 0))
        kept = found[ids[at] == found].tolist() if len(ids) else []
        if len(kept) >= limit or len(rows) < wide:
            return kept[:limit]
        marks = ",".join("?" * len(collections))
        with self._lock:
            return [r for (r,) in self._db.execute(
                f"SELECT chunks_fts.rowid FROM chunks_fts JOIN chunks ch ON ch.id = "
                f"chunks_fts.rowid JOIN files f ON f.id = ch.file_id WHERE chunks_fts MATCH ? "
                f"AND f.collection_id IN ({marks}) ORDER BY rank LIMIT ?",
                (match, *collections, limit))]

    def _selective(self, match: str) -> str:
        """``match`` without the terms found in more than ``COMMON_TERM_CHUNKS`` chunks (while
        a rarer one is left): FTS5 scores every chunk a term matches, so in a big library one
        common word costs most of a query, and its IDF adds little to the ranking."""
        terms = match.split(" OR ") if match else []
        if len(terms) < 2:
            return match
        generation = self.generation()
        if self._df_generation != generation:
            self._df, self._df_generation = {}, generation
        counts = {}
        with self._lock:
            for term in terms:
                if term not in self._df:
                    self._df[term] = self._db.execute(
                        "SELECT count(*) FROM (SELECT rowid FROM chunks_fts WHERE chunks_fts "
                        "MATCH ? LIMIT ?)", (term, COMMON_TERM_CHUNKS + 1)).fetchone()[0]
                counts[term] = self._df[term]
        rare = [t for t in terms if counts[t] <= COMMON_TERM_CHUNKS]
        return " OR ".join(rare) if rare else match

    def by_embedder(self, collections: Sequence[int]) -> dict[str, list[int]]:
        """``collections`` grouped by their embedder id (in the order first met)."""
        groups: dict[str, list[int]] = {}
        for cid in collections:
            groups.setdefault(self.collection_embedder(cid)[0], []).append(cid)
        return groups

    def vector_ids(self, query_vector: np.ndarray, collections: Sequence[int],
                   limit: int) -> list[int]:
        ids, matrix = self.matrix(collections)
        return top_by_dot(ids, matrix, query_vector, limit)

    def _scorer(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._scorer_pool is None:
                self._scorer_pool = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="hearth-docs-scorer")
            return self._scorer_pool

    def matrix(self, collections: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The chunk ids and their vectors ([n, dims]) of ``collections``, cached: one set per
        embedder (memory stays bounded by one copy of each embedder's vectors). Collections
        of several embedders give their ids only (BM25's filter), with no vectors."""
        key = tuple(sorted(collections))
        embedders = {self.collection_embedder(c) for c in key}
        slot = tuple(sorted(e for e, _ in embedders))
        generation = self.generation()
        cached = self._matrices.get(slot)
        if cached is not None and cached[0] == generation and cached[1] == key:
            return cached[2], cached[3]
        marks = ",".join("?" * len(key))
        with self._lock:
            rows = self._db.execute(
                f"SELECT ch.id, ch.vector FROM chunks ch JOIN files f ON f.id = ch.file_id "
                f"WHERE f.collection_id IN ({marks}) ORDER BY ch.id", key).fetchall()
        ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        dims = {d for _, d in embedders} or {self.dims}
        if len(dims) == 1 and len(slot) <= 1:
            width = dims.pop()
            matrix = np.frombuffer(b"".join(r[1] for r in rows), np.float32).reshape(
                len(rows), width) if rows else np.zeros((0, width), np.float32)
        else:  # several embedders: ids only, no matrix to stack
            matrix = np.zeros((len(rows), 0), np.float32)
        self._matrices = {s: v for s, v in self._matrices.items() if v[0] == generation}
        self._matrices[slot] = (generation, key, ids, matrix)
        return ids, matrix

    def _passages(self, ids: list[int], scores: dict[int, float]) -> list[Passage]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        with self._lock:
            rows = {r[0]: r for r in self._db.execute(
                f"SELECT ch.id, f.path, ch.page, ch.heading, ch.text, ch.ordinal FROM chunks "
                f"ch JOIN files f ON f.id = ch.file_id WHERE ch.id IN ({marks})", ids)}
        return [Passage(rows[i][1], rows[i][2], rows[i][3], rows[i][4], scores[i], i,
                        rows[i][5]) for i in ids if i in rows]


def _section_ranks(ids: list[int], sections: Mapping[int, tuple]) -> list[int]:
    """Each of ``ids``' rank among the sections of ``ids`` (best first): its section's."""
    order: dict[tuple, int] = {}
    return [order.setdefault(sections.get(c), len(order)) for c in ids]


def _by_section(best: list[int], ranked: list[tuple[float, list[int]]],
                sections: Mapping[int, tuple], k: float) -> list[int]:
    """``best`` (chunk ids, best fused first) regrouped: the sections by their own reciprocal
    rank fusion, each section's chunks in ``best``'s order."""
    fused: dict[tuple, float] = {}
    for weight, ids in ranked:
        order: dict[tuple, int] = {}
        for c in ids:
            order.setdefault(sections.get(c), len(order))
        for section, rank in order.items():
            fused[section] = fused.get(section, 0.0) + weight / (k + rank + 1)
    place = {c: i for i, c in enumerate(best)}
    return sorted(best, key=lambda c: (-fused[sections.get(c)], place[c]))


def _diverse(best: list[int], scores: Mapping[int, float], vectors: list[np.ndarray],
             weight: float, count: int) -> list[int]:
    """The first ``count`` of ``best`` (chunk ids, best fused first) in maximal marginal
    relevance order (``Fusion.mmr``: ``weight``), then the rest as they were. Vectors of
    different widths (another embedder's collection) are never alike (similarity 0)."""
    n = len(best)
    relevance = np.array([scores[c] for c in best]) / scores[best[0]]
    widths: dict[int, list[int]] = {}
    for i, vector in enumerate(vectors):
        widths.setdefault(len(vector), []).append(i)
    blocks = {w: np.stack([vectors[i] for i in rows]) for w, rows in widths.items()}

    def similar(pick: int) -> np.ndarray:
        """Cosines of every candidate to ``pick`` (one matrix-vector product: the picks are
        few, the candidates up to two lists' worth)."""
        width = len(vectors[pick])
        out = np.zeros(n)
        out[widths[width]] = blocks[width] @ vectors[pick]
        return out

    closest = np.zeros(n)  # each one's cosine to the nearest picked one (none yet: 0)
    left = np.ones(n, bool)
    order: list[int] = []
    for _ in range(min(count, n)):
        value = weight * relevance - (1 - weight) * closest
        value[~left] = -np.inf
        pick = int(np.argmax(value))  # a tie: the better fused one
        closest = np.maximum(closest, similar(pick)) if order else similar(pick)
        order.append(pick)
        left[pick] = False
    return [best[i] for i in order] + [c for i, c in enumerate(best) if left[i]]


def _with_firsts(kept: list[Passage], firsts: list[Passage], top: int) -> list[Passage]:
    """``kept`` with each of ``firsts`` that no kept passage holds, in place of the last
    passages that are not one of ``firsts`` (``Fusion.keep_firsts``)."""
    def held(first: Passage, passages: list[Passage]) -> bool:
        text = " ".join(first.text.split())
        return any(p.chunk_id == first.chunk_id or (p.file == first.file and text in
                   " ".join(p.text.split())) for p in passages)

    out = list(kept)
    for first in firsts:
        if held(first, out):
            continue
        if len(out) >= top:  # the last one no first holds makes room
            free = [i for i, p in enumerate(out) if not any(held(f, [p]) for f in firsts)]
            del out[free[-1]]
        out.append(first)
    return out


def _capped(ids: list[int], sections: Mapping[int, tuple], cap: int) -> list[int]:
    """``ids`` (best first) without the ones whose section already has ``cap`` before them."""
    seen: dict[tuple, int] = {}
    kept = []
    for chunk_id in ids:
        section = sections.get(chunk_id)
        if seen.get(section, 0) < cap:
            kept.append(chunk_id)
        seen[section] = seen.get(section, 0) + 1
    return kept


def _done(fn: Callable, *args) -> Future:
    """``fn(*args)`` run here, as a finished future."""
    future: Future = Future()
    future.set_result(fn(*args))
    return future


def top_by_dot(ids: np.ndarray, matrix: np.ndarray, query_vector: np.ndarray,
               limit: int) -> list[int]:
    """The ``limit`` ids whose rows have the largest dot product with the query, best first
    (one matrix-vector product, a partial sort, then a sort of the few kept)."""
    if not len(ids):
        return []
    sims = matrix @ np.asarray(query_vector, np.float32).reshape(-1)
    k = min(limit, len(ids))
    top = np.argpartition(-sims, k - 1)[:k]
    return [int(ids[i]) for i in top[np.argsort(-sims[top], kind="stable")]]


_WORD = re.compile(r"\w+", re.UNICODE)
#: English function words: they match nearly every chunk, so they slow BM25 and rank nothing
_STOP = """a an and are as at be by can could did do does for from had has have how i if in
into is it its may me my no not of on or our should so than that the their them then there
these they this to was we were what when where which who why will with would you your"""
STOPWORDS = frozenset(_STOP.split())


def fts_query(text: str) -> str:
    """The user's words as an FTS5 query: each one quoted (no syntax gets through), OR'd;
    function words are left out unless the query has nothing else."""
    words = [w for w in _WORD.findall(text.lower()) if len(w) > 1 or w.isdigit()]
    content = [w for w in words if w not in STOPWORDS] or words
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(content))
