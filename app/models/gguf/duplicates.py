"""Whether a GGUF file is already installed: the same source bytes, converted the same way.

A GGUF model's manifest records its source's ``sha256`` (and, since this module, its ``size``
and ``quick_sha256``: the hash of the size and the first and last MiB). ``find_installed``
compares the cheap facts first and hashes the whole file only when an installed model could
be the same one; it returns the full hash whenever it computed it, so the converter need not
hash the file again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path

from app.errors import HearthError
from app.manifest import sha256_file
from app.models.installed import InstalledModel

QUICK_SPAN = 1 << 20


class AlreadyInstalledError(HearthError):
    """The GGUF is installed already; ``model`` is the installed model."""

    def __init__(self, src: Path, model: InstalledModel, precision: str) -> None:
        super().__init__(
            f"{src.name} is already installed as “{model.name}” ({precision} precision).",
            hint="Open it instead, or delete it first to import the file again.",
        )
        self.model = model


def quick_fingerprint(path: Path) -> str:
    """sha256 of the size and the first and last MiB: equal files always match, and files
    that differ anywhere a header or a tail would show it rarely do."""
    size = Path(path).stat().st_size
    digest = hashlib.sha256(size.to_bytes(8, "little"))
    with open(path, "rb") as handle:
        digest.update(handle.read(QUICK_SPAN))
        handle.seek(max(0, size - QUICK_SPAN))
        digest.update(handle.read(QUICK_SPAN))
    return digest.hexdigest()


def precision_of(model: InstalledModel) -> str:
    """How an installed GGUF model was converted ("native" for older manifests)."""
    value = model.manifest.extra.get("precision") or model.source.get("variant")
    return str(value or "native")


def attention_of(model: InstalledModel) -> str:
    """The attention form an installed GGUF model was converted with ("gqa" for manifests
    from before the record)."""
    return str((model.manifest.extra.get("conversion") or {}).get("attention") or "gqa")


def find_installed(
    models: Iterable[InstalledModel],
    src: Path,
    precision: str,
    *,
    on_block: Callable[[int], None] | None = None,
    attention: str | None = None,
) -> tuple[InstalledModel | None, str | None]:
    """(the installed model converted from the same bytes at ``precision`` — and in the
    attention form ``attention`` when one is named; None: any form — or None; the file's
    sha256 when it had to be computed, else None). ``on_block(bytes_done)`` runs while
    hashing (a checkpoint may raise there to cancel)."""
    candidates = [
        m for m in models
        if m.source_kind == "gguf" and m.source.get("sha256") and precision_of(m) == precision
        and (attention is None or attention_of(m) == attention)
    ]  # fmt: skip
    if not candidates:
        return None, None
    size, quick = Path(src).stat().st_size, quick_fingerprint(src)
    maybe = [
        m for m in candidates
        if m.source.get("size") in (None, size) and m.source.get("quick_sha256") in (None, quick)
    ]  # fmt: skip
    if not maybe:
        return None, None
    full = sha256_file(src, on_block=on_block)
    return next((m for m in maybe if m.source["sha256"] == full), None), full
