"""Libraries: named collections of files and folders, kept in step with the disk.

``DocumentLibrary.add(paths, collection)`` walks the paths (bounded), and for each document
file: hash it; unchanged (same sha256 as indexed, by the same recipe) → skip; else parse,
chunk, embed, and write it in one transaction. Files under the collection's folders that are
gone from disk drop out. Each file's failure is a sentence in the report; the rest still
index. The job honours ``app.jobs.JobControl`` (checked between files and every
``EMBED_SLICE`` chunks within one: the file being indexed keeps its previous version, and
what is written stays, whole) and reports ``Progress`` (files done / total).

Each collection keeps the embedder it was made with (``add(..., embedder=ID)``; default the
library's ``embedder``); its files are embedded, and its queries too, by that embedder only.
``set_embedder`` changes it: the collection's vectors go and its files index again.
``embedders(id)`` opens the other embedders when first needed (``OpenLibrary`` owns them).

A file indexed by another recipe (``recipe_of``: the chunking version, the embedder's id and
graph build) than its collection's embedder makes now is *stale*: still searchable, but its
chunks and vectors are not the ones a query is compared with today. ``out_of_date`` counts
them per collection; ``update`` re-indexes only those (no walk, nothing dropped), one file per
transaction, so a cancel or a quit leaves the rest stale for the next ``update``; ``add`` and
``refresh`` re-index the stale files they meet, and ``add`` those of the collection's other
folders too.

``changes`` is the cheap check a library gets on its own (``app/documents/freshness.py``): a
walk of its folders and a stat of each file against the size and mtime recorded when it was
indexed, nothing read; ``sync_files`` then indexes just the files it found changed or new
(the content hash still decides: a touched-but-identical file only gets its new stat).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from app.documents import limits
from app.documents.chunking import (
    CHUNKING_VERSION,
    OVERLAP_CHARS,
    TARGET_CHARS,
    chunk_sections,
    embedding_text,
)
from app.documents.index import FUSION, DocumentIndex, Fusion, Passage
from app.documents.parse import parse_file
from app.documents.sections import DocumentError
from app.documents.walk import walk
from app.errors import HearthError
from app.jobs import JobControl, Progress, ProgressReport
from app.units import format_bytes

#: texts embedded between two checkpoints of a job's control within one file (a few seconds)
EMBED_SLICE = 32


class Embeddings(Protocol):
    id: str
    dims: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass
class Changes:
    """What a walk + stat of a collection's folders found against its index."""

    changed: list[Path] = field(default_factory=list)  # new, or another size / mtime
    gone: list[str] = field(default_factory=list)  # indexed, and no longer there

    def __bool__(self) -> bool:
        return bool(self.changed or self.gone)


@dataclass
class AddReport:
    collection: str
    indexed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # paths whose file could not be indexed
    problems: list[str] = field(default_factory=list)  # sentences, one per problem
    notes: list[str] = field(default_factory=list)  # indexed, with a caveat
    chunks: int = 0
    pages: int = 0
    skipped_types: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in (
            "collection", "indexed", "unchanged", "removed", "failed", "problems", "notes",
            "chunks", "pages", "skipped_types", "seconds")}


def recipe_of(embedder: Embeddings) -> str:
    """What makes a file's chunks and vectors today: "chunking 2 · all-minilm-l6-v2 int8
    layout 4" (an embedder with no ``build`` gives its id alone)."""
    build = getattr(embedder, "build", "")
    return f"chunking {CHUNKING_VERSION} · {embedder.id} {build}".rstrip()


def _embed_in_slices(embedder: Embeddings, texts: list[str],
                     control: JobControl | None) -> np.ndarray:
    """``embed_documents`` a slice at a time with ``control``'s checkpoint between slices, so
    a Cancel (or a pause) during a long file takes effect within a slice, not after the whole
    file: nothing of the file is written then, and its previous version stays. Every embedder
    embeds one text per run, so the vectors are the same as in one call."""
    if control is None or len(texts) <= EMBED_SLICE:
        return embedder.embed_documents(texts)
    parts = []
    for start in range(0, len(texts), EMBED_SLICE):
        if start:
            control.checkpoint()
        parts.append(embedder.embed_documents(texts[start:start + EMBED_SLICE]))
    return np.concatenate(parts)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


