"""Imported GGUF models converted by an older form, brought up to date from their source file.

A conversion's manifest records its forms (``conversion.attention_form``, ``offsets_form``,
``sampling_form``: :mod:`app.models.gguf`) and its source (``source.path``, ``size``,
``quick_sha256``, ``sha256``). ``check_model`` says, cheaply (a stat, 2 MiB read, at most the
GGUF's header), whether an installed import is current, can be updated from its file, or
keeps its form because the file is gone or changed, with the sentence the models panel
shows. ``update_model`` converts the file again with the model's own options (precision,
accuracy level, an explicit ``--attention classic`` kept) in the staging folder and swaps it
in for the old folder (``ModelLibrary.replace_from_staging``): same id, same folder, so the
settings' last model and the chats that name it still point at it. Until the swap the old
package is untouched and usable; a cancel, a quit or a failure leaves it as it was.

The starter is not handled here: it converts itself (``starter.is_current``).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app import paths
from app.errors import DiskFullError, HearthError
from app.manifest import Manifest, now_iso, sha256_file
from app.models.gguf import ATTENTION_FORM, EXACT_OFFSETS_FORM, SAMPLING_FORM
from app.models.installed import InstalledModel
from app.models.starter_ids import STARTER_ID
from app.units import format_bytes


class Swapper(Protocol):
    """What an update needs of the library (``ModelLibrary``; named so, the library that
    imports this module is not imported back)."""

    def replace_from_staging(self, staging: Path, manifest: Manifest) -> InstalledModel: ...

CURRENT, UPDATABLE, SOURCE_GONE, SOURCE_CHANGED = "current", "updatable", "gone", "changed"
#: what a new conversion brings, per outdated form (the panel's sentence joins them)
GAINS = {
    "attention": "faster replies and half the memory at long context (grouped attention)",
    "offsets": "weights closer to the file's",
    "sampling": "sampled replies by default (greedy ones loop)",
}
DISK_MARGIN = 64 << 20


@dataclass(frozen=True)
class ModelUpdate:
    """Where an installed model stands: ``status`` (CURRENT, UPDATABLE, SOURCE_GONE,
    SOURCE_CHANGED), the forms a new conversion brings (``gains``, keys of GAINS), the source
    file, and the sentence for the user ("" when current)."""

    model: InstalledModel
    status: str
    gains: tuple[str, ...] = ()
    source: Path | None = None
    sentence: str = ""

    @property
    def can_update(self) -> bool:
        return self.status == UPDATABLE

    @property
    def need_bytes(self) -> int:
        """Free space the update needs: a second package the old one's size, until the swap."""
        return self.model.size_on_disk + DISK_MARGIN


def _conversion(model: InstalledModel) -> dict:
    return dict(model.manifest.extra.get("conversion") or {})


def _precision(model: InstalledModel) -> str:
    return str(model.manifest.extra.get("precision") or model.source.get("variant") or "native")


def wanted_attention(conversion: dict) -> str | None:
    """The attention form an update asks for: what the import asked for ("gqa" for
    ``--attention classic``; None: the model's default). Conversions from before the record:
    a grouped one asked for grouped (it was opt-in); "gqa" from the grouped default on (the
    ``attention_form`` record came with it) was asked for or the architecture's only form,
    so it stays; GQA from before (the old default, or no ``attention`` at all) follows the
    default now."""
    if "attention_requested" in conversion:
        return conversion["attention_requested"]
    recorded = conversion.get("attention")
    if recorded == "grouped":
        return "grouped"
    if recorded == "gqa" and "attention_form" in conversion:
        return "gqa"
    return None


def _attention_stale(conversion: dict, source: Path | None,
                     attention: str | None = None) -> bool | None:
    """Whether the attention form is older than a new conversion's (None: unknown, the
    file is needed to tell and is not there); ``attention`` replaces the recorded choice."""
    wanted = attention or wanted_attention(conversion)
    recorded = conversion.get("attention") or "gqa"
    if wanted == "gqa":
        return recorded != "gqa"
    if recorded == "grouped":
        return conversion.get("attention_form") != ATTENTION_FORM
    if wanted == "grouped":
        return True
    if "attention_requested" in conversion:  # the default, and it was GQA: the architecture's
        return False
    if source is None:
        return None
    from app.models.gguf.grouped_attention import default_attention  # numpy, no onnx
    from app.models.gguf.reader import GGUFHeader

    return default_attention(GGUFHeader(source).params) == "grouped"


