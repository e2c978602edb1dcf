"""Every Hub embedder of the embedder catalog, as its repo is published, through plan ->
download -> load -> embed -> index -> search, and /v1/embeddings with the official client.

The fake Hub serves each repo from its replica (tests/documents/embedder_replicas.py): the
published listing and config facts, a tiny random-weight encoder of the published input /
output signature at the entry's dims, a tiny tokenizer.json. Each vector Hearth computes is
compared with numpy's pooling of the same graph's raw ORT outputs (CLS, mean, or the graph's
own pooled output) on the prefixed text, and the wrong pooling and the missing prefix are
shown to give other vectors, so a wrong pooling or prefix fails here.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnxruntime as ort
import openai
import pytest
from tokenizers import Tokenizer

from app.documents.chunking import Chunk, embedding_text
from app.documents.embedders import EmbedderStore
from app.documents.embedding import EmbeddingThread, TextEmbedder
from app.documents.index import DocumentIndex
from app.documents.library import DocumentLibrary
from app.engine.engine import Engine
from app.errors import DownloadError, HearthError
from app.jobs import JobCancelled, JobControl
from app.models.embedder_catalog import load_embedder_catalog
from app.server.app import HearthApi
from app.server.config import ServerConfig
from app.server.embeddings import EmbeddingService
from app.server.executor import ThreadEngineExecutor
from app.server.runner import ServerRunner
from tests.documents.embedder_replicas import load_replicas, replica_repo
from tests.models.hub_server import FakeHub, allow_hub_requests

CATALOG = load_embedder_catalog()
REPLICAS = load_replicas()
ENTRIES = [pytest.param(e, id=e.id) for e in CATALOG]
TEXTS = ["The little kettle on the hearth began to sing.",
         "A language model reads a sequence of tokens and predicts the next one, keeping a "
         "cache of keys and values for every layer.",
         "Good software explains what went wrong."]


def test_every_embedder_repo_has_a_replica_and_every_entry_its_evidence():
    assert {e.repo for e in CATALOG} == set(REPLICAS)
    assert {e.id for e in CATALOG} == {"bge-small-en-v1.5", "multilingual-e5-small",
                                       "embeddinggemma-300m", "nomic-embed-text-v1.5"}
    for entry in CATALOG:
        assert entry.evidence and entry.reconstructed, entry.id
        assert REPLICAS[entry.repo].data["evidence"], entry.id
        assert entry.graph in REPLICAS[entry.repo].data["graphs"], entry.id


def _store(tmp_path, hub, **options) -> EmbedderStore:
    return EmbedderStore(tmp_path / "embedders", endpoint=hub.url,
                         staging_root=tmp_path / "staging",
                         downloader_options={"retries": 1, **options})


def _reference(folder, entry, texts: list[str], pooling: str | None = None) -> np.ndarray:
    """numpy's pooling of the raw graph's outputs, text by text (no padding)."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    session = ort.InferenceSession(str(folder / entry.graph), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    pooling = pooling or entry.pooling
    rows = []
    for text in texts:
        ids = np.array([tokenizer.encode(text).ids], np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                "token_type_ids": np.zeros_like(ids)}
        outputs = dict(zip([o.name for o in session.get_outputs()],
                           session.run(None, {n: feed[n] for n in names}), strict=True))
        if pooling == "pooled":
            vector = outputs["sentence_embedding"][0]
        elif pooling == "cls":
            vector = outputs["last_hidden_state"][0, 0]
        else:
            vector = outputs["last_hidden_state"][0].mean(axis=0)
        rows.append(vector / np.linalg.norm(vector))
    return np.array(rows, np.float32)


def _document_text(entry, docs, path: str) -> str:
    """What the embedder reads for a one-chunk note file: the entry's document prefix, the
    chunk's header (the file's title) and its text."""
    file = docs / path.rsplit("/", 1)[1]
    chunk = Chunk(text=file.read_text().strip(), page=None, heading="", ordinal=0)
    return entry.document_prefix + embedding_text(chunk, file.stem)


