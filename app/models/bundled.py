"""Models the frozen app's bundle carries, installed through the library.

A frozen bundle may carry ready-to-use models under ``resources/models/<id>/`` (the installer
build puts the converted starter model there; :func:`app.resources.bundled_models` finds
them). :func:`seed_bundled_models` installs them into the user's models folder once, on first
start, so the first chat works offline and without a conversion; a user who later removes one
does not get it back unless they ask (:func:`install_bundled_model`). Large files are
hard-linked when the bundle and the user data share a volume (no extra disk, instant), else
copied; a model appears only once complete (``ModelLibrary.install_from_staging``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import uuid
from pathlib import Path

from app import paths, resources
from app.errors import HearthError
from app.fileio import read_json, write_json_atomic
from app.manifest import Manifest
from app.models.library import ModelLibrary

SEEDED_STATE = "bundled-models.json"  # under data_root(): ids already seeded once
_LINK_MIN_BYTES = 1 << 20  # smaller files are copied, so editing them never touches the bundle


def install_bundled_model(model_id: str, library: ModelLibrary | None = None) -> Path | None:
    """Install the bundled model ``model_id`` if it is not installed yet.

    Returns the installed folder (already there or just installed), or None when the bundle
    carries no such model. A folder of that id without a manifest (a copy cut short) is
    replaced. Raises OSError (or ``DiskFullError``) when the disk refuses (full, read-only).
    """
    source = resources.bundled_models().get(model_id)
    if source is None:
        return None
    library = library or ModelLibrary()
    target = library.root / model_id
    if Manifest.exists_in(target):
        return target
    staging = paths.staging_dir() / f"bundled-{model_id}-{uuid.uuid4().hex[:8]}"
    try:
        _link_or_copy_tree(source, staging)
        manifest = Manifest.read(staging) or Manifest(model_id, model_id)
        manifest.id = model_id
        return library.install_from_staging(staging, manifest, replace_incomplete=True).path
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def seed_bundled_models(library: ModelLibrary | None = None) -> list[Path]:
    """First start of a frozen app: install each bundled model not seeded before.

    Never raises: a model that cannot be installed is reported on stderr and the app starts
    without it (the first-run panel then offers the starter again). Returns the folders
    installed by this call.
    """
    models = resources.bundled_models()
    if not models:
        return []
    library = library or ModelLibrary()
    state_path = paths.data_root() / SEEDED_STATE
    seeded = set(_read_ids(state_path))
    installed: list[Path] = []
    for model_id in models:
        if model_id in seeded:
            continue
        try:
            already = Manifest.exists_in(library.root / model_id)
            folder = install_bundled_model(model_id, library)
        except (OSError, HearthError) as exc:  # a full or read-only disk: start without it
            print(f"hearth: could not install the bundled model {model_id}: {exc}", file=sys.stderr)
            continue
        if folder is not None and not already:
            installed.append(folder)
        seeded.add(model_id)
    with contextlib.suppress(OSError):
        write_json_atomic(state_path, {"seeded": sorted(seeded)})
    return installed


def _read_ids(path: Path) -> list[str]:
    ids = read_json(path).get("seeded")
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def _link_or_copy_tree(source: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    for path in sorted(source.rglob("*")):
        out = dest / path.relative_to(source)
        if path.is_dir():
            out.mkdir(parents=True, exist_ok=True)
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        if path.stat().st_size >= _LINK_MIN_BYTES:
            try:
                os.link(path, out)
                continue
            except OSError:  # other volume, no permission (protected_hardlinks), FAT…
                pass
        shutil.copyfile(path, out)