class DocumentLibrary:
    def __init__(self, index: DocumentIndex, embedder: Embeddings, *,
                 embedders: Callable[[str], Embeddings] | None = None,
                 chunk_chars: int = TARGET_CHARS, overlap_chars: int = OVERLAP_CHARS) -> None:
        self.index = index
        self.embedder = embedder
        self.embedders = embedders
        self.chunk_chars, self.overlap_chars = chunk_chars, overlap_chars
        #: (collection id, path) → (size, mtime_ns) of a file that could not be indexed, so
        #: ``changes`` does not hand it back until it changes again (this session only)
        self._failed_stats: dict[tuple[int, str], tuple[int, int]] = {}

    def embedder_for(self, embedder_id: str) -> Embeddings:
        """The embedder with this id (the library's own, or one ``embedders`` opens)."""
        if embedder_id == self.embedder.id:
            return self.embedder
        if self.embedders is None:
            raise HearthError(f"The embedder {embedder_id} is not available here.")
        return self.embedders(embedder_id)

    def embedder_of(self, collection: str) -> str:
        """The embedder id of ``collection``'s vectors."""
        return self.index.collection_embedder(self._require(collection))[0]

    def add(self, paths: Sequence[Path], collection: str, *, embedder: str | None = None,
            report: ProgressReport | None = None, control: JobControl | None = None,
            ) -> AddReport:
        """Add files / folders to ``collection`` (made when new, with ``embedder``: default
        the library's) and bring it up to date. A collection made with another embedder is
        refused: ``set_embedder`` changes it (and re-indexes)."""
        cid = self.index.collection_id(collection)
        if cid is None and not any(Path(p).expanduser().exists() for p in paths):
            out = AddReport(collection)  # nothing to add: no empty library is made
            out.problems.extend(walk([Path(p).expanduser() for p in paths]).problems)
            return out
        if cid is None:
            chosen = self.embedder_for(embedder or self.embedder.id)
            cid = self.index.collection_id(collection, create=True, embedder_id=chosen.id,
                                           dims=chosen.dims)
        elif embedder is not None and embedder != self.index.collection_embedder(cid)[0]:
            current = self.index.collection_embedder(cid)[0]
            raise HearthError(
                f"The library {collection!r} uses the embedder {current}, not {embedder}.",
                hint=f"Change it with hearth docs embedder {collection} {embedder} (its files "
                     "are indexed again).")
        roots = [str(Path(p).expanduser().absolute()) for p in paths]
        self.index.add_roots(cid, [r for r in roots if Path(r).exists()])  # not a typo's
        return self._sync(cid, collection, [Path(r) for r in roots], report, control,
                          stale_too=True)

    def refresh(self, collection: str, *, report: ProgressReport | None = None,
                control: JobControl | None = None) -> AddReport:
        """Re-walk the collection's files and folders: changed files re-index, gone ones drop."""
        cid = self._require(collection)
        return self._sync(cid, collection, [Path(r) for r in self.index.roots(cid)], report,
                          control)

    def changes(self, collection: str) -> Changes:
        """The collection's files that may have changed (a size or mtime other than the one
        recorded, or not indexed yet) and those gone from disk: a walk + stat, nothing read.
        A walk a bound stopped reports nothing gone (as ``_sync``)."""
        cid = self._require(collection)
        roots = [Path(r) for r in self.index.roots(cid)]
        found = walk(roots)
        recorded = self.index.file_stats(cid)
        out = Changes()
        for path in found.files:
            try:
                st = path.stat()
            except OSError:
                continue  # gone since the walk: the next check drops it
            stat = (st.st_size, st.st_mtime_ns)
            if recorded.get(str(path)) != stat and self._failed_stats.get(
                    (cid, str(path))) != stat:  # (one that failed as it is now: not again)
                out.changed.append(path)
        if found.complete:
            seen = {str(p) for p in found.files}
            out.gone = [p for p in recorded if p not in seen and not Path(p).is_file()]
        return out

    def drop_gone(self, collection: str, paths: Sequence[str]) -> int:
        """Forget files gone from disk (a quick delete: their passages stop coming back)."""
        return self.index.drop_files(self._require(collection), list(paths)) if paths else 0

    def sync_files(self, collection: str, files: Sequence[Path], *,
                   report: ProgressReport | None = None,
                   control: JobControl | None = None) -> AddReport:
        """Index ``files`` of the collection (those ``changes`` found), one transaction
        each; an unchanged content hash only records the file's new stat."""
        cid = self._require(collection)
        start = time.monotonic()
        out = AddReport(collection)
        files = [Path(p) for p in files if Path(p).is_file()]
        self._index_files(cid, files, self._recipe(cid), out, report, control)
        if report is not None:
            report(Progress(1.0, f"{len(files):,} of {len(files):,} files", state="done"))
        out.seconds = time.monotonic() - start
        return out

    def out_of_date(self, collections: Sequence[str] = (), *,
                    on_disk: bool = True) -> dict[str, int]:
        """The stale files of each collection that has any (default: all; ``on_disk``: only
        those still on disk, which ``update`` can index again). A collection whose embedder
        is not here is left out: it cannot be updated now."""
        names = list(collections) or [c["name"] for c in self.index.collections()]
        found: dict[str, int] = {}
        for name in names:
            cid = self.index.collection_id(name)
            if cid is None:
                continue
            try:
                stale = self.index.stale_files(cid, self._recipe(cid))
            except HearthError:
                continue
            count = sum(1 for p in stale if Path(p).is_file()) if on_disk else len(stale)
            if count:
                found[name] = count
        return found

    def update(self, collection: str, *, report: ProgressReport | None = None,
               control: JobControl | None = None) -> AddReport:
        """Re-index the collection's stale files that are still on disk, one transaction
        each (nothing is walked or dropped; a file gone from disk stays as it was)."""
        cid = self._require(collection)
        start = time.monotonic()
        out = AddReport(collection)
        recipe = self._recipe(cid)
        files = [Path(p) for p in self.index.stale_files(cid, recipe) if Path(p).is_file()]
        self._index_files(cid, files, recipe, out, report, control)
        if report is not None:
            report(Progress(1.0, f"{len(files):,} of {len(files):,} files", state="done"))
        out.seconds = time.monotonic() - start
        return out

    def remove(self, collection: str, paths: Sequence[Path] = ()) -> int:
        """Forget ``paths`` (files or folders added before) or, with none, the collection."""
        cid = self._require(collection)
        if not paths:
            count = len(self.index.files(cid))
            self.index.drop_collection(cid)
            return count
        dropped = 0
        for p in paths:
            dropped += self.index.drop_root(cid, str(Path(p).expanduser().absolute()))
            dropped += self.index.drop_files(cid, [str(Path(p).resolve())])
        return dropped

    def search(self, query: str, collections: Sequence[str] = (), *, top: int = 5,
               mode: str = "hybrid", fusion: Fusion = FUSION) -> list[Passage]:
        names = list(collections) or [c["name"] for c in self.index.collections()]
        ids = [cid for n in names if (cid := self.index.collection_id(n)) is not None]
        missing = [n for n in names if self.index.collection_id(n) is None]
        if missing:
            raise HearthError(f"There is no document collection named {missing[0]!r}.")
        vectors = None if mode == "bm25" else {
            embedder_id: self.embedder_for(embedder_id).embed_queries([query])[0]
            for embedder_id in self.index.by_embedder(ids)}
        return self.index.search(query, vectors, ids, top=top, mode=mode, fusion=fusion)

    def set_embedder(self, collection: str, embedder: str, *,
                     report: ProgressReport | None = None,
                     control: JobControl | None = None) -> AddReport:
        """Give ``collection`` another embedder and index its files again with it (its old
        vectors are never compared with the new embedder's queries: they go first)."""
        cid = self._require(collection)
        chosen = self.embedder_for(embedder)  # opened before anything is dropped
        if self.index.collection_embedder(cid)[0] != chosen.id:
            self.index.set_embedder(cid, chosen.id, chosen.dims)
        return self.refresh(collection, report=report, control=control)

    # -- the sync job -------------------------------------------------------------------

    def _require(self, collection: str) -> int:
        cid = self.index.collection_id(collection)
        if cid is None:
            raise HearthError(f"There is no document collection named {collection!r}.")
        return cid

    def _recipe(self, cid: int) -> str:
        return recipe_of(self.embedder_for(self.index.collection_embedder(cid)[0]))

    def _sync(self, cid: int, name: str, roots: list[Path], report: ProgressReport | None,
              control: JobControl | None, *, stale_too: bool = False) -> AddReport:
        """Index what is under ``roots`` that changed or is stale (``stale_too``: and the
        collection's other stale files still on disk), then drop what is gone."""
        start = time.monotonic()
        out = AddReport(name)
        found = walk(roots)
        out.problems.extend(found.problems)
        out.skipped_types = found.skipped_types
        recipe = self._recipe(cid)
        files = list(found.files)
        if stale_too:
            walked = {str(p) for p in files}
            files += [Path(p) for p in self.index.stale_files(cid, recipe)
                      if p not in walked and Path(p).is_file()]
        self._index_files(cid, files, recipe, out, report, control)
        total = len(files)
        if found.complete:  # a bounded walk that stopped early must not drop what it missed
            seen = {str(p) for p in files}
            under = [str(r.resolve()) for r in roots if r.is_dir()]
            # every root walked: a file not met is gone (one a removed link led to included)
            whole = {str(r) for r in roots} >= set(self.index.roots(cid))
            gone = [f.path for f in self.index.files(cid) if f.path not in seen
                    and (whole or any(f.path.startswith(u.rstrip("/") + "/") for u in under)
                         or not Path(f.path).exists())]
            if gone:
                self.index.drop_files(cid, gone)
                out.removed.extend(gone)
        if report is not None:
            report(Progress(1.0, f"{total:,} of {total:,} files", state="done"))
        out.seconds = time.monotonic() - start
        return out

    def _index_files(self, cid: int, files: Sequence[Path], recipe: str, out: AddReport,
                     report: ProgressReport | None, control: JobControl | None) -> None:
        total = len(files)
        for done, path in enumerate(files):
            if control is not None:
                control.checkpoint()
            if report is not None:
                report(Progress(done / total if total else None,
                                f"{done:,} of {total:,} files: {path.name}"))
            self._one(cid, path, out, recipe, control)

    def _one(self, cid: int, path: Path, out: AddReport, recipe: str,
             control: JobControl | None = None) -> None:
        key = str(path)
        try:
            try:
                st = path.stat()
                size = st.st_size
                if size > limits.MAX_FILE_BYTES:
                    raise DocumentError(f"{path.name} is {format_bytes(size)}, more than the "
                                        f"{format_bytes(limits.MAX_FILE_BYTES)} Hearth indexes "
                                        "in one file; it was skipped.")
                digest = sha256_of(path)
            except OSError as exc:
                raise DocumentError(f"{path.name} cannot be read "
                                    f"({exc.strerror or exc}).") from exc
            if (self.index.file_hash(cid, key) == digest
                    and self.index.file_recipe(cid, key) == recipe):
                self.index.set_stat(cid, key, size, st.st_mtime_ns)  # touched, not changed
                out.unchanged.append(key)
                return
            parsed = parse_file(path)
            chunks = chunk_sections(parsed.sections, target=self.chunk_chars,
                                    overlap=self.overlap_chars)
            if not chunks:
                raise DocumentError(f"{path.name} has no text to index.")
            if sum(len(c.text) for c in chunks) > limits.MAX_TEXT_CHARS:
                raise DocumentError(f"{path.name} has more text than Hearth indexes in one "
                                    "file; it was skipped.")
            embedder = self.embedder_for(self.index.collection_embedder(cid)[0])
            vectors = _embed_in_slices(embedder, [embedding_text(c, path.stem) for c in chunks],
                                       control)
            self.index.replace_file(cid, key, sha256=digest, size=size, kind=parsed.kind,
                                    pages=parsed.pages, chunks=chunks, vectors=vectors,
                                    recipe=recipe, mtime_ns=st.st_mtime_ns)
        except DocumentError as exc:
            with contextlib.suppress(OSError):
                st = path.stat()
                self._failed_stats[(cid, key)] = (st.st_size, st.st_mtime_ns)
            out.failed.append(key)
            out.problems.append(str(exc))
            if self.index.file_hash(cid, key) is not None:  # it was indexed; now it cannot be
                self.index.drop_files(cid, [key])
            return
        out.indexed.append(key)
        out.notes.extend(parsed.notes)
        out.chunks += len(chunks)
        out.pages += parsed.pages
