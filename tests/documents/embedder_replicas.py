"""The replica Hub for embedders: each repo of ``resources/embedders.json`` as published.

``embedder_replicas/<owner>--<name>.json`` describes one repo from public evidence (its
``evidence`` list): the file listing, the config facts, the tokenizer's special tokens and
template, and the input / output signature of the graph the catalog downloads.
:func:`replica_repo` turns one into a :class:`~tests.models.hub_server.FakeRepo` (the chat
models' fake Hub): the downloaded graph is a tiny random-weight encoder of that signature at
the entry's real dims (``tests.documents.tiny_encoder``), its weights in the external data
file the listing names, if any; tokenizer.json is a tiny WordPiece with the family's tokens;
config.json is the published facts; every other file is a short placeholder, so a download
that fetched one would show.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import onnx

from tests.documents.tiny_encoder import encoder_graph, wordpiece_json
from tests.models.hub_server import FakeRepo

REPLICAS_DIR = Path(__file__).resolve().parent / "embedder_replicas"


@dataclass(frozen=True)
class EmbedderReplica:
    path: Path
    data: dict

    @property
    def repo(self) -> str:
        return self.data["repo"]

    @property
    def files(self) -> list[str]:
        return list(self.data["files"])

    def tokenizer_json(self) -> str:
        tok = self.data["tokenizer"]
        return wordpiece_json(tuple(tok["specials"]), tok["unk"], tuple(tok["template"]))

    def vocab(self) -> int:
        return len(json.loads(self.tokenizer_json())["model"]["vocab"])

    def graph(self, dims: int) -> onnx.ModelProto:
        sig = self.data["signature"]
        return encoder_graph(self.vocab(), dims, list(sig["inputs"]), dict(sig["outputs"]),
                             seed=len(self.repo))


def load_replicas() -> dict[str, EmbedderReplica]:
    found = {}
    for path in sorted(REPLICAS_DIR.glob("*.json")):
        replica = EmbedderReplica(path, json.loads(path.read_text(encoding="utf-8")))
        found[replica.repo] = replica
    return found


def _graph_files(replica: EmbedderReplica, graph_path: str, data: list[str],
                 dims: int) -> dict[str, bytes]:
    model = replica.graph(dims)
    if not data:
        return {graph_path: model.SerializeToString()}
    if len(data) != 1:
        raise ValueError(f"{replica.path.name}: one external data file per graph")
    name = graph_path.rsplit("/", 1)[1]
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save_model(model, f"{tmp}/{name}", save_as_external_data=True,
                        all_tensors_to_one_file=True, location=data[0].rsplit("/", 1)[1],
                        size_threshold=1024)
        return {graph_path: Path(tmp, name).read_bytes(),
                data[0]: Path(tmp, data[0].rsplit("/", 1)[1]).read_bytes()}


def replica_repo(replica: EmbedderReplica, dims: int, *, commit: str = "") -> FakeRepo:
    """The FakeRepo serving ``replica`` with graphs of ``dims`` (the entry's)."""
    files = {p: f"placeholder for {p}\n".encode() for p in replica.files}
    for graph_path, spec in replica.data["graphs"].items():
        files.update(_graph_files(replica, graph_path, spec["data"], dims))
    files["config.json"] = json.dumps(replica.data["config"], indent=2).encode()
    files["tokenizer.json"] = replica.tokenizer_json().encode()
    files["tokenizer_config.json"] = json.dumps(
        {"model_max_length": 512, "unk_token": replica.data["tokenizer"]["unk"]}).encode()
    unlisted = set(files) - set(replica.files)
    if unlisted:
        raise ValueError(f"{replica.path.name}: built files the listing lacks: {sorted(unlisted)}")
    return FakeRepo(replica.repo, files, commit=commit, tags=("onnx", "feature-extraction"),
                    pipeline_tag="feature-extraction")
