"""``hearth-manifest.json``: what an installed model folder is and where it came from.

The only code that knows the manifest's file name and fields. A manifest records the model's
id and display name, its source (``kind`` "hub" / "gguf" / "local" with repo, revision,
variant and path), its layout ("genai" / "optimum"), every file with its size and sha256, and
what the catalog knew (context length, parameters, license). Fields other writers add (the
GGUF converter's ``precision`` and ``conversion``) are kept as they are.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from app.fileio import read_json, write_json_atomic

MANIFEST_NAME = "hearth-manifest.json"


def now_iso() -> str:
    """The current UTC time to the second, as manifests record it."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def sha256_file(
    path: Path, chunk: int = 1 << 20, on_block: Callable[[int], None] | None = None
) -> str:
    """The hex sha256 of a file, read in ``chunk``-byte blocks; ``on_block(bytes_done)``
    runs after each block (it may raise to stop, e.g. a job's checkpoint)."""
    digest = hashlib.sha256()
    done = 0
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
            done += len(block)
            if on_block is not None:
                on_block(done)
    return digest.hexdigest()


def describe_files(folder: Path, *, with_sha256: bool = True) -> list[dict]:
    """``[{"path", "size", "sha256"}]`` for every file under ``folder`` except the manifest."""
    files = []
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
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


def source(
    kind: str,
    *,
    repo: str | None = None,
    revision: str | None = None,
    variant: str | None = None,
    path: str | None = None,
    **extra: Any,
) -> dict:
    """A manifest's ``source`` record (``extra``: e.g. the Hub ``endpoint`` or a ``sha256``)."""
    return {
        "kind": kind,
        "repo": repo,
        "revision": revision,
        "variant": variant,
        "path": path,
        **extra,
    }


@dataclass
class Manifest:
    """One model folder's manifest. ``extra`` holds fields this class does not name."""

    id: str
    name: str
    source: dict = field(default_factory=lambda: source("local"))
    format: str | None = None
    files: list[dict] = field(default_factory=list)
    installed_at: str | None = None
    context_length: int | None = None
    parameters: int | None = None
    license: str | None = None
    extra: dict = field(default_factory=dict)

    @staticmethod
    def path_in(folder: Path) -> Path:
        return Path(folder) / MANIFEST_NAME

    @classmethod
    def exists_in(cls, folder: Path) -> bool:
        return cls.path_in(folder).is_file()

    @classmethod
    def read(cls, folder: Path) -> Manifest | None:
        """The manifest in ``folder``; None when it is missing, unreadable or empty."""
        data = read_json(cls.path_in(folder))
        if not data:
            return None
        return cls.from_dict(data, default_id=Path(folder).name)

    @classmethod
    def from_dict(cls, data: dict, *, default_id: str = "") -> Manifest:
        named = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in data.items() if k in named}
        values["id"] = str(values.get("id") or default_id)
        name = data.get("name") or data.get("display_name") or data.get("title")
        values["name"] = str(name).strip() if isinstance(name, str) and name.strip() else ""
        values["name"] = values["name"] or values["id"]
        if not isinstance(values.get("source"), dict):
            values["source"] = source("local")
        if not isinstance(values.get("files"), list):
            values["files"] = []
        extra = {k: v for k, v in data.items() if k not in named}
        return cls(**values, extra=extra)

    def as_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**data, **self.extra}

    def write(self, folder: Path) -> None:
        """Write atomically into ``folder`` (stamping ``installed_at`` when unset)."""
        if not self.installed_at:
            self.installed_at = now_iso()
        write_json_atomic(self.path_in(folder), self.as_dict(), ensure_ascii=False)

    @property
    def source_kind(self) -> str:
        return self.source.get("kind") or "local"

    def file_hashes(self) -> dict[str, str]:
        """``{relative path: sha256}`` for the files recorded with a hash."""
        return {
            f["path"]: f["sha256"]
            for f in self.files
            if isinstance(f, dict) and f.get("path") and f.get("sha256")
        }