def outdated_forms(model: InstalledModel, source: Path | None,
                   attention: str | None = None) -> tuple[str, ...]:
    """The recorded forms a conversion now would write anew (keys of GAINS); ``attention``
    (a form) replaces the recorded choice."""
    conversion = _conversion(model)
    gains = []
    if _attention_stale(conversion, source, attention) is not False:
        gains.append("attention")
    if (_precision(model) == "native" and conversion.get("exact_offsets", True)
            and conversion.get("offsets_form") != EXACT_OFFSETS_FORM):
        gains.append("offsets")
    if conversion.get("sampling_form") != SAMPLING_FORM:
        gains.append("sampling")
    return tuple(gains)


def _gain_text(gains: tuple[str, ...]) -> str:
    return ", ".join(GAINS[g] for g in gains)


def _source_state(model: InstalledModel) -> tuple[str, Path | None]:
    """(UPDATABLE, path) when the recorded file is there with its recorded size and quick
    fingerprint; else (SOURCE_GONE / SOURCE_CHANGED, the recorded path or None)."""
    from app.models.gguf.duplicates import quick_fingerprint

    recorded = model.source.get("path")
    path = Path(recorded) if recorded else None
    if path is None or not path.is_file() or not model.source.get("sha256"):
        return SOURCE_GONE, path
    try:
        size = path.stat().st_size
        if model.source.get("size") not in (None, size):
            return SOURCE_CHANGED, path
        quick = model.source.get("quick_sha256")
        if quick is not None and quick != quick_fingerprint(path):
            return SOURCE_CHANGED, path
    except OSError:
        return SOURCE_GONE, path
    return UPDATABLE, path


def is_gguf_import(model: InstalledModel) -> bool:
    return model.source_kind == "gguf" and model.id != STARTER_ID


def check_model(model: InstalledModel) -> ModelUpdate:
    """Where ``model`` stands (cheap: no hashing of the whole file). Never raises for a
    missing, changed or unreadable source: it says so in ``sentence``."""
    if not is_gguf_import(model):
        return ModelUpdate(model, CURRENT)
    status, path = _source_state(model)
    try:
        gains = outdated_forms(model, path if status == UPDATABLE else None)
    except (HearthError, OSError):  # the header could not be read: treat the file as changed
        status, gains = SOURCE_CHANGED, outdated_forms(model, None)
    if not gains:
        return ModelUpdate(model, CURRENT, source=path)
    name = path.name if path is not None else "its GGUF file"
    if status == UPDATABLE:
        lead = "for faster replies" if "attention" in gains else "to the current conversion"
        sentence = (f"This model can be updated {lead} (an older Hearth converted it): "
                    f"{_gain_text(gains)}. "
                    f"Update converts {name} again in the background (about "
                    f"{format_bytes(model.size_on_disk)} more disk until it is done); the "
                    "model stays usable meanwhile.")
    elif status == SOURCE_CHANGED:
        sentence = (f"{name} has changed since it was imported, so this model keeps the "
                    f"older conversion. Re-import {name} to get {_gain_text(gains)}.")
    else:
        sentence = (f"This model was converted by an older Hearth from {name}, which is no "
                    f"longer where it was imported from; it keeps working as it is. Re-import "
                    f"{name} to get {_gain_text(gains)}.")
    return ModelUpdate(model, status, gains, path, sentence)


def conversion_options(model: InstalledModel, attention: str | None = None) -> dict:
    """``convert_gguf``'s options that reproduce ``model``'s choices in the current forms;
    ``attention`` (a form) replaces the recorded choice."""
    conversion = _conversion(model)
    options: dict = {"precision": _precision(model),
                     "attention": attention or wanted_attention(conversion)}
    for key in ("accuracy_level", "exact_offsets", "activation_block", "activation_groups"):
        if conversion.get(key) is not None:
            options[key] = conversion[key]
    return options


def free_bytes(path: Path) -> int:
    """Free space on the file system of ``path`` (patched in tests)."""
    return shutil.disk_usage(path).free


