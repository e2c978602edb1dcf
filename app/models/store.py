"""Installed models: one folder per model id under the models folder, each with a manifest.

``hearth-manifest.json`` records where the model came from (Hub repo + revision + variant,
a GGUF file, or a local folder), its layout, and every file with size and sha256. A model
exists only once its folder is in place: downloads and conversions are built in the staging
folder and moved here with one atomic rename. A local folder imported "in place" is
registered with a small link folder holding only the manifest; removing it never touches
the user's files.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from app import paths
from app.errors import HearthError
from app.fileio import read_json, write_json_atomic

MANIFEST_NAME = "hearth-manifest.json"
STATE_NAME = ".hearth-store.json"
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


def slugify(text: str) -> str:
    """A folder-safe model id from a name or repo id ("owner/Model_X" -> "owner--model_x")."""
    slug = text.strip().lower().replace("/", "--")
    slug = re.sub(r"[^a-z0-9._-]+", "-", slug).strip("-.")
    return slug[:100] or "model"


def validate_id(model_id: str) -> str:
    if not _ID_RE.match(model_id):
        raise HearthError(
            f"'{model_id}' is not a valid model id.",
            hint="Use lowercase letters, digits, '.', '_' or '-'.",
        )
    return model_id


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def describe_files(folder: Path, *, with_sha256: bool = True) -> list[dict]:
    """``[{"path", "size", "sha256"}]`` for every file under ``folder`` except the manifest."""
    files = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel == MANIFEST_NAME:
            continue
        files.append(
            {
                "path": rel,
                "size": path.stat().st_size,
                "sha256": sha256_file(path) if with_sha256 else None,
            }
        )
    return files


def folder_size(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
    return total


@dataclass(frozen=True)
class InstalledModel:
    """A model on disk. ``path`` is the folder the engine loads (the linked folder for an
    in-place import); ``size_on_disk`` counts the bytes of that folder."""

    id: str
    name: str
    path: Path
    manifest: dict
    size_on_disk: int

    @property
    def source_kind(self) -> str:
        return self.manifest.get("source", {}).get("kind", "local")

    @property
    def linked(self) -> bool:
        """True for a folder registered in place (removing it keeps the files)."""
        return self.source_kind == "local"

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "name": self.name,
            "path": str(self.path),
            "size_on_disk": self.size_on_disk,
            "source": self.manifest.get("source", {}),
            "format": self.manifest.get("format"),
            "installed_at": self.manifest.get("installed_at"),
            "context_length": self.manifest.get("context_length"),
            "parameters": self.manifest.get("parameters"),
        }


class ModelStore:
    """The installed-model folder. Safe to create many times; holds no open files."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else paths.models_dir()
        self.root.mkdir(parents=True, exist_ok=True)

    # -- reading ---------------------------------------------------------------------

    def list_models(self) -> list[InstalledModel]:
        """Every installed model, newest first."""
        models = []
        for folder in sorted(self.root.iterdir()):
            if folder.name.startswith(".") or not folder.is_dir():
                continue
            model = self._read(folder)
            if model is not None:
                models.append(model)
        models.sort(key=lambda m: m.manifest.get("installed_at") or "", reverse=True)
        return models

    def get(self, model_id: str) -> InstalledModel | None:
        folder = self.root / model_id
        if not _ID_RE.match(model_id) or not folder.is_dir():
            return None
        return self._read(folder)

    def require(self, model_id: str) -> InstalledModel:
        model = self.get(model_id)
        if model is None:
            raise HearthError(
                f"No installed model is called '{model_id}'.",
                hint="Run 'hearth models list' to see installed models.",
            )
        return model

    def _read(self, folder: Path) -> InstalledModel | None:
        manifest = read_json(folder / MANIFEST_NAME)
        if not manifest:
            return None
        source = manifest.get("source") or {}
        target = folder
        if source.get("kind") == "local" and source.get("path"):
            target = Path(source["path"])
        size = folder_size(target) if target.is_dir() else 0
        return InstalledModel(
            id=folder.name,
            name=manifest.get("name") or folder.name,
            path=target,
            manifest=manifest,
            size_on_disk=size,
        )

    # -- installing ------------------------------------------------------------------

    def install_from_staging(self, staging: Path, manifest: dict) -> InstalledModel:
        """Write ``manifest`` into ``staging`` and move the folder into place atomically.

        Refuses when a model with that id is already installed. When the models folder is
        on another file system than the staging folder, the data is copied next to the
        destination first, so the final step is still one rename.
        """
        model_id = validate_id(manifest["id"])
        dest = self.root / model_id
        if dest.exists():
            raise HearthError(
                f"A model called '{model_id}' is already installed.",
                hint="Remove it first, or choose another name.",
            )
        staging = Path(staging)
        manifest = dict(manifest)
        manifest.setdefault("installed_at", now_iso())
        write_json_atomic(staging / MANIFEST_NAME, manifest)
        try:
            os.rename(staging, dest)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                if dest.exists():
                    raise HearthError(
                        f"A model called '{model_id}' is already installed.",
                        hint="Remove it first, or choose another name.",
                    ) from exc
                raise
            incoming = self.root / f".incoming-{model_id}-{uuid.uuid4().hex[:8]}"
            shutil.copytree(staging, incoming)
            os.rename(incoming, dest)
            shutil.rmtree(staging, ignore_errors=True)
        installed = self.get(model_id)
        assert installed is not None
        return installed

    def unique_id(self, wanted: str) -> str:
        """``wanted`` slugified, with a numeric suffix when already taken."""
        base = slugify(wanted)
        candidate, n = base, 2
        while (self.root / candidate).exists():
            candidate, n = f"{base}-{n}", n + 1
        return candidate

    def import_folder(self, path: Path, *, name: str | None = None) -> InstalledModel:
        """Register a local model folder in place, after checking that it loads.

        The folder is validated by ``app.engine.package.read_model_folder`` and not copied;
        the store keeps a link folder with a manifest pointing to it.
        """
        from app.engine.package import read_model_folder  # the engine layer, loaded lazily

        folder = Path(path).expanduser().resolve()
        if not folder.is_dir():
            raise HearthError(
                f"{folder} is not a folder.", hint="Choose the folder that holds the model files."
            )
        spec = read_model_folder(folder)  # raises ModelLoadError with a readable message
        for model in self.list_models():
            if model.linked and model.path == folder:
                raise HearthError(
                    f"{folder} is already imported as '{model.id}'.",
                    hint="Select it in the model list.",
                )
        model_id = self.unique_id(name or folder.name)
        manifest = {
            "id": model_id,
            "name": name or getattr(spec, "name", None) or folder.name,
            "source": {
                "kind": "local",
                "repo": None,
                "revision": None,
                "variant": None,
                "path": str(folder),
            },
            "format": getattr(spec, "layout", None),
            "files": describe_files(folder, with_sha256=False),
            "installed_at": now_iso(),
            "context_length": getattr(spec, "context_length", None),
            "parameters": None,
        }
        link = self.root / f".incoming-{model_id}-{uuid.uuid4().hex[:8]}"
        link.mkdir()
        return self.install_from_staging(link, manifest)

    def import_gguf(
        self,
        path: Path,
        *,
        precision: str = "native",
        name: str | None = None,
        progress: Callable[..., object] | None = None,
    ) -> InstalledModel:
        """Convert a GGUF file into an ONNX model folder and install it."""
        from app.models.gguf.convert import convert_gguf  # the GGUF importer, loaded lazily

        src = Path(path).expanduser().resolve()
        if not src.is_file():
            raise HearthError(f"{src} is not a file.", hint="Choose a .gguf file.")
        model_id = self.unique_id(name or src.stem)
        work = paths.staging_dir() / f"gguf-{uuid.uuid4().hex[:12]}"
        work.mkdir(parents=True)
        try:
            dest = work / model_id
            convert_gguf(src, dest, precision=precision, name=name, progress=progress)
            manifest = read_json(dest / MANIFEST_NAME)
            if not manifest.get("files"):
                manifest["files"] = describe_files(dest)
            manifest["id"] = model_id
            manifest["name"] = name or manifest.get("name") or src.stem
            source = {
                "kind": "gguf",
                "repo": None,
                "revision": None,
                "variant": precision,
                "path": str(src),
            }
            manifest["source"] = {**source, **(manifest.get("source") or {}), "kind": "gguf"}
            manifest.setdefault("format", "genai")
            manifest.setdefault("context_length", None)
            manifest.setdefault("parameters", None)
            manifest["installed_at"] = now_iso()
            return self.install_from_staging(dest, manifest)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    # -- removing --------------------------------------------------------------------

    def remove(self, model_id: str, *, loaded_ids: Iterable[str] = ()) -> None:
        """Delete an installed model (or just the link of an in-place import).

        Refuses while the model is loaded: unload it first.
        """
        model = self.require(model_id)
        if model_id in set(loaded_ids):
            raise HearthError(
                f"'{model.name}' is loaded and cannot be removed.",
                hint="Switch to another model (or unload it) first.",
            )
        folder = self.root / model_id
        trash = self.root / f".trash-{model_id}-{uuid.uuid4().hex[:8]}"
        os.rename(folder, trash)  # the model disappears at once, even if deleting is slow
        shutil.rmtree(trash, ignore_errors=True)
        state = self._state()
        changed = False
        for key in ("default", "last_used"):
            if state.get(key) == model_id:
                state.pop(key)
                changed = True
        if changed:
            self._save_state(state)

    # -- default / last used ---------------------------------------------------------

    def set_default(self, model_id: str) -> None:
        self.require(model_id)
        state = self._state()
        state["default"] = model_id
        self._save_state(state)

    def mark_used(self, model_id: str) -> None:
        """Remember the model the user chatted with last."""
        self.require(model_id)
        state = self._state()
        state["last_used"] = model_id
        self._save_state(state)

    def default_model(self) -> InstalledModel | None:
        """The chosen default, else the last used, else the newest install, else None."""
        state = self._state()
        for key in ("default", "last_used"):
            model_id = state.get(key)
            if model_id and (model := self.get(model_id)) is not None:
                return model
        models = self.list_models()
        return models[0] if models else None

    def _state(self) -> dict:
        return read_json(self.root / STATE_NAME)

    def _save_state(self, state: dict) -> None:
        write_json_atomic(self.root / STATE_NAME, state)

