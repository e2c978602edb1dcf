"""The models on disk: one owner for the models folder, what is installed and what to fetch.

``ModelLibrary`` is plain Python (no Qt); the CLI, the GUI's controller and tests all go
through it. It owns:

- the installed models: one folder per model id under the models folder, each with a
  :class:`~app.manifest.Manifest`. A model exists only once its folder is in place:
  downloads and conversions are built in the staging folder and moved here with one atomic
  rename. A local folder imported "in place" is registered with a small link folder holding
  only the manifest; removing it never touches the user's files. A model folder copied into
  the models folder by hand (``genai_config.json`` or ``config.json``, no manifest) counts too.
- the default model: the last one used while it is still there, else the starter, else the
  first installed (newest first).
- download plans for a catalog entry or any Hub repo id
  (:func:`app.models.repo_variant.variant_for_repo` chooses what to fetch from a repo outside
  the catalog), and the download itself (resumable, verified).
- removal and imports (a folder in place, a GGUF file through the converter).

Which provider this machine has is :mod:`app.machine`'s answer; which build suits it,
:mod:`app.engine.policy`'s.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import paths
from app.engine import policy
from app.errors import DiskFullError, HearthError
from app.machine import chosen_provider
from app.manifest import Manifest, describe_files, now_iso, source
from app.models.catalog import (
    Catalog,
    CatalogEntry,
    FitReport,
    MachineInfo,
    Variant,
    choose_variant,
    fit_report,
    load_catalog,
    probe_machine,
)
from app.models.installed import InstalledModel
from app.models.repo_variant import variant_for_repo
from app.models.revision_record import RevisionRecord
from app.models.starter_ids import STARTER_CATALOG_ID, STARTER_ID

if TYPE_CHECKING:
    from app.models.downloader import (
        DownloadControl,
        Downloader,
        DownloadRequest,
        ProgressCallback,
    )
    from app.models.hub import HubClient
    from app.settings import Settings

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
# Files that make a folder without a manifest a model folder (copied in by hand).
MODEL_MARKERS = ("genai_config.json", "config.json")


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


def folder_size(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
    return total


def is_model_folder(path: Path) -> bool:
    """Whether ``path`` holds a model the engine may read (a genai or Optimum config)."""
    return path.is_dir() and any((path / marker).is_file() for marker in MODEL_MARKERS)


@dataclass(frozen=True)
class CatalogChoice:
    """A catalog entry as this machine sees it: the variant it would get, whether it is
    installed, and whether that variant fits."""

    entry: CatalogEntry
    variant: Variant
    installed: bool
    fit: FitReport


class ModelLibrary:
    """The models folder and everything about the models in it. Holds no open files.

    ``root``: the models folder (default ``paths.models_dir()``). ``settings``: where the last
    used model is remembered (default: the user's settings, read when first needed).
    ``endpoint`` / ``token``: the Hub or mirror for plans and downloads. ``staging_root`` and
    ``downloader_options`` go to the :class:`~app.models.downloader.Downloader`.
    """

    def __init__(
        self,
        root: Path | None = None,
        *,
        settings: Settings | None = None,
        endpoint: str | None = None,
        token: str | None = None,
        staging_root: Path | None = None,
        catalog: Catalog | None = None,
        downloader_options: dict[str, Any] | None = None,
    ) -> None:
        self.root = Path(root) if root is not None else paths.models_dir()
        self.root.mkdir(parents=True, exist_ok=True)
        self.endpoint = endpoint
        self.token = token
        self.staging_root = staging_root
        self.downloader_options = dict(downloader_options or {})
        self._settings = settings
        self._catalog = catalog

    # -- installed models ----------------------------------------------------------------

    def list_models(self) -> list[InstalledModel]:
        """Every installed model, newest first (folders copied in by hand last)."""
        models = []
        for folder in sorted(self.root.iterdir()):
            if folder.name.startswith(".") and folder.name.endswith(".old"):
                folder = _put_back(folder)  # a swap cut off between its two renames
            if folder.name.startswith(".") or not folder.is_dir():
                continue
            model = self._read(folder)
            if model is not None:
                models.append(model)
        models.sort(key=lambda m: m.manifest.installed_at or "", reverse=True)
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

    def find_path(self, path: Path | str) -> InstalledModel | None:
        """The installed model whose engine folder is ``path``."""
        wanted = Path(path).expanduser().resolve()
        return next((m for m in self.list_models() if m.path.resolve() == wanted), None)

    def _read(self, folder: Path) -> InstalledModel | None:
        manifest = Manifest.read(folder)
        if manifest is None:
            if not is_model_folder(folder):
                return None
            manifest = Manifest(folder.name, folder.name, source=source("folder"))
        target = folder
        if manifest.source_kind == "local" and manifest.source.get("path"):
            target = Path(manifest.source["path"])
        return InstalledModel(
            id=folder.name,
            name=manifest.name,
            path=target,
            manifest=manifest,
            size_on_disk=folder_size(target) if target.is_dir() else 0,
        )

    # -- the default model ---------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from app.settings import Settings

            self._settings = Settings()
        return self._settings

    def default_model(self, last_used: str | Path | None = None) -> InstalledModel | None:
        """The model to open: the last one used while its folder is still a model, else the
        starter when installed, else the first installed (newest first), else None.

        ``last_used`` (a folder) replaces what the settings remember."""
        if last_used is None:
            last_used = self.settings.get("last_model")
        if last_used:
            folder = Path(last_used).expanduser()
            found = self.find_path(folder) if folder.is_dir() else None
            if found is not None:
                return found
            if is_model_folder(folder):  # opened directly, never installed
                manifest = Manifest(folder.name, folder.name, source=source("folder"))
                return InstalledModel(folder.name, folder.name, folder, manifest, 0)
        models = self.list_models()
        starter = next((m for m in models if m.id == STARTER_ID), None)
        return starter or (models[0] if models else None)

    def set_last_used(self, model: InstalledModel | Path | str) -> None:
        """Remember the model the user chatted with last (its folder, in the settings)."""
        path = model.path if isinstance(model, InstalledModel) else Path(model)
        self.settings.set("last_model", str(path))
        self.settings.save()

    # -- installing ----------------------------------------------------------------------

    def install_from_staging(
        self, staging: Path, manifest: Manifest | dict, *, replace_incomplete: bool = False
    ) -> InstalledModel:
        """Write ``manifest`` into ``staging`` and move the folder into place atomically.

        Refuses when a model with that id is already installed (``replace_incomplete``: a
        folder of that id without a manifest, a copy cut short, is deleted first). When the
        models folder is
        on another file system than the staging folder, the data is copied next to the
        destination first, so the final step is still one rename; when that copy fails
        (DiskFullError / HearthError) ``staging`` is left as it was.
        """
        if isinstance(manifest, dict):
            manifest = Manifest.from_dict(manifest)
        model_id = validate_id(manifest.id)
        dest = self.root / model_id
        if replace_incomplete and dest.is_dir() and not Manifest.exists_in(dest):
            shutil.rmtree(dest)
        if dest.exists():
            raise _already_installed(model_id)
        staging = Path(staging)
        manifest.write(staging)
        try:
            os.rename(staging, dest)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                if dest.exists():
                    raise _already_installed(model_id) from exc
                raise
            self._copy_into_place(staging, dest)
        installed = self.get(model_id)
        assert installed is not None
        return installed

    def replace_from_staging(self, staging: Path, manifest: Manifest | dict) -> InstalledModel:
        """Swap ``staging`` in for the installed model of the manifest's id (a new conversion
        of it); installs it when none is there. The old folder stays until the new one is
        complete beside it, and stays in use (the new one is dropped) when the swap fails:
        in use on Windows, or read-only."""
        if isinstance(manifest, dict):
            manifest = Manifest.from_dict(manifest)
        model_id = validate_id(manifest.id)
        dest = self.root / model_id
        if not dest.exists():
            return self.install_from_staging(staging, manifest)
        fresh = dest.with_name(f".{model_id}.new")
        old = dest.with_name(f".{model_id}.old")
        for leftover in (fresh, old):
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(staging)
        manifest.write(staging)
        try:
            os.rename(staging, fresh)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            self._copy_into_place(staging, fresh)
        try:
            os.replace(dest, old)
        except OSError:  # in use (Windows) or read-only: keep the old one
            shutil.rmtree(fresh, ignore_errors=True)
            return self.require(model_id)
        try:
            os.replace(fresh, dest)
        except OSError:
            os.replace(old, dest)  # put the old one back
            shutil.rmtree(fresh, ignore_errors=True)
            return self.require(model_id)
        shutil.rmtree(old, ignore_errors=True)
        return self.require(model_id)

    def _copy_into_place(self, staging: Path, dest: Path) -> None:
        """Copy ``staging`` next to ``dest`` (another file system), rename it into place, then
        delete ``staging``. A failed copy deletes only the half-made copy: ``staging`` stays
        whole, so a download is not fetched again."""
        incoming = self.root / f".incoming-{dest.name}-{uuid.uuid4().hex[:8]}"
        try:
            shutil.copytree(staging, incoming, copy_function=_copy_file)
            os.rename(incoming, dest)
        except (OSError, _DiskFull) as exc:
            shutil.rmtree(incoming, ignore_errors=True)
            if isinstance(exc, _DiskFull):
                raise DiskFullError(
                    f"Not enough free disk space in {self.root} to copy '{dest.name}' there "
                    f"from {staging} (the models folder is on another disk).",
                    hint="Free some space there, or choose a models folder on the same disk, "
                    "then try again: the downloaded files were kept.",
                ) from exc
            if dest.exists():
                raise _already_installed(dest.name) from exc
            raise HearthError(
                f"Copying '{dest.name}' from {staging} into {self.root} failed ({exc}).",
                hint="Check that the models folder is writable, then try again: the "
                "downloaded files were kept.",
            ) from exc
        shutil.rmtree(staging, ignore_errors=True)

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
        the library keeps a link folder with a manifest pointing to it.
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
        manifest = Manifest(
            id=model_id,
            name=name or getattr(spec, "name", None) or folder.name,
            source=source("local", path=str(folder)),
            format=getattr(spec, "layout", None),
            files=describe_files(folder, with_sha256=False),
            context_length=getattr(spec, "context_length", None),
        )
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
        check: Callable[[], None] | None = None,
        attention: str | None = None,
    ) -> InstalledModel:
        """Convert a GGUF file into an ONNX model folder and install it; ``check`` (raises to
        cancel) runs between the conversion's layers and while the file is hashed;
        ``attention``: the attention form (``convert_gguf``'s; None: the model's default).

        Raises ``AlreadyInstalledError`` (with the installed model) when a model converted
        from the same bytes at the same precision (and, when ``attention`` is named, in that
        form) is installed in the current forms; one converted in an older form is updated
        in place instead (``gguf.update.update_model``: same id and folder) and returned."""
        from app.models.gguf import duplicates  # the GGUF importer, loaded lazily
        from app.models.gguf.convert import convert_gguf

        src = Path(path).expanduser().resolve()
        if not src.is_file():
            raise HearthError(f"{src} is not a file.", hint="Choose a .gguf file.")
        report = progress or (lambda *_a: None)
        size = src.stat().st_size
        step = max(64 << 20, size // 50)  # at most ~50 reports while hashing
        next_report = [step]

        def hashing(done: int) -> None:
            if check is not None:
                check()
            if done >= next_report[0]:
                next_report[0] += step
                report(done / max(size, 1), f"Checking whether {src.name} is already installed")

        twin, sha = duplicates.find_installed(self.list_models(), src, precision,
                                              on_block=hashing, attention=attention)
        if twin is not None:
            from app.models.gguf import update

            if not update.outdated_forms(twin, src, attention):
                raise duplicates.AlreadyInstalledError(src, twin, precision)
            return update.update_model(self, twin, progress=progress, check=check,
                                       attention=attention, source=src, source_sha256=sha)
        model_id = self.unique_id(name or src.stem)
        work = paths.staging_dir() / f"gguf-{uuid.uuid4().hex[:12]}"
        work.mkdir(parents=True)
        try:
            dest = work / model_id
            convert_gguf(src, dest, precision=precision, name=name, progress=progress,
                         check=check, source_sha256=sha, attention=attention)
            manifest = Manifest.read(dest) or Manifest(model_id, name or src.stem)
            if not manifest.files:
                manifest.files = describe_files(dest)
            manifest.id = model_id
            manifest.name = name or manifest.name or src.stem
            manifest.source = {
                **source("gguf", path=str(src)),
                **manifest.source,
                "kind": "gguf",
                "variant": precision,
                "size": size,
                "quick_sha256": duplicates.quick_fingerprint(src),
            }
            manifest.extra.setdefault("precision", precision)
            manifest.format = manifest.format or "genai"
            manifest.installed_at = now_iso()
            return self.install_from_staging(dest, manifest)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    # -- removing ------------------------------------------------------------------------

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

    # -- the catalog and this machine ----------------------------------------------------

    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = load_catalog()
        return self._catalog

    def provider(self) -> str:
        """The provider builds are downloaded for: the user's "Run on" choice (the
        ``provider`` setting), as ``Engine.load`` reads it (:func:`app.machine.chosen_provider`;
        ``auto``: this machine's)."""
        return chosen_provider(self.settings.get("provider"))

    def machine(self, provider: str | None = None) -> MachineInfo:
        """RAM, free disk in the models folder, and the provider builds are chosen for
        (``provider``, else :meth:`provider`)."""
        return probe_machine(self.root, provider=provider or self.provider())

    def catalog_entries(self, machine: MachineInfo | None = None) -> list[CatalogChoice]:
        """Every catalog entry with the variant this machine gets, install state and fit."""
        machine = machine or self.machine()
        rows = []
        for entry in self.catalog():
            variant = choose_variant(entry, machine.provider)
            rows.append(
                CatalogChoice(
                    entry, variant, self.installed_entry(entry.id) is not None,
                    fit_report(variant, machine)
                )
            )
        return rows

    def installed_entry(self, entry_id: str) -> InstalledModel | None:
        """The installed model that is catalog entry ``entry_id``: installed under its id,
        or the built-in starter for the entry it is a build of."""
        model = self.get(entry_id)
        if model is None and entry_id == STARTER_CATALOG_ID:
            model = self.get(STARTER_ID)
        return model

    def draft_for(self, path: Path | str) -> InstalledModel | None:
        """The installed draft model for the installed model whose folder is ``path``: the
        sibling its catalog entry names in ``draft`` (same tokenizer, see
        app/engine/speculative.py), when that sibling is installed too; else None. A model
        outside the catalog, or one whose draft is not installed, has none."""
        model = self.find_path(path)
        entry = self.catalog().find(model.id) if model is not None else None
        if entry is None or entry.draft is None:
            return None
        return self.installed_entry(entry.draft)

    # -- downloads -----------------------------------------------------------------------

    def hub(self) -> HubClient:
        from app.models.hub import HubClient

        return HubClient(self.endpoint, self.token)

    def plan_download(
        self,
        key: str,
        *,
        variant: str | None = None,
        provider: str | None = None,
        revision: str = "main",
    ) -> DownloadRequest:
        """What to download for ``key``: a catalog id / repo, or any Hub repo id ("org/name").

        ``variant``: a variant name or provider (catalog), or a provider, genai folder,
        Optimum graph stem or precision (Hub repo); None chooses for ``provider`` (default:
        :meth:`provider`, the "Run on" setting). A Hub repo is resolved to a commit and
        listed now (network), once: the plan carries the listing to the download. A catalog
        entry keeps its pinned revision. Raises HearthError
        when ``key`` is neither, or the repo holds no ONNX chat model Hearth can load.
        """
        from app.models.downloader import DownloadRequest

        catalog = self.catalog()
        entry = catalog.find(key)
        if variant in policy.PRECISION_ORDER:
            provider, variant = variant, None
        provider = provider or self.provider()
        if entry is not None:
            chosen = entry.variant(variant) if variant else choose_variant(entry, provider)
            return DownloadRequest.from_catalog(entry, chosen)
        if key.count("/") != 1:
            catalog.get(key)  # raises the catalog's "not in the model catalog" sentence
        hub = self.hub()
        recorded = RevisionRecord(self.root).get(key) if revision == "main" else None
        commit = recorded or hub.resolve_revision(key, revision)
        files = hub.list_files(key, commit)
        chosen = variant_for_repo(
            files,
            provider,
            requested=variant,
            repo=key,
            read_json=functools.lru_cache(maxsize=16)(
                lambda path: hub.read_json(key, commit, path)
            ),
        )
        genai = any(
            f.path.rsplit("/", 1)[-1] == "genai_config.json" and chosen.selects(f.path)
            for f in files
        )
        return DownloadRequest(
            model_id=slugify(key),
            name=key.rsplit("/", 1)[-1],
            repo=key,
            revision=commit,
            variant=chosen,
            format="genai" if genai else "optimum",
            listing=tuple(files),
        )

    def downloader(self) -> Downloader:
        from app.models.downloader import Downloader

        return Downloader(
            self,
            endpoint=self.endpoint,
            token=self.token,
            staging_root=self.staging_root,
            **self.downloader_options,
        )

    def download(
        self,
        plan: DownloadRequest,
        *,
        control: DownloadControl | None = None,
        progress: ProgressCallback | None = None,
        keep_partial_on_cancel: bool | None = None,
    ) -> InstalledModel:
        """Fetch, verify (sha256 / git hash) and install ``plan``; resumes a previous run."""
        return self.downloader().download(
            plan, progress=progress, control=control, keep_partial_on_cancel=keep_partial_on_cancel
        )


def _put_back(old: Path) -> Path:
    """``.ID.old`` left by a ``replace_from_staging`` that stopped (the process killed)
    between moving the old folder aside and the new one in: the old one goes back to ``ID``
    (whole, as it was); when ``ID`` is there the swap finished, and ``old`` stays for the
    next swap to delete."""
    dest = old.with_name(old.name[1:-len(".old")])
    if dest.exists() or not Manifest.exists_in(old):
        return old
    try:
        os.rename(old, dest)
    except OSError:
        return old
    return dest


class _DiskFull(Exception):
    """A copy ran out of space (not an OSError, so ``shutil.copytree`` stops at once)."""


def _copy_file(src: str, dst: str) -> None:
    try:
        shutil.copy2(src, dst)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _DiskFull(str(exc)) from exc
        raise


def _already_installed(model_id: str) -> HearthError:
    return HearthError(
        f"A model called '{model_id}' is already installed.",
        hint="Remove it first, or choose another name.",
    )
