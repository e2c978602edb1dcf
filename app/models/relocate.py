"""Move the models folder somewhere else (another disk, say) without losing a model.

Each model moves on its own and all-or-nothing: it is copied into a hidden folder next to
its new place, then renamed into place, and only then is the old copy deleted. A full disk,
a permission error or a cancel stops the move with the models not yet moved still in the
old folder (and still listed there); nothing is ever half-installed in the new one. Models
linked in place (imported folders) are only link folders and move as such.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from pathlib import Path

from app.errors import DiskFullError, HearthError
from app.jobs import JobControl, Progress, ProgressReport
from app.models.downloader import free_space
from app.units import format_bytes

DISK_RESERVE_BYTES = 64 << 20


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def move_models(
    source: Path, target: Path, report: ProgressReport, control: JobControl
) -> int:
    """Move every model folder from ``source`` into ``target``; return how many moved.

    Raises DiskFullError before anything is copied when ``target``'s disk cannot hold them,
    HearthError naming the model and the problem when a copy fails (that model stays in
    ``source``; the ones moved before it stay moved), JobCancelled between models."""
    source, target = Path(source).resolve(), Path(target).expanduser().resolve()
    if source == target:
        return 0
    if target.is_relative_to(source):
        raise HearthError(
            f"{target} is inside the current models folder {source}.",
            hint="Choose a folder outside it.",
        )
    target.mkdir(parents=True, exist_ok=True)
    models = sorted(p for p in source.iterdir() if p.is_dir() and not p.name.startswith("."))
    clashes = [p.name for p in models if (target / p.name).exists()]
    if clashes:
        raise HearthError(
            f"{target} already holds models named {', '.join(clashes)}.",
            hint="Choose an empty folder, or remove those first.",
        )
    sizes = {p: _size(p) for p in models}
    total = sum(sizes.values())
    same_disk = os.stat(source).st_dev == os.stat(target).st_dev
    if not same_disk and total + DISK_RESERVE_BYTES > free_space(target):
        raise DiskFullError(
            f"{target} has {format_bytes(free_space(target))} free, but the models need "
            f"{format_bytes(total)}.",
            hint="Free some space there or choose another folder. Nothing was moved.",
        )
    done = 0
    for count, folder in enumerate(models):
        control.checkpoint()
        report(Progress(done / total if total else None,
                        f"Moving {folder.name} ({count + 1} of {len(models)})…"))
        _move_one(folder, target / folder.name, same_disk)
        done += sizes[folder]
    report(Progress(1.0, f"Moved {len(models)} models to {target}.", "done"))
    return len(models)


def _move_one(folder: Path, dest: Path, same_disk: bool) -> None:
    if same_disk:
        os.rename(folder, dest)  # one atomic step
        return
    incoming = dest.with_name(f".incoming-{dest.name}-{uuid.uuid4().hex[:8]}")
    try:
        shutil.copytree(folder, incoming, symlinks=True)
        os.rename(incoming, dest)
    except OSError as exc:
        shutil.rmtree(incoming, ignore_errors=True)
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(
                f"The disk holding {dest.parent} filled up while moving {folder.name}.",
                hint="That model is still in the old folder; free some space and try again.",
            ) from exc
        raise HearthError(
            f"{folder.name} could not be copied to {dest.parent}: {exc.strerror or exc}.",
            hint="That model is still in the old folder.",
        ) from exc
    shutil.rmtree(folder)
