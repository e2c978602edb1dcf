"""The remote engines the user added: name, base URL, where the key is, model ids typed by
hand (for servers without ``/v1/models``). Kept in ``remote-engines.json`` in the data
folder; the key itself lives in the secret store (``app.secrets``), never in this file."""

from __future__ import annotations

import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from app.fileio import read_json, write_json_atomic
from app.paths import data_root
from app.remote.errors import RemoteError
from app.remote.urls import normalize_base_url
from app.secrets import SecretStore

SOURCES_NAME = "remote-engines.json"
TARGET_PREFIX = "remote:"


def remote_target(source_id: str, model_id: str) -> str:
    """The "model path" the generation worker loads: ``remote:<source-id>/<model-id>``."""
    return f"{TARGET_PREFIX}{source_id}/{model_id}"


def is_remote_target(path: object) -> bool:
    return str(path).startswith(TARGET_PREFIX)


def parse_target(path: object) -> tuple[str, str]:
    """(source id, model id) of a remote target; model ids may hold "/" and ":"."""
    text = str(path).replace("\\", "/")  # a Windows Path turned the slashes round
    if not text.startswith(TARGET_PREFIX) or "/" not in text[len(TARGET_PREFIX):]:
        raise RemoteError(f"“{path}” does not name a remote model (remote:<engine>/<model>).",
                          kind="url")
    source_id, model_id = text[len(TARGET_PREFIX):].split("/", 1)
    if not source_id or not model_id:
        raise RemoteError(f"“{path}” does not name a remote model (remote:<engine>/<model>).",
                          kind="url")
    return source_id, model_id


@dataclass(frozen=True)
class RemoteSource:
    id: str
    name: str
    base_url: str
    key_place: str | None = None  # "keyring" | "file" | None (no key)
    models: tuple[str, ...] = field(default_factory=tuple)  # ids typed by hand

    def target(self, model_id: str) -> str:
        return remote_target(self.id, model_id)


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:40] or "remote"


class SourceStore:
    """Adds, lists and removes remote sources; one JSON file, written atomically."""

    def __init__(self, path: Path | None = None, keys: SecretStore | None = None) -> None:
        self.path = path or data_root() / SOURCES_NAME
        self.keys = keys or remote_keys()

    def list(self) -> list[RemoteSource]:
        rows = read_json(self.path).get("sources")
        sources = []
        for row in rows if isinstance(rows, list) else []:
            try:
                sources.append(RemoteSource(
                    id=str(row["id"]), name=str(row["name"]), base_url=str(row["base_url"]),
                    key_place=row.get("key_place"),
                    models=tuple(str(m) for m in row.get("models") or ())))
            except (KeyError, TypeError):
                continue  # a hand-edited row that lost a field
        return sources

    def get(self, source_id: str) -> RemoteSource | None:
        return next((s for s in self.list() if s.id == source_id), None)

    def add(self, name: str, url: str, api_key: str | None = None,
            models: tuple[str, ...] | list[str] = ()) -> RemoteSource:
        """Save a new source (its key to the secret store). Raises RemoteError for a bad URL."""
        base = normalize_base_url(url)
        name = name.strip() or base.split("://", 1)[1]
        taken = {s.id for s in self.list()}
        source_id = _slug(name)
        while source_id in taken:
            source_id = f"{_slug(name)}-{uuid.uuid4().hex[:4]}"
        place = self.keys.set(source_id, api_key.strip()) if api_key and api_key.strip() else None
        source = RemoteSource(source_id, name, base, place,
                              tuple(m.strip() for m in models if m.strip()))
        self._write([*self.list(), source])
        return source

    def remove(self, source_id: str) -> bool:
        sources = self.list()
        kept = [s for s in sources if s.id != source_id]
        if len(kept) == len(sources):
            return False
        self._write(kept)
        self.keys.delete(source_id)
        return True

    def api_key(self, source: RemoteSource) -> str | None:
        return self.keys.get(source.id) if source.key_place else None

    def _write(self, sources: list[RemoteSource]) -> None:
        rows = [{**asdict(s), "models": list(s.models)} for s in sources]
        write_json_atomic(self.path, {"version": 1, "sources": rows})


REMOTE_SERVICE = "Hearth remote engines"
REMOTE_KEYS_FILE = "remote-engine-keys-NOT-ENCRYPTED.json"


def remote_keys() -> SecretStore:
    """Where remote engines' API keys are kept (by source id)."""
    return SecretStore(REMOTE_SERVICE, data_root() / REMOTE_KEYS_FILE, what="The API key")
