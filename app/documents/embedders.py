"""The embedders a library can use: the starter (converted from its wheel) and the Hub
embedders of the embedder catalog (``resources/embedders.json``), downloaded into
``paths.embedders_dir()`` by the chat models' Hub machinery.

``EmbedderStore`` is the downloader's install target (``app/models/downloader.py``
``InstallTarget``): ``plan`` lists the repo once and refuses, before any byte is fetched, a
listing that lacks a file the entry needs (its graph, its external data, tokenizer.json);
``download`` fetches and verifies with progress, pause, cancel and resume as for chat models;
the verified folder gains the entry's ``embedder.json`` (pooling, prefixes, window) and moves
into place with one rename. ``folder(id)`` is where an embedder id is loaded from.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import paths
from app.documents.starter_embedder import (
    CONFIG_NAME,
    EMBEDDER_ID,
    EMBEDDER_NAME,
    ensure_embedder,
    find_embedder_wheel,
    installed_embedder,
)
from app.errors import HearthError
from app.fileio import write_json_atomic
from app.jobs import JobControl
from app.manifest import Manifest
from app.models.catalog import Variant
from app.models.downloader import DownloadRequest, ProgressCallback
from app.models.embedder_catalog import EmbedderCatalog, EmbedderEntry, load_embedder_catalog
from app.models.installed import InstalledModel
from app.models.library import folder_size, validate_id
from app.models.revision_record import RevisionRecord

#: the embedder a library gets when none is chosen
DEFAULT_EMBEDDER = EMBEDDER_ID
_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class EmbedderChoice:
    """One embedder a library may use, as Settings ▸ Documents and ``docs embedders`` list."""

    id: str
    name: str
    dims: int
    installed: bool
    entry: EmbedderEntry | None = None  # None: the starter

    def as_dict(self) -> dict:
        info = {"id": self.id, "name": self.name, "dims": self.dims,
                "installed": self.installed, "source": "starter" if self.entry is None
                else f"hub:{self.entry.repo}"}
        if self.entry is not None:
            info.update(license=self.entry.license, size_bytes=self.entry.variant.size_bytes,
                        query_prefix=self.entry.query_prefix,
                        document_prefix=self.entry.document_prefix,
                        pooling=self.entry.pooling, max_tokens=self.entry.max_tokens)
        return info


class EmbedderStore:
    """The embedders folder: installed embedders, plans and downloads of catalog ones."""

    def __init__(self, root: Path | None = None, *, endpoint: str | None = None,
                 token: str | None = None, staging_root: Path | None = None,
                 catalog: EmbedderCatalog | None = None,
                 downloader_options: dict[str, Any] | None = None) -> None:
        self._root = Path(root) if root is not None else paths.embedders_dir()
        self._root.mkdir(parents=True, exist_ok=True)
        self.endpoint, self.token = endpoint, token
        self.staging_root = staging_root
        self.catalog = catalog or load_embedder_catalog()
        self.downloader_options = dict(downloader_options or {})

    @property
    def root(self) -> Path:
        return self._root

    # -- installed ----------------------------------------------------------------------

    def get(self, model_id: str) -> InstalledModel | None:
        """The downloaded embedder ``model_id`` (manifest and embedder.json), else None."""
        folder = self._root / model_id
        manifest = Manifest.read(folder) if (folder / CONFIG_NAME).is_file() else None
        if manifest is None:
            return None
        return InstalledModel(manifest.id, manifest.name, folder, manifest, folder_size(folder))

    def install_from_staging(self, staging: Path, manifest: Manifest) -> InstalledModel:
        """Write the entry's embedder.json and the manifest, then rename into place."""
        entry = self.catalog.get(manifest.id)
        dest = self._root / validate_id(manifest.id)
        if dest.exists():
            raise HearthError(f"An embedder called '{manifest.id}' is already in {self._root}.")
        write_json_atomic(Path(staging) / CONFIG_NAME, entry.embedder_config())
        manifest.write(Path(staging))
        try:
            os.rename(staging, dest)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.copytree(staging, dest.with_name(dest.name + ".partial"))
            dest.with_name(dest.name + ".partial").rename(dest)
            shutil.rmtree(staging, ignore_errors=True)
        installed = self.get(manifest.id)
        assert installed is not None
        return installed

    def is_available(self, embedder_id: str) -> bool:
        """Whether ``folder(embedder_id)`` can answer without a download."""
        if embedder_id == EMBEDDER_ID:
            return installed_embedder(self._root) is not None or find_embedder_wheel() is not None
        return self.get(embedder_id) is not None

    def folder(self, embedder_id: str) -> Path:
        """The folder to load ``embedder_id`` from (the starter converts on first use)."""
        if embedder_id == EMBEDDER_ID:
            return ensure_embedder(root=self._root)
        installed = self.get(embedder_id)
        if installed is not None:
            return installed.path
        entry = self.catalog.get(embedder_id)  # raises for an id Hearth does not know
        raise HearthError(f"The embedder {entry.name} is not downloaded yet.",
                          hint=f"Download it in Settings ▸ Documents, or with hearth docs add "
                               f"PATH --embedder {entry.id}.")

    def choices(self) -> list[EmbedderChoice]:
        """The starter first, then the catalog's embedders."""
        starter = EmbedderChoice(EMBEDDER_ID, EMBEDDER_NAME, 384, self.is_available(EMBEDDER_ID))
        return [starter, *(EmbedderChoice(e.id, e.name, e.dims, self.get(e.id) is not None, e)
                           for e in self.catalog)]

    def dims_of(self, embedder_id: str) -> int:
        if embedder_id == EMBEDDER_ID:
            return 384
        return self.catalog.get(embedder_id).dims

    # -- downloads ----------------------------------------------------------------------

    def plan(self, key: str) -> DownloadRequest:
        """What to download for the catalog embedder ``key``: the repo resolved to a commit
        (the one recorded at its first download, if any) and listed once. Raises HearthError
        when the listing lacks a file the entry names, before anything is downloaded."""
        from app.models.hub import HubClient

        entry = self.catalog.get(key)
        hub = HubClient(self.endpoint, self._token())
        commit = RevisionRecord(self._root).get(entry.repo) or hub.resolve_revision(
            entry.repo, entry.revision)
        files = hub.list_files(entry.repo, commit)
        listed = {f.path for f in files}
        variant = entry.variant
        needed = [p for p in variant.include if p == "tokenizer.json"
                  or p.endswith((".onnx", ".onnx_data"))]
        missing = [p for p in needed if not _WILDCARDS & set(p) and p not in listed]
        if missing:
            raise HearthError(
                f"{entry.repo} at {commit[:12]} has no {', '.join(missing)}, which the "
                f"embedder {entry.name} needs, so nothing was downloaded.",
                hint="The embedder catalog may be out of date; update Hearth or choose "
                     "another embedder.")
        if not any(p.endswith(".onnx_data") for p in variant.include):
            data = sorted(p for p in listed if p.startswith(entry.graph + "_data")
                          or p == entry.graph + ".data")
            if data:  # external data the entry did not name: fetch it too
                variant = Variant(variant.name, variant.provider,
                                  include=(*variant.include, *data))
        size = sum(f.size for f in files if variant.selects(f.path))
        variant = Variant(variant.name, variant.provider, include=variant.include,
                          size_bytes=size, ram_bytes=variant.ram_bytes)
        return DownloadRequest(model_id=entry.id, name=entry.name, repo=entry.repo,
                               revision=commit, variant=variant, format="embedder",
                               parameters=entry.parameters, license=entry.license,
                               listing=tuple(files))

    def download(self, plan: DownloadRequest, *, progress: ProgressCallback | None = None,
                 control: JobControl | None = None) -> InstalledModel:
        """Fetch, verify and install ``plan`` (resumes what an earlier run left)."""
        from app.models.downloader import Downloader

        downloader = Downloader(self, endpoint=self.endpoint, token=self._token(),
                                staging_root=self.staging_root, **self.downloader_options)
        return downloader.download(plan, progress=progress, control=control)

    def _token(self) -> str | None:
        """The Hub token given, else the one saved in the keyring (found when needed)."""
        if self.token is None:
            from app.secrets import hub_token

            self.token = hub_token() or ""
        return self.token or None

    def ensure(self, embedder_id: str, *, progress: ProgressCallback | None = None,
               control: JobControl | None = None) -> Path:
        """``folder(embedder_id)``, downloading a catalog embedder first when needed."""
        if embedder_id != EMBEDDER_ID and self.get(embedder_id) is None:
            self.download(self.plan(embedder_id), progress=progress, control=control)
        return self.folder(embedder_id)
