"""The replica Hub: each catalog repo as published, with tiny graphs of the same signature.

``tests/models/replicas/<owner>--<name>.json`` describes one repo of ``resources/catalog.json``
from public evidence (its ``evidence`` list says which): the file listing, the facts of its
configs that matter (architecture, layers, heads, KV heads, head_dim, context, eos / bos /
pad ids, where the chat template lives) and the input / output signature of each graph a
catalog variant downloads (names, KV naming, dtypes, plain past/present or
GroupQueryAttention, positions counted from 0 or 1). :func:`replica_repo` turns one into a
:class:`~tests.models.hub_server.FakeRepo`:

- every graph a variant downloads is a real tiny decoder (``tests.fixtures.decoder_graphs``)
  with that signature: the real layer count, heads and KV heads, but ``head_dim`` 16, hidden
  32 and the tiny tokenizer's vocabulary; its weights go to the external data
  file(s) the listing names (two chunks where the repo has ``_data`` and ``_data_1``);
- config.json / generation_config.json / genai_config.json are the published facts with the
  sizes swapped for the tiny ones and each special token id mapped to the tiny tokenizer's
  id of the same token (``special_tokens``: token -> published id);
- tokenizer.json is the tiny byte-level BPE trained with the family's special tokens, and
  tokenizer_config.json names the published bos / eos / pad tokens and carries a short
  template in the family's markup (or ``chat_template.jinja`` does, where the repo has one);
- every other listed file (other precisions' graphs and data, README.md, tokenizer.model, the
  GenAI folders an Optimum repo also carries …) is a short placeholder: the tests check that a
  download never fetches one.

Each replica's ``evidence`` names its sources: a URL, a repo path, or "index file N", a public
GitHub file found through the code-search index (which names files by id, not by repository);
what no source backs is marked reconstructed.

Schema of a replica (keys not listed are notes for readers):

``repo``; ``format`` ("optimum" | "genai"); ``family`` (a key of :data:`TEMPLATES`);
``special_tokens``; ``files`` (repo paths); ``tokenizer_config`` (published fields, plus
``"chat_template": true`` when the template is in it); ``signature`` (``attention``
"plain" | "gqa", ``inputs`` / ``outputs`` with ``%d`` for the layer, ``positions_from``);
optimum: ``config``, ``generation_config``, ``graphs`` {path: {kv_dtype, logits_dtype,
data: [paths]}}; genai: ``genai_config`` (the published fields every folder shares) and
``folders`` {folder: {graph, data, kv_dtype, logits_dtype}}, the folder's files being those of
``files`` under it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import onnx
from onnx import TensorProto

from tests.fixtures.decoder_graphs import (
    TinyConfig,
    gqa_decoder_graph,
    make_weights,
    plain_decoder_graph,
)
from tests.fixtures.onnx_graph import IR_VERSION
from tests.fixtures.tiny_tokenizer import tokenizer_json, vocab_size
from tests.models.hub_server import FakeRepo

REPLICAS_DIR = Path(__file__).resolve().parent / "replicas"
TINY_HEAD_DIM = 16  # GroupQueryAttention on CPU needs a multiple of 16
TINY_HIDDEN = 32
ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")

TEMPLATES = {
    "chatml": (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
        "'<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
    "llama3": (
        "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
        "'<|end_header_id|>\\n\\n' + m['content'] + '<|eot_id|>' }}{% endfor %}"
        "{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
    ),
    "gemma3": (
        "{{ bos_token }}{% for m in messages %}{{ '<start_of_turn>' + "
        "('model' if m['role'] == 'assistant' else 'user') + '\\n' + m['content'] + "
        "'<end_of_turn>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
    ),
    "phi3": (
        "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
    ),
    "phi4": (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '<|im_sep|>' + m['content'] + "
        "'<|im_end|>' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}"
    ),
}


@dataclass(frozen=True)
class Replica:
    """One replica file, read."""

    path: Path
    data: dict

    @property
    def repo(self) -> str:
        return self.data["repo"]

    @property
    def files(self) -> list[str]:
        return list(self.data["files"])

    @property
    def tokens(self) -> tuple[str, ...]:
        """The special tokens in published id order: the tiny tokenizer's ids 0, 1, 2 …"""
        table = self.data["special_tokens"]
        return tuple(sorted(table, key=table.__getitem__))

    def tiny_id(self, published: int) -> int:
        by_id = {v: k for k, v in self.data["special_tokens"].items()}
        if published not in by_id:
            raise ValueError(f"{self.path.name}: token id {published} is not in special_tokens")
        return self.tokens.index(by_id[published])

    def graphs(self) -> dict[str, dict]:
        """Repo path of each graph a variant may download -> its build options."""
        if self.data["format"] == "genai":
            return {f"{folder}/{spec['graph']}": {**spec, "data": [f"{folder}/{d}"
                                                                   for d in spec["data"]]}
                    for folder, spec in self.data["folders"].items()}
        return dict(self.data["graphs"])

    def layers(self) -> int:
        if self.data["format"] == "genai":
            return int(self.data["genai_config"]["model"]["decoder"]["num_hidden_layers"])
        config = self.data["config"]
        return int(config.get("text_config", config)["num_hidden_layers"])

    def signature(self, graph_path: str) -> tuple[dict[str, str], dict[str, str]]:
        """The published inputs and outputs of a graph: name -> dtype, layers expanded."""
        spec, sig = self.graphs()[graph_path], self.data["signature"]
        kinds = {"kv": spec["kv_dtype"], "logits": spec["logits_dtype"]}

        def expand(table: dict[str, str]) -> dict[str, str]:
            out = {}
            for name, kind in table.items():
                dtype = kinds.get(kind, kind)
                for i in range(self.layers()) if "%d" in name else [None]:
                    out[name.replace("%d", str(i)) if i is not None else name] = dtype
            return out

        return expand(sig["inputs"]), expand(sig["outputs"])


