"""KV cache snapshots on disk, so a long chat reopens without re-reading its history.

A snapshot is one ``.npz`` (the valid positions of every K and V tensor) plus a ``.json``
that says what it belongs to: the model's fingerprint (its folder, and per file the sha256
from the model's manifest or else size and modification time), the exact token ids the
tensors cover, and their shapes and dtypes. Loading checks all of it and ignores a snapshot
that does not match; the engine then simply prefills. Snapshots are a cache: deleting the
folder loses nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from app.engine.kv_cache import KVCache
from app.engine.types import ModelSpec
from app.fileio import read_json, write_json_atomic
from app.manifest import Manifest

FORMAT = 1


def model_fingerprint(spec: ModelSpec) -> str:
    """A short id that changes whenever the model's files do."""
    manifest = Manifest.read(spec.root)
    hashes = manifest.file_hashes() if manifest is not None else {}
    parts = [str(spec.root.resolve()), spec.variant]
    files = [spec.model_path, spec.tokenizer_path]
    files += sorted(p for p in spec.model_path.parent.glob(spec.model_path.name + "*data*"))
    for path in files:
        relative = path.relative_to(spec.root).as_posix()
        digest = hashes.get(relative)
        if digest:
            parts.append(f"{relative}:{digest}")
        else:
            stat = path.stat()
            parts.append(f"{relative}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _safe_name(conversation_id: str) -> str:
    return hashlib.sha256(conversation_id.encode()).hexdigest()[:32]


class SnapshotStore:
    """Snapshots of one model's caches under ``folder / fingerprint``."""

    def __init__(self, folder: Path, fingerprint: str, *,
                 signature: Sequence[tuple[tuple[int, ...], str]] = (), keep: int = 8,
                 min_tokens: int = 256) -> None:
        self.folder = Path(folder) / fingerprint
        self.fingerprint = fingerprint
        #: Each tensor's (shape without the sequence axis, dtype) as the graph defines it.
        self.signature = tuple(signature)
        self.keep = keep
        self.min_tokens = min_tokens

    def _paths(self, conversation_id: str) -> tuple[Path, Path]:
        stem = self.folder / _safe_name(conversation_id)
        return stem.with_suffix(".npz"), stem.with_suffix(".json")

    def save(self, conversation_id: str, cache: KVCache) -> bool:
        """Write ``cache``; False when it is too short or cannot be exported exactly."""
        if len(cache) < self.min_tokens or not cache.exportable:
            return False
        try:
            arrays = cache.export_arrays()
        except NotImplementedError:
            return False
        self.folder.mkdir(parents=True, exist_ok=True)
        data_path, meta_path = self._paths(conversation_id)
        tmp = data_path.with_name(data_path.stem + ".tmp.npz")
        try:
            np.savez(tmp, *arrays)
            os.replace(tmp, data_path)
            meta = {
                "format": FORMAT, "model": self.fingerprint, "conversation": conversation_id,
                "tokens": list(cache.tokens),
                "arrays": [{"shape": list(a.shape), "dtype": str(a.dtype)} for a in arrays],
            }
            write_json_atomic(meta_path, meta, indent=None)
        except OSError:  # a full disk must not break the chat: the snapshot is only a cache
            for path in (tmp, data_path, meta_path):
                with contextlib.suppress(OSError):
                    path.unlink()
            return False
        self._prune()
        return True

    def load(self, conversation_id: str, cache: KVCache,
             expected: Sequence[tuple[tuple[int, ...], str]] | None = None) -> bool:
        """Fill the empty ``cache`` from disk if a matching snapshot exists.

        ``expected`` (by default the store's ``signature``) gives each tensor's (shape
        without the sequence axis, dtype) as the graph defines it; anything that does not
        match is ignored (and deleted)."""
        expected = self.signature if expected is None else expected
        if not expected or not cache.exportable:
            return False
        data_path, meta_path = self._paths(conversation_id)
        meta = read_json(meta_path)
        if not meta or not data_path.is_file():
            return False
        try:
            tokens = [int(t) for t in meta["tokens"]]
            valid = (meta.get("format") == FORMAT and meta.get("model") == self.fingerprint
                     and meta.get("conversation") == conversation_id
                     and len(meta["arrays"]) == len(expected))
            if valid:
                with np.load(data_path) as archive:
                    arrays = [archive[f"arr_{i}"] for i in range(len(expected))]
                valid = all(
                    a.shape[2] == len(tokens) and (*a.shape[:2], *a.shape[3:]) == shape
                    and str(a.dtype) == dtype
                    for a, (shape, dtype) in zip(arrays, expected, strict=True)
                )
            if not valid:
                raise ValueError("snapshot does not match")
            cache.import_arrays(tokens, arrays)
        except (KeyError, ValueError, TypeError, OSError, NotImplementedError):
            self.delete(conversation_id)
            return False
        os.utime(meta_path)  # recently used: pruned last
        return True

    def delete(self, conversation_id: str) -> None:
        for path in self._paths(conversation_id):
            with contextlib.suppress(OSError):
                path.unlink()

    def _prune(self) -> None:
        metas = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime,
                       reverse=True)
        for meta in metas[self.keep:]:
            for path in (meta, meta.with_suffix(".npz")):
                with contextlib.suppress(OSError):
                    path.unlink()