def _apart(a: np.ndarray, b: np.ndarray) -> float:
    """The least distance between matching rows (unit vectors; rounding moves one < 1e-3)."""
    return float(np.linalg.norm(a - b, axis=1).min())


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_hub_embedder_plans_downloads_loads_embeds_indexes_and_searches(
        monkeypatch, tmp_path, entry):
    allow_hub_requests(monkeypatch)
    replica = REPLICAS[entry.repo]
    repo = replica_repo(replica, entry.dims)
    progress = []
    with FakeHub() as hub:
        hub.add(repo)
        store = _store(tmp_path, hub)
        plan = store.plan(entry.id)
        assert plan.revision == repo.commit and plan.repo == entry.repo
        installed = store.download(plan, progress=progress.append)
        fetched = {path.split("/resolve/", 1)[1].split("/", 1)[1]
                   for method, path, _ in hub.file_requests() if method == "GET"}
    selected = {p for p in replica.files if entry.variant.selects(p)}
    assert fetched == selected  # the graph, its data and the tokenizer; no other precision
    assert {entry.graph, "tokenizer.json"} <= fetched
    assert progress[-1].state == "done" and progress[-1].bytes_done == progress[-1].bytes_total
    assert installed.manifest.source["revision"] == repo.commit
    folder = store.folder(entry.id)
    meta = json.loads((folder / "embedder.json").read_text())
    assert (meta["pooling"], meta["query_prefix"], meta["document_prefix"]) == (
        entry.pooling, entry.query_prefix, entry.document_prefix)

    embedder = TextEmbedder(folder, threads=1)
    assert embedder.inputs == replica.data["signature"]["inputs"]  # token_type_ids as declared
    assert embedder.max_tokens == entry.max_tokens and embedder.dims == entry.dims
    # one batch of three lengths (padded) equals numpy's pooling of each text alone
    queries = embedder.embed_queries(TEXTS)
    documents = embedder.embed_documents(TEXTS)
    np.testing.assert_allclose(
        queries, _reference(folder, entry, [entry.query_prefix + t for t in TEXTS]), atol=2e-5)
    np.testing.assert_allclose(
        documents, _reference(folder, entry, [entry.document_prefix + t for t in TEXTS]),
        atol=2e-5)
    other = {"cls": "mean", "mean": "cls", "pooled": "mean"}[entry.pooling]
    wrong = _reference(folder, entry, [entry.query_prefix + t for t in TEXTS], other)
    assert _apart(queries, wrong) > 0.01  # the other pooling gives other vectors
    assert _apart(queries, _reference(folder, entry, TEXTS)) > 0.01  # the prefix counts
    if entry.query_prefix != entry.document_prefix:
        assert _apart(queries, documents) > 0.01

    # index with the document prefix, search with the query prefix, per the entry
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(TEXTS):
        (docs / f"note{i}.txt").write_text(text + "\n")
    with EmbeddingThread(folder, threads=1) as thread:
        index = DocumentIndex(tmp_path / "index.sqlite3", embedder_id=thread.id,
                              dims=thread.dims)
        library = DocumentLibrary(index, thread)
        report = library.add([docs], "notes")
        assert len(report.indexed) == 3 and not report.failed
        cid = index.collection_id("notes")
        assert index.collection_embedder(cid) == (entry.id, entry.dims)
        stored = {r.path: _reference(folder, entry, [_document_text(entry, docs, r.path)])[0]
                  for r in index.files(cid)}
        question = "what does the kettle do"
        found = library.search(question, ["notes"], top=3, mode="vector")
        ids, matrix = index.matrix([cid])
        for passage in found:  # each file's vector: its header and text, prefixed
            row = matrix[list(ids).index(passage.chunk_id)]
            np.testing.assert_allclose(row, stored[passage.file], atol=2e-5)
        query = _reference(folder, entry, [entry.query_prefix + question])[0]
        expected = sorted(stored, key=lambda p: -float(stored[p] @ query))
        assert [p.file for p in found] == expected  # ranked by the query-prefixed vector
        index.close()


@pytest.mark.parametrize("entry", ENTRIES)
def test_v1_embeddings_serves_a_hub_embedder_by_its_id(monkeypatch, tmp_path, entry,
                                                        gqa_model_dir):
    allow_hub_requests(monkeypatch)
    with FakeHub() as hub:
        hub.add(replica_repo(REPLICAS[entry.repo], entry.dims))
        store = _store(tmp_path, hub)
        store.download(store.plan(entry.id))
    folder = store.folder(entry.id)
    executor = ThreadEngineExecutor(lambda: Engine.load(gqa_model_dir))
    executor.start()
    service = EmbeddingService(entry.id, lambda: folder, threads=1)
    runner = ServerRunner(HearthApi(executor, ServerConfig(port=0), service))
    try:
        client = openai.OpenAI(base_url=runner.start().base_url, api_key="unused",
                               max_retries=0)
        assert entry.id in [m.id for m in client.models.list().data]
        reply = client.embeddings.create(model=entry.id, input=TEXTS)
        vectors = np.array([d.embedding for d in reply.data], np.float32)
        assert vectors.shape == (3, entry.dims)
        # the API embeds texts as given: no prefix (a client that wants one sends it)
        np.testing.assert_allclose(vectors, _reference(folder, entry, TEXTS), atol=2e-5)
    finally:
        assert runner.stop()
        assert executor.close()
        service.close()