def load_replicas() -> dict[str, Replica]:
    """Every replica file, by repo id."""
    found = {}
    for path in sorted(REPLICAS_DIR.glob("*.json")):
        replica = Replica(path, json.loads(path.read_text(encoding="utf-8")))
        found[replica.repo] = replica
    return found


def replica_repo(replica: Replica, *, commit: str = "", only: set[str] | None = None) -> FakeRepo:
    """The FakeRepo serving ``replica``. ``only``: build just these graphs (repo paths; the
    others are placeholders too), to keep one variant's test fast."""
    files = {path: _placeholder(path) for path in replica.files}
    tiny_cfg = _tiny_config(replica)
    for graph_path, spec in replica.graphs().items():
        if only is not None and graph_path not in only:
            continue
        files.update(_graph_files(replica, tiny_cfg, graph_path, spec))
    files.update(_text_files(replica, tiny_cfg))
    unlisted = set(files) - set(replica.files)
    if unlisted:
        raise ValueError(f"{replica.path.name}: built files the listing lacks: {sorted(unlisted)}")
    return FakeRepo(replica.repo, files, commit=commit)


# -- sizes -------------------------------------------------------------------------------


def _tiny_config(replica: Replica) -> TinyConfig:
    if replica.data["format"] == "genai":
        dec = replica.data["genai_config"]["model"]["decoder"]
        heads, kv_heads = dec["num_attention_heads"], dec["num_key_value_heads"]
        context = replica.data["genai_config"]["model"]["context_length"]
    else:
        config = replica.data["config"]
        text = config.get("text_config", config)
        heads, kv_heads = text["num_attention_heads"], text["num_key_value_heads"]
        context = text["max_position_embeddings"]
    return TinyConfig(vocab_size(replica.tokens), replica.layers(), TINY_HIDDEN,
                      heads, kv_heads, TINY_HEAD_DIM, context)


def _tiny_sizes(cfg: TinyConfig) -> dict:
    return {"hidden_size": cfg.hidden, "intermediate_size": cfg.intermediate,
            "vocab_size": cfg.vocab_size}


def _map_ids(replica: Replica, table: dict) -> dict:
    out = dict(table)
    for key in ID_KEYS:
        value = out.get(key)
        if isinstance(value, list):
            out[key] = [replica.tiny_id(v) for v in value]
        elif isinstance(value, int):
            out[key] = replica.tiny_id(value)
    return out


# -- files -------------------------------------------------------------------------------


def _placeholder(path: str) -> bytes:
    if path.endswith(".json"):
        return b"{}\n"
    return f"replica placeholder for {path}\n".encode()


def _json(data: dict) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def _text_files(replica: Replica, cfg: TinyConfig) -> dict[str, bytes]:
    """Configs and tokenizer files at every place the listing has them."""
    data = replica.data
    out: dict[str, bytes] = {}
    template = TEMPLATES[data["family"]]
    tok_cfg = dict(data["tokenizer_config"])
    in_config = tok_cfg.pop("chat_template", False)
    tok_cfg["added_tokens_decoder"] = {
        str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                 "single_word": False, "special": True}
        for i, t in enumerate(replica.tokens)
    }
    if in_config:
        tok_cfg["chat_template"] = template
    special_map = {k: tok_cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                   if isinstance(tok_cfg.get(k), str)}
    for path in replica.files:
        name = path.rsplit("/", 1)[-1]
        folder = path[: -len(name)]
        if name == "tokenizer.json":
            out[path] = tokenizer_json(replica.tokens).encode()
        elif name == "tokenizer_config.json":
            out[path] = _json(tok_cfg)
        elif name == "special_tokens_map.json":
            out[path] = _json(special_map)
        elif name == "chat_template.jinja":
            out[path] = template.encode()
        elif name == "config.json" and "config" in data:
            out[path] = _json(_hf_config(replica, cfg))
        elif name == "generation_config.json" and "generation_config" in data:
            out[path] = _json(_map_ids(replica, data["generation_config"]))
        elif name == "genai_config.json" and "genai_config" in data:
            out[path] = _json(_genai_config(replica, cfg, folder.rstrip("/")))
    return out