def check_space(update: ModelUpdate, folder: Path) -> None:
    """Raise DiskFullError with a sentence when ``folder`` lacks the room the update needs."""
    free = free_bytes(folder)
    if free < update.need_bytes:
        raise DiskFullError(
            f"Updating {update.model.name} needs about {format_bytes(update.need_bytes)} free "
            f"in {folder} (a new copy beside the old one until it replaces it), but only "
            f"{format_bytes(free)} are free.",
            hint="Free some disk space and try again; the model keeps working meanwhile.",
        )


def update_model(
    library: Swapper,
    model: InstalledModel,
    *,
    progress: Callable[[float, str], None] | None = None,
    check: Callable[[], None] | None = None,
    attention: str | None = None,
    source: Path | None = None,
    source_sha256: str | None = None,
) -> InstalledModel:
    """Convert ``model``'s source again in the current forms and swap it in (same id,
    folder, name). ``check`` raises to cancel (between hashed blocks and layers, and just
    before the swap); ``attention`` replaces the recorded choice; ``source_sha256``: the
    file's hash when the caller has it; ``source``: the same bytes found elsewhere (a
    re-import of a moved file; its path is recorded from then on). Raises HearthError with
    a sentence (source gone or changed, disk full, the old folder in use) and leaves the
    old package as it was."""
    from app.models.gguf.convert import convert_gguf  # onnx: loaded only to convert

    state = check_model(model)
    if source is None and state.status in (SOURCE_GONE, SOURCE_CHANGED):
        raise HearthError(state.sentence)
    src = Path(source).resolve() if source is not None else state.source
    if src is None:
        raise HearthError(f"{model.name} was not imported from a GGUF file Hearth can find.")
    report = progress or (lambda _f, _m: None)
    checkpoint = check or (lambda: None)
    staging = paths.staging_dir()
    check_space(state, staging)
    if source_sha256 is None:
        size = max(src.stat().st_size, 1)

        def hashing(done: int) -> None:
            checkpoint()
            report(0.02 * done / size, f"Checking {src.name}")

        source_sha256 = sha256_file(src, on_block=hashing)
    if source_sha256 != model.source.get("sha256"):
        raise HearthError(
            f"{src.name} has changed since it was imported, so {model.name} keeps its older "
            f"conversion. Re-import {src.name} to get {_gain_text(state.gains)}.")
    if source is not None:
        from app.models.gguf.duplicates import quick_fingerprint

        moved = {"path": str(src), "size": src.stat().st_size,
                 "quick_sha256": quick_fingerprint(src)}
    else:
        moved = {}
    options = conversion_options(model, attention)
    if options["attention"] == "gqa" and attention is None and "attention_requested" not in (
            _conversion(model)):  # "gqa" from before the record: asked for, or the only form
        from app.models.gguf.grouped_attention import unsupported_reason
        from app.models.gguf.reader import GGUFHeader

        if unsupported_reason(GGUFHeader(src).params):
            options["attention"] = None  # the architecture's default, recorded as such
    work = staging / f"update-{uuid.uuid4().hex[:12]}"
    work.mkdir(parents=True)
    try:
        dest = work / model.id
        convert_gguf(src, dest, name=model.name, progress=progress, check=check,
                     source_sha256=source_sha256, **options)
        fresh = Manifest.read(dest)
        if fresh is None:
            raise HearthError(f"Converting {src.name} again wrote no manifest.")
        old = model.manifest
        fresh.id, fresh.name = model.id, model.name
        fresh.source = {**old.source, **fresh.source, **moved, "kind": "gguf"}
        fresh.installed_at = old.installed_at or now_iso()  # its place in the list stays
        fresh.license = old.license
        fresh.extra["updated_at"] = now_iso()
        checkpoint()  # the last moment a cancel or a quit stops it: the old one stays
        installed = library.replace_from_staging(dest, fresh)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if installed.manifest.file_hashes() != fresh.file_hashes():  # the swap was refused
        raise HearthError(
            f"{model.name} could not be replaced (its folder is in use or read-only); it "
            "keeps its older conversion.",
            hint="Unload it (Model ▸ Unload) or close what else uses it (another Hearth, a "
            "server), then Update again.")
    return installed