@pytest.mark.parametrize("missing", ["onnx/model.onnx", "onnx/model.onnx_data",
                                     "tokenizer.json"])
def test_a_listing_without_a_needed_file_is_refused_before_any_download(
        monkeypatch, tmp_path, missing):
    allow_hub_requests(monkeypatch)
    entry = CATALOG.get("embeddinggemma-300m")
    repo = replica_repo(REPLICAS[entry.repo], entry.dims)
    del repo.files[missing]
    with FakeHub() as hub:
        hub.add(repo)
        store = _store(tmp_path, hub)
        with pytest.raises(HearthError, match=f"has no {missing}, which the embedder"):
            store.plan(entry.id)
        assert hub.file_requests() == []
    assert store.get(entry.id) is None


def test_a_cut_download_resumes_and_a_cancelled_one_installs_nothing(monkeypatch, tmp_path):
    allow_hub_requests(monkeypatch)
    entry = CATALOG.get("bge-small-en-v1.5")
    repo = replica_repo(REPLICAS[entry.repo], entry.dims)
    size = len(repo.files[entry.graph])
    with FakeHub() as hub:
        hub.add(repo)
        cancel = JobControl()
        cancel.cancel()
        store = _store(tmp_path, hub)
        with pytest.raises(JobCancelled):
            store.download(store.plan(entry.id), control=cancel)
        assert store.get(entry.id) is None
        hub.faults.cut_at[entry.graph] = size // 2
        with pytest.raises(DownloadError):
            _store(tmp_path, hub, retries=0).download(store.plan(entry.id))
        assert store.get(entry.id) is None
        store.download(store.plan(entry.id))
        assert hub.served(entry.graph) < size * 1.6  # resumed from the cut, not restarted
    assert (store.folder(entry.id) / entry.graph).read_bytes() == repo.files[entry.graph]


def _download_all(tmp_path, hub, ids: list[str]) -> EmbedderStore:
    store = _store(tmp_path, hub)
    for embedder_id in ids:
        entry = CATALOG.get(embedder_id)
        hub.add(replica_repo(REPLICAS[entry.repo], entry.dims))
        store.download(store.plan(embedder_id))
    return store


def test_changing_a_librarys_embedder_indexes_it_again_with_the_new_one(monkeypatch, tmp_path):
    allow_hub_requests(monkeypatch)
    with FakeHub() as hub:
        store = _download_all(tmp_path, hub, ["bge-small-en-v1.5", "multilingual-e5-small"])
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(TEXTS):
        (docs / f"note{i}.txt").write_text(text + "\n")
    copies = tmp_path / "copies"  # the same texts in other files (one file is listed once)
    shutil.copytree(docs, copies)
    e5 = CATALOG.get("multilingual-e5-small")
    opened = {}

    def open_embedder(embedder_id: str) -> EmbeddingThread:  # as OpenLibrary: once per id
        if embedder_id not in opened:
            opened[embedder_id] = EmbeddingThread(store.folder(embedder_id), threads=1)
        return opened[embedder_id]

    with EmbeddingThread(store.folder("bge-small-en-v1.5"), threads=1) as bge:
        index = DocumentIndex(tmp_path / "index.sqlite3", embedder_id=bge.id, dims=bge.dims)
        library = DocumentLibrary(index, bge, embedders=open_embedder)
        library.add([docs], "notes")
        library.add([copies], "other", embedder=e5.id)
        assert library.embedder_of("notes") == "bge-small-en-v1.5"
        assert library.embedder_of("other") == e5.id
        with pytest.raises(HearthError, match=r"uses the embedder bge-small-en-v1\.5, not"):
            library.add([docs], "notes", embedder=e5.id)
        mixed = library.search("kettle", ["notes", "other"], top=6, mode="vector")
        assert len(mixed) == 6 and set(opened) == {e5.id}  # a query vector per embedder
        report = library.set_embedder("notes", e5.id)
        assert len(report.indexed) == 3 and report.unchanged == []  # all indexed again
        cid = index.collection_id("notes")
        assert index.collection_embedder(cid) == (e5.id, e5.dims)
        folder = store.folder(e5.id)
        found = library.search("what does the kettle do", ["notes", "other"], top=6,
                               mode="vector")
        ids, matrix = index.matrix([cid])
        for passage in (p for p in found if p.chunk_id in set(ids.tolist())):
            np.testing.assert_allclose(matrix[list(ids).index(passage.chunk_id)], _reference(
                folder, e5, [_document_text(e5, docs, passage.file)])[0], atol=2e-5)
        assert len(found) == 6
        index.close()
    for thread in opened.values():
        thread.close()


