"""The remote engines the user added: name, base URL, where the key is, model ids typed by
hand (for servers without ``/v1/models``). Kept in ``remote-engines.json`` in the data
folder (written 0600, all-or-nothing); the API key and any user name and password typed in
the address live in the secret store (``app.secrets``), never in this file. A file from an
older Hearth with a password in an address is moved over when it is read.

Plain ``http://`` to another machine is saved only when the caller says the user agreed
(``cleartext_ok``): the chats and the key would cross the network unencrypted."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from app.fileio import read_json, write_json_atomic
from app.paths import data_root
from app.remote.errors import RemoteError
from app.remote.urls import Login, is_cleartext_remote, normalize_base_url, split_login
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
    login_place: str | None = None  # where the address's user name and password went

    def target(self, model_id: str) -> str:
        return remote_target(self.id, model_id)


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:40] or "remote"


def _login_name(source_id: str) -> str:
    """The secret store's name for a source's user name and password."""
    return f"{source_id}:login"


def cleartext_error(url: str) -> RemoteError:
    return RemoteError(
        f"{normalize_base_url(url)} is plain http:// to another machine: the chats and the "
        "API key would cross the network unencrypted, readable by anyone on the way.",
        kind="cleartext",
        hint="Use https:// if the server offers it, or confirm that this network is trusted.")


class SourceStore:
    """Adds, lists and removes remote sources; one JSON file, written atomically."""

    def __init__(self, path: Path | None = None, keys: SecretStore | None = None) -> None:
        self.path = path or data_root() / SOURCES_NAME
        self.keys = keys or remote_keys()

    def list(self) -> list[RemoteSource]:
        rows = read_json(self.path).get("sources")
        rows = rows if isinstance(rows, list) else []
        ids = {str(row.get("id")) for row in rows if isinstance(row, dict)}
        sources = []
        moved = False
        for row in rows:
            try:
                source = RemoteSource(
                    id=str(row["id"]), name=str(row["name"]), base_url=str(row["base_url"]),
                    key_place=row.get("key_place"),
                    models=tuple(str(m) for m in row.get("models") or ()),
                    login_place=row.get("login_place"))
            except (KeyError, TypeError, AttributeError):
                continue  # a hand-edited row that lost a field
            clean, login = split_login(source.base_url)
            if login is not None:
                source = self._move_login(source, clean, login, ids)
                ids.add(source.id)
                moved = True
            sources.append(source)
        if moved:
            self._write(sources)
        return sources

    def _move_login(self, source: RemoteSource, clean: str, login: Login,
                    taken: set[str]) -> RemoteSource:
        """An older file's row with ``user:password@`` in its address: the login goes to
        the secret store; the name (and the id, where they were made from the address)
        lose it."""
        netloc = clean.split("://", 1)[-1].split("/", 1)[0]
        name = re.sub(r"[^\s/@]*@", "", source.name)
        if login[1] and login[1] in name:
            name = netloc
        source_id = source.id
        secret_slug = _slug(login[1]) if login[1] else ""
        if len(secret_slug) >= 3 and secret_slug in source_id:
            source_id = _slug(name or netloc)
            while source_id in taken:
                source_id = f"{_slug(name or netloc)}-{uuid.uuid4().hex[:4]}"
            if source.key_place:
                key = self.keys.get(source.id)
                self.keys.delete(source.id)
                if key:
                    self.keys.set(source_id, key)
        login_place = self.keys.set(_login_name(source_id), json.dumps(list(login)))
        try:
            base = normalize_base_url(clean)
        except RemoteError:
            base = clean  # a hand-edited address: it says why when it is used
        return RemoteSource(source_id, name or netloc, base, source.key_place, source.models,
                            login_place)

    def get(self, source_id: str) -> RemoteSource | None:
        return next((s for s in self.list() if s.id == source_id), None)

    def add(self, name: str, url: str, api_key: str | None = None,
            models: tuple[str, ...] | list[str] = (), *,
            cleartext_ok: bool = False) -> RemoteSource:
        """Save a new source (its key, and any user name and password in ``url``, to the
        secret store). Raises RemoteError for a bad URL, for plain http:// to another
        machine unless ``cleartext_ok``, and for a login in the URL together with a key."""
        base = normalize_base_url(url)
        _, login = split_login(url)
        if is_cleartext_remote(base) and not cleartext_ok:
            raise cleartext_error(base)
        api_key = api_key.strip() if api_key else None
        if login is not None and api_key:
            raise RemoteError(
                f"The address of {base} holds a user name and password, and an API key was "
                "given too: both would need the one Authorization header.", kind="url",
                hint="Give either the API key or the user name and password in the address.")
        name = name.strip() or base.split("://", 1)[1]
        existing = self.list()
        taken = {s.id for s in existing}
        source_id = _slug(name)
        while source_id in taken:
            source_id = f"{_slug(name)}-{uuid.uuid4().hex[:4]}"
        place = self.keys.set(source_id, api_key) if api_key else None
        login_place = (self.keys.set(_login_name(source_id), json.dumps(list(login)))
                       if login is not None else None)
        source = RemoteSource(source_id, name, base, place,
                              tuple(m.strip() for m in models if m.strip()), login_place)
        self._write([*existing, source])
        return source

    def remove(self, source_id: str) -> bool:
        sources = self.list()
        kept = [s for s in sources if s.id != source_id]
        if len(kept) == len(sources):
            return False
        self._write(kept)
        self.keys.delete(source_id)
        self.keys.delete(_login_name(source_id))
        return True

    def api_key(self, source: RemoteSource) -> str | None:
        return self.keys.get(source.id) if source.key_place else None

    def login(self, source: RemoteSource) -> Login | None:
        """The (user name, password) typed in the source's address, or None."""
        raw = self.keys.get(_login_name(source.id)) if source.login_place else None
        try:
            user, password = json.loads(raw) if raw else (None, None)
        except (ValueError, TypeError):
            return None
        return (str(user), str(password)) if user is not None else None

    def _write(self, sources: list[RemoteSource]) -> None:
        rows = [{**asdict(s), "models": list(s.models)} for s in sources]
        write_json_atomic(self.path, {"version": 1, "sources": rows}, mode=0o600)


REMOTE_SERVICE = "Hearth remote engines"
REMOTE_KEYS_FILE = "remote-engine-keys-NOT-ENCRYPTED.json"


def remote_keys() -> SecretStore:
    """Where remote engines' API keys are kept (by source id)."""
    return SecretStore(REMOTE_SERVICE, data_root() / REMOTE_KEYS_FILE, what="The API key")
