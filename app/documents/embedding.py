"""Text embeddings through ONNX Runtime: a tokenizer, one session, one text per run.

An embedder folder holds a graph, tokenizer.json and ``embedder.json`` (the starter's, or a
Hub embedder's written from the embedder catalog): ``output`` (the graph output to read),
``pooling`` (``cls``: token 0; ``mean``: the mean over the attention mask; ``pooled``: the
output is already the sentence vector; a 2-D output always is), ``normalized``, the window
``max_tokens`` (longer texts are cut there) and the query / document prefixes. The graph's
own inputs decide the feed: ``attention_mask`` and ``token_type_ids`` (zeros: one segment)
only when it declares them. ``prefixed`` is the one place that decides the prefix: queries
at search time, documents at index time; the API embeds texts as given.

Each text is its own session run, unpadded, so its vector depends on its text alone, bit for
bit, whatever else is embedded with it. Batches would break that two ways (measured on the
starter, tests/documents/test_embed_rows.py): an int8 graph of ORT's dynamic quantization (the
starter's ``model_int8.onnx``, nomic's ``model_quantized.onnx``) scales each activation
tensor over the whole batch (cosine 0.987 against one text at a time), and even in float32
the graph's mean pooling sums a padded row in another order (1e-7 apart). One text per run is
also the cheaper way for chunks: 20–25% less CPU time per ~200-token chunk than sorted
batches of 32, on the starter's int8 and float32 graphs alike (bench/bench_embed_rows.py); a
short text pays the per-run overhead instead (~5 against ~3.3 ms for 20 tokens).

The cores go to texts, not to ops: the session runs each text on one thread
(``intra_op_num_threads`` 1) and ``threads`` texts run at once, each a session run of its own
on a worker of the embedder's pool (ORT's ``Run`` is thread-safe and releases the GIL), so a
text's vector is the same whichever worker ran it and whatever ran beside it. CPU per
~220-token chunk on the starter's layout-3 int8 graph (100 PDF chunks, load 3–8): one text at
a time over two intra-op threads (which wait on each other between the ~440 nodes of the
optimized graph) 62–63 ms, two texts at once on one thread each 55–56, one thread alone
48–53; and two intra-op threads kept two cores only ~83% busy. A single text (a query) runs
on one core.

``TextEmbedder`` is not thread-safe: it belongs to one thread. ``EmbeddingThread`` is that
thread: it builds the embedder on its own thread and runs every call there, so indexing jobs
and chat turns on other threads share one session without a lock (STYLE item 6).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from app.documents.bert_graph import OUTPUT
from app.documents.starter_embedder import CONFIG_NAME
from app.errors import HearthError
from app.machine import physical_cores

FEEDS = ("input_ids", "attention_mask", "token_type_ids")
Role = Literal["query", "document", "raw"]


def graph_build(folder: Path, graph: str | None = None) -> str:
    """Which graph of the folder an embedder runs, and its build: "int8 layout 4", "fp32"
    (the graph ``TextEmbedder`` picks: ``graph``, else embedder.json's, else model.onnx; an
    int8 graph that is lost falls back to the reference). The vectors of one build are only
    compared with queries of the same build (``library.recipe_of``)."""
    try:
        meta = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return _build_of(folder, meta, graph)[0]


def _build_of(folder: Path, meta: dict, graph: str | None) -> tuple[str, Path]:
    graphs = meta.get("graphs", {})
    chosen = graph or meta.get("graph", "fp32")
    model = folder / graphs.get(chosen, "model.onnx")
    if not model.is_file():
        chosen, model = "fp32", folder / "model.onnx"
    build = chosen
    if chosen == "int8" and "int8_layout" in meta:
        build += f" layout {meta['int8_layout']}"
    return build, model


def prefixed(texts: Sequence[str], role: Role, *, query_prefix: str,
             document_prefix: str) -> list[str]:
    """``texts`` as the embedder expects them for ``role`` (``raw``: as given)."""
    prefix = {"query": query_prefix, "document": document_prefix, "raw": ""}[role]
    return [prefix + t for t in texts]


def pool(hidden: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """[batch, seq, dims] hidden states to [batch, dims]: ``cls`` (token 0) or ``mean``."""
    if pooling == "cls":
        return hidden[:, 0]
    weights = mask.astype(np.float32)[:, :, None]
    return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


class TextEmbedder:
    """An embedding model folder (model.onnx, tokenizer.json, embedder.json) on CPU."""

    def __init__(self, folder: Path, *, threads: int | None = None,
                 graph: str | None = None) -> None:
        """``graph``: a key of embedder.json's ``graphs`` ("fp32", "int8"); default its
        ``graph`` (a folder without them has model.onnx only)."""
        try:
            meta = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
            self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except (OSError, ValueError, Exception) as exc:  # tokenizers raises its own kind
            raise HearthError(f"The embedder in {folder} cannot be read ({exc}).") from exc
        self.id: str = meta["id"]
        self.dims: int = int(meta["dims"])
        self.max_tokens: int = int(meta["max_tokens"])
        self.query_prefix: str = meta.get("query_prefix", "")
        self.document_prefix: str = meta.get("document_prefix", "")
        self.pooling: str = meta.get("pooling", "mean")
        self.normalized: bool = bool(meta.get("normalized", True))
        padding = self.tokenizer.padding
        self.pad_id: int = int(meta.get("pad_id", padding["pad_id"] if padding else 0))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_tokens)
        #: texts embedded at once (each its own run on one thread): see the module docstring
        self.threads: int = max(1, threads or physical_cores())
        self._runs: ThreadPoolExecutor | None = None
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        # no busy-waiting between ops: indexing runs beside the chat engine and the UI, and
        # spinning threads steal their cycles (and lose their own) on a loaded CPU
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        graphs = meta.get("graphs", {})
        if graph is not None and graph not in graphs and graph != "fp32":
            raise HearthError(f"The embedder in {folder} has no {graph} graph.")
        # the int8 graph lost: the reference still runs
        self.build, model = _build_of(folder, meta, graph)
        self.graph: str = self.build.split(" ")[0]
        try:
            self.session = ort.InferenceSession(str(model), options,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own kinds for a missing or corrupt graph
            raise HearthError(f"The embedder graph {model} cannot be loaded ({exc}).") from exc
        self._read_signature(model, meta.get("output", OUTPUT))
        self._owner = threading.get_ident()

    def _read_signature(self, model: Path, output: str) -> None:
        """The feeds the graph declares, and the output to read (pooled or not)."""
        self.inputs = [i.name for i in self.session.get_inputs()]
        unknown = [n for n in self.inputs if n not in FEEDS]
        if "input_ids" not in self.inputs or unknown:
            raise HearthError(f"The embedder graph {model} takes inputs Hearth does not "
                              f"feed ({', '.join(unknown) or 'no input_ids'}).")
        outputs = {o.name: o for o in self.session.get_outputs()}
        if output not in outputs:
            raise HearthError(f"The embedder graph {model} has no output '{output}' "
                              f"(it has {', '.join(outputs)}).")
        self.output = output
        width = outputs[output].shape[-1] if outputs[output].shape else None
        if isinstance(width, int) and width != self.dims:
            raise HearthError(f"The embedder graph {model} makes {width}-dimensional vectors, "
                              f"not the {self.dims} its embedder.json says.")
        rank = len(outputs[output].shape)
        self.pooled_in_graph = rank == 2
        if rank not in (2, 3) or (rank == 3 and self.pooling not in ("cls", "mean")):
            raise HearthError(f"The embedder graph {model}'s output '{output}' has "
                              f"{rank} axes, which pooling '{self.pooling}' cannot use.")

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """[len(texts), dims] float32, L2-normalised rows (texts as given: no prefix)."""
        return self.embed_counted(texts)[0]

    def embed_counted(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """``embed`` and the number of tokens it ran (what an API's usage reports)."""
        if threading.get_ident() != self._owner:
            raise RuntimeError("a TextEmbedder runs on the thread that made it")
        out = np.zeros((len(texts), self.dims), np.float32)
        ids = self.token_ids(texts) if texts else []
        if len(ids) > 1 and self.threads > 1:  # one run each, ``threads`` at once
            if self._runs is None:
                self._runs = ThreadPoolExecutor(max_workers=self.threads,
                                                thread_name_prefix="hearth-embed-run")
            for i, vector in enumerate(self._runs.map(self.run_ids, ids)):
                out[i] = vector
        else:
            for i, row in enumerate(ids):
                out[i] = self.run_ids(row)
        return out, sum(len(r) for r in ids)

    def close(self) -> None:
        """Stop the pool of runs (the session stays usable: a later call starts another)."""
        if self._runs is not None:
            self._runs.shutdown(wait=True)
            self._runs = None

    def run_ids(self, row: Sequence[int]) -> np.ndarray:
        """One session run over one text's token ids (no padding): its [dims] vector, pooled
        and normalised as embedder.json says. Safe on any thread (``embed_counted``'s pool
        calls it)."""
        input_ids = np.asarray([row], np.int64)
        mask = np.ones_like(input_ids)
        feed = {"input_ids": input_ids, "attention_mask": mask,
                "token_type_ids": np.zeros_like(input_ids)}
        out = self.session.run([self.output], {n: feed[n] for n in self.inputs})[0]
        vectors = np.asarray(out if self.pooled_in_graph else pool(out, mask, self.pooling),
                             np.float32)
        if self.normalized:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True),
                                           1e-12)
        return vectors[0]

    def prefixed(self, texts: Sequence[str], role: Role) -> list[str]:
        return prefixed(texts, role, query_prefix=self.query_prefix,
                        document_prefix=self.document_prefix)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(self.prefixed(texts, "query"))

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(self.prefixed(texts, "document"))


class EmbeddingThread:
    """One thread that owns a ``TextEmbedder``; any thread may call it (calls queue)."""

    def __init__(self, folder: Path, *, threads: int | None = None,
                 graph: str | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hearth-embed")
        try:
            self._embedder = self._pool.submit(TextEmbedder, folder, threads=threads,
                                               graph=graph).result()
        except BaseException:
            self._pool.shutdown(wait=False)
            raise
        self.id = self._embedder.id
        self.dims = self._embedder.dims
        self.build: str = self._embedder.build  # graph_build

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._pool.submit(self._embedder.embed_queries, list(texts)).result()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._pool.submit(self._embedder.embed_documents, list(texts)).result()

    def embed_counted(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """Texts as given (no prefix): vectors and the tokens embedded."""
        return self._pool.submit(self._embedder.embed_counted, list(texts)).result()

    def close(self) -> None:
        try:
            self._pool.submit(self._embedder.close).result()
        except RuntimeError:  # closed before
            return
        self._pool.shutdown(wait=True)

    def __enter__(self) -> EmbeddingThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
