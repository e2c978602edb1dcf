"""Files shipped with Hearth, in a source tree and in a frozen (PyInstaller) bundle alike.

``resources_dir()`` is ``<repo>/resources`` from a source tree and ``<bundle>/_internal/resources``
(``sys._MEIPASS``) in a frozen app: in both cases the folder next to the ``app`` package.

A frozen bundle may carry ready-to-use models under ``resources/models/<id>/`` (the installer
build puts the converted starter model there). ``seed_bundled_models()`` installs them into
the user's models folder once, on first start, so the first chat works offline and without a
conversion; a user who later removes one does not get it back unless they ask
(``install_bundled_model``). Large files are hard-linked when the bundle and the user data
share a volume (no extra disk, instant), else copied; a model appears only once complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import uuid
from pathlib import Path

from app import paths
from app.fileio import read_json, write_json_atomic
from app.manifest import Manifest

SEEDED_STATE = "bundled-models.json"  # under data_root(): ids already seeded once
BUNDLED_MODELS_SUBDIR = "models"
_LINK_MIN_BYTES = 1 << 20  # smaller files are copied, so editing them never touches the bundle


def is_frozen() -> bool:
    """True inside a PyInstaller bundle."""
    return bool(getattr(sys, "frozen", False))


def resources_dir() -> Path:
    """The folder holding catalog.json, icons and (frozen) bundled models."""
    return Path(__file__).resolve().parents[1] / "resources"


def resource_path(*parts: str) -> Path:
    """A path inside ``resources_dir()`` (it may not exist)."""
    return resources_dir().joinpath(*parts)


def app_icon_path(size: int = 256) -> Path | None:
    """The PNG app icon closest to ``size`` pixels, or None when the icons are missing."""
    icons = resource_path("icons")
    sizes = sorted(
        int(p.stem.split("-")[1]) for p in icons.glob("hearth-*.png") if p.stem[7:].isdigit()
    )
    if not sizes:
        return None
    best = min(sizes, key=lambda s: (abs(s - size), -s))
    return icons / f"hearth-{best}.png"


def bundled_models_dir() -> Path:
    return resource_path(BUNDLED_MODELS_SUBDIR)


def bundled_models() -> dict[str, Path]:
    """``{model_id: folder}`` of complete models shipped in the bundle (empty from source)."""
    root = bundled_models_dir()
    if not root.is_dir():
        return {}
    return {
        child.name: child
        for child in sorted(root.iterdir())
        if child.is_dir() and Manifest.exists_in(child)
    }


def install_bundled_model(model_id: str, models_root: Path | None = None) -> Path | None:
    """Install the bundled model ``model_id`` if it is not installed yet.

    Returns the installed folder (already there or just installed), or None when the bundle
    carries no such model. Raises OSError when the disk refuses (full, read-only).
    """
    source = bundled_models().get(model_id)
    if source is None:
        return None
    root = models_root or paths.models_dir()
    target = root / model_id
    if Manifest.exists_in(target):
        return target
    staging = paths.staging_dir() / f"bundled-{model_id}-{uuid.uuid4().hex[:8]}"
    try:
        _link_or_copy_tree(source, staging)
        if target.exists():  # an incomplete leftover without a manifest
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def seed_bundled_models(models_root: Path | None = None) -> list[Path]:
    """First start of a frozen app: install each bundled model not seeded before.

    Never raises: a model that cannot be installed is reported on stderr and the app starts
    without it (the first-run panel then offers the starter again). Returns the folders
    installed by this call.
    """
    models = bundled_models()
    if not models:
        return []
    state_path = paths.data_root() / SEEDED_STATE
    seeded = set(_read_ids(state_path))
    installed: list[Path] = []
    for model_id in models:
        if model_id in seeded:
            continue
        try:
            root = models_root or paths.models_dir()
            already = Manifest.exists_in(root / model_id)
            folder = install_bundled_model(model_id, root)
        except OSError as exc:
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