def _hf_config(replica: Replica, cfg: TinyConfig) -> dict:
    config = _map_ids(replica, copy.deepcopy(replica.data["config"]))
    text = config.get("text_config")
    for table in (config, text) if text is not None else (config,):
        if "num_hidden_layers" in table:
            table.update(_tiny_sizes(cfg))
            if "head_dim" in table:
                table["head_dim"] = TINY_HEAD_DIM
    if text is not None:
        config["text_config"] = _map_ids(replica, text)
    return config


def _genai_config(replica: Replica, cfg: TinyConfig, folder: str) -> dict:
    config = copy.deepcopy(replica.data["genai_config"])
    spec = replica.data["folders"].get(folder)
    if spec is None:  # a folder no variant downloads: its listing, not its contents
        return {}
    model = _map_ids(replica, config["model"])
    model["vocab_size"] = cfg.vocab_size
    decoder = model["decoder"]
    decoder.update(filename=spec["graph"], head_size=TINY_HEAD_DIM, hidden_size=cfg.hidden)
    config["model"] = model
    return config


def _graph_files(replica: Replica, cfg: TinyConfig, graph_path: str,
                 spec: dict) -> dict[str, bytes]:
    """The tiny graph with the published signature, its weights in the listed data files."""
    model = _build_graph(replica, cfg, spec)
    built = {i.name: _dtype(i) for i in model.graph.input}, \
        {o.name: _dtype(o) for o in model.graph.output}
    wanted = replica.signature(graph_path)
    if built != wanted:
        raise ValueError(f"{replica.path.name}: the tiny {graph_path} has signature {built}, "
                         f"not the published {wanted}")
    data_paths = spec["data"]
    if not data_paths:  # one self-contained file
        return {graph_path: model.SerializeToString()}
    chunks = _externalize(model, [p.rsplit("/", 1)[-1] for p in data_paths])
    return {graph_path: model.SerializeToString(),
            **{path: chunk for path, chunk in zip(data_paths, chunks, strict=True)}}


@lru_cache(maxsize=8)
def _weights(cfg: TinyConfig):
    return make_weights(cfg, 0)


def _build_graph(replica: Replica, cfg: TinyConfig, spec: dict) -> onnx.ModelProto:
    sig = replica.data["signature"]
    if sig["attention"] == "gqa":
        model = gqa_decoder_graph(cfg, _weights(cfg), spec["kv_dtype"],
                                  logits_dtype=spec["logits_dtype"])
    else:
        inputs = sig["inputs"]
        keep = next((n for n in ("logits_to_keep", "num_logits_to_keep") if n in inputs), None)
        model = plain_decoder_graph(
            cfg, _weights(cfg), spec["kv_dtype"], logits_dtype=spec["logits_dtype"],
            mask_from_positions="attention_mask" not in inputs,
            cache_branch="use_cache_branch" in inputs, logits_to_keep=keep)
    model.ir_version = IR_VERSION
    return model


_DTYPES = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16",
           TensorProto.INT64: "int64", TensorProto.BOOL: "bool", TensorProto.INT32: "int32"}


def _dtype(value: onnx.ValueInfoProto) -> str:
    return _DTYPES[value.type.tensor_type.elem_type]


def _externalize(model: onnx.ModelProto, locations: list[str]) -> list[bytes]:
    """Move every sizeable initializer into external data, split over ``locations`` in
    order (half the bytes each for two chunks); returns each file's bytes."""
    big = [t for t in model.graph.initializer if len(t.raw_data) >= 256]
    total = sum(len(t.raw_data) for t in big)
    chunks = [bytearray() for _ in locations]
    done = 0
    for tensor in big:
        index = min(done * len(locations) // max(total, 1), len(locations) - 1)
        raw = tensor.raw_data
        done += len(raw)
        chunk = chunks[index]
        offset = len(chunk)
        chunk.extend(raw)
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in (("location", locations[index]), ("offset", str(offset)),
                           ("length", str(len(raw)))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    return [bytes(c) for c in chunks]