def test_a_library_of_a_hub_embedder_needs_no_starter_wheel(monkeypatch, tmp_path):
    from app.documents import embedders, starter_embedder
    from app.documents.open import OpenLibrary

    allow_hub_requests(monkeypatch)
    monkeypatch.setattr(embedders, "find_embedder_wheel", lambda: None)
    monkeypatch.setattr(starter_embedder, "find_embedder_wheel", lambda: None)
    with FakeHub() as hub:
        store = _download_all(tmp_path, hub, ["nomic-embed-text-v1.5"])
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tea.txt").write_text("Brew green tea at 80 degrees.\n")
    opened = OpenLibrary(tmp_path / "index.sqlite3", store=store, threads=1)
    try:
        library = opened.library
        report = library.add([docs], "tea", embedder="nomic-embed-text-v1.5")
        assert len(report.indexed) == 1
        assert library.search("green tea", ["tea"], top=1)[0].file == str(docs / "tea.txt")
        with pytest.raises(HearthError, match="starter embedder is not installed"):
            library.add([docs], "other")  # the default needs the wheel, and says so
        with pytest.raises(HearthError, match=r"multilingual-E5 small is not downloaded"):
            library.set_embedder("tea", "multilingual-e5-small")
        assert library.embedder_of("tea") == "nomic-embed-text-v1.5"  # nothing dropped
        assert len(library.index.files(library.index.collection_id("tea"))) == 1
    finally:
        opened.close()


def test_a_text_past_the_window_is_cut_at_the_entrys_max_tokens(monkeypatch, tmp_path):
    allow_hub_requests(monkeypatch)
    entry = CATALOG.get("bge-small-en-v1.5")
    with FakeHub() as hub:
        store = _download_all(tmp_path, hub, [entry.id])
    folder = store.folder(entry.id)
    long_text = " ".join(["the kettle sings on the hearth"] * 90  # the window ends in here
                         + ["good software explains what went wrong"] * 60)
    embedder = TextEmbedder(folder, threads=1)
    vector, tokens = embedder.embed_counted([long_text])
    assert tokens == entry.max_tokens == 512
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    full = tokenizer.encode(long_text).ids
    assert len(full) > 800
    tokenizer.enable_truncation(entry.max_tokens)
    cut = np.array([tokenizer.encode(long_text).ids], np.int64)
    session = ort.InferenceSession(str(folder / entry.graph), providers=["CPUExecutionProvider"])
    hidden = session.run(["last_hidden_state"], {
        "input_ids": cut, "attention_mask": np.ones_like(cut),
        "token_type_ids": np.zeros_like(cut)})[0]
    expected = hidden[0, 0] / np.linalg.norm(hidden[0, 0])  # CLS of the cut text
    np.testing.assert_allclose(vector[0], expected, atol=2e-5)
    uncut = np.array([full], np.int64)
    whole = session.run(["last_hidden_state"], {
        "input_ids": uncut, "attention_mask": np.ones_like(uncut),
        "token_type_ids": np.zeros_like(uncut)})[0][0, 0]
    assert np.linalg.norm(vector[0] - whole / np.linalg.norm(whole)) > 1e-3


def test_a_graph_whose_signature_is_not_the_entrys_gets_a_sentence(monkeypatch, tmp_path):
    allow_hub_requests(monkeypatch)
    with FakeHub() as hub:
        store = _download_all(tmp_path, hub, ["embeddinggemma-300m"])
    folder = store.folder("embeddinggemma-300m")
    meta_path = folder / "embedder.json"
    meta = json.loads(meta_path.read_text())
    for change, sentence in (({"dims": 384}, "makes 768-dimensional vectors, not the 384"),
                             ({"output": "pooler_output"}, "has no output 'pooler_output'"),
                             ({"output": "last_hidden_state", "pooling": "pooled"},
                              "has 3 axes, which pooling 'pooled' cannot use")):
        meta_path.write_text(json.dumps({**meta, **change}))
        with pytest.raises(HearthError, match=sentence):
            TextEmbedder(folder, threads=1)
