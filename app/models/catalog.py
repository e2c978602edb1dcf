"""The curated model catalog (``resources/catalog.json``) and the "fits this machine" hint.

The catalog is data: each entry names a Hub repo, a pinned revision and one variant per
execution provider (a subfolder, or file patterns). This module reads it, picks the variant
for the machine's provider and says whether a variant fits the machine's RAM, GPU memory and
free disk.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app.errors import HearthError
from app.machine import machine_provider
from app.memory import total_ram_bytes
from app.units import format_bytes

Provider = Literal["cpu", "dml", "cuda"]
#: the providers a catalog variant may name (a CoreML machine runs the CPU builds)
VARIANT_PROVIDERS: tuple[str, ...] = ("cpu", "dml", "cuda")
CATALOG_PATH = Path(__file__).resolve().parents[2] / "resources" / "catalog.json"
# Disk headroom kept free after a download (the OS, the chat history, other apps).
DISK_MARGIN_BYTES = 1 << 30


@dataclass(frozen=True)
class Variant:
    """One downloadable form of a model, meant for one execution provider.

    Either ``subfolder`` (every file under it, installed at the model root) or ``include``
    (glob patterns over repo paths; a pattern without "/" matches top-level files only).
    """

    name: str
    provider: str
    subfolder: str | None = None
    include: tuple[str, ...] = ()
    size_bytes: int = 0
    ram_bytes: int = 0
    vram_bytes: int | None = None
    context_length: int | None = None  # when this build limits the model's context
    size_estimated: bool = False  # size_bytes not read from a Hub listing

    def selects(self, repo_path: str) -> bool:
        """Whether ``repo_path`` belongs to this variant."""
        if self.subfolder is not None:
            return repo_path.startswith(self.subfolder.rstrip("/") + "/")
        return any(_match(repo_path, pattern) for pattern in self.include)

    def local_path(self, repo_path: str) -> str:
        """Where ``repo_path`` goes inside the installed model folder."""
        if self.subfolder is not None:
            return repo_path[len(self.subfolder.rstrip("/")) + 1 :]
        return repo_path

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "provider": self.provider,
            "subfolder": self.subfolder,
            "include": list(self.include),
            "size_bytes": self.size_bytes,
            "ram_bytes": self.ram_bytes,
            "vram_bytes": self.vram_bytes,
            "context_length": self.context_length,
            "size_estimated": self.size_estimated,
        }


def _match(path: str, pattern: str) -> bool:
    """Segment by segment: a wildcard never matches across "/"."""
    segments, wanted = path.split("/"), pattern.split("/")
    return len(segments) == len(wanted) and all(
        fnmatch.fnmatchcase(s, w) for s, w in zip(segments, wanted, strict=True)
    )


@dataclass(frozen=True)
class CatalogEntry:
    """A curated model: where it lives on the Hub and how to get it for each provider."""

    id: str
    name: str
    repo: str
    revision: str
    license: str
    context_length: int
    parameters: int
    format: str
    description: str
    variants: tuple[Variant, ...]
    gated: bool = False  # the Hub asks users to accept the licence before downloading
    license_url: str | None = None
    revision_verified: bool = True  # False: the pinned commit was not checked against the Hub
    notes: str = ""  # where the entry's facts come from, what is an estimate
    #: The facts of this entry checked against public evidence, each naming its source
    #: ("revision: ...", "sizes: ...", "files: ...", "gated: ..."); what is not listed is an
    #: estimate or was reconstructed.
    checked: tuple[str, ...] = ()

    def context_for(self, variant: Variant) -> int:
        """The context a variant runs with: its own limit, else the model's."""
        return variant.context_length or self.context_length
    #: The catalog id of a smaller sibling with the same tokenizer that can draft for this
    #: model (speculative decoding), or None.
    draft: str | None = None

    def variant(self, name_or_provider: str) -> Variant:
        """The variant with this name, or the one for this provider."""
        for variant in self.variants:
            if variant.name == name_or_provider:
                return variant
        for variant in self.variants:
            if variant.provider == name_or_provider:
                return variant
        names = ", ".join(v.name for v in self.variants)
        raise HearthError(
            f"{self.name} has no variant '{name_or_provider}'.", hint=f"Choose one of: {names}."
        )

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "name": self.name,
            "repo": self.repo,
            "revision": self.revision,
            "license": self.license,
            "context_length": self.context_length,
            "parameters": self.parameters,
            "format": self.format,
            "description": self.description,
            "gated": self.gated,
            "license_url": self.license_url,
            "revision_verified": self.revision_verified,
            "notes": self.notes,
            "checked": list(self.checked),
            "variants": [v.as_dict() for v in self.variants],
            "draft": self.draft,
        }


@dataclass(frozen=True)
class Catalog:
    entries: tuple[CatalogEntry, ...]

    def find(self, key: str) -> CatalogEntry | None:
        """The entry whose id or repo id is ``key`` (case-insensitive), else None."""
        wanted = key.lower()
        return next(
            (e for e in self.entries if wanted in (e.id.lower(), e.repo.lower())), None
        )

    def get(self, key: str) -> CatalogEntry:
        """The entry whose id or repo id is ``key``; HearthError when there is none."""
        entry = self.find(key)
        if entry is not None:
            return entry
        raise HearthError(
            f"'{key}' is not in the model catalog.",
            hint="Run 'hearth models catalog' to see the models you can download.",
        )

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


def parse_variant(raw: dict) -> Variant:
    """One variant of a catalog document (the chat catalog's or the embedder catalog's)."""
    provider = raw["provider"]
    if provider not in VARIANT_PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}")
    if bool(raw.get("subfolder")) == bool(raw.get("include")):
        raise ValueError(f"variant {raw['name']!r} needs exactly one of subfolder / include")
    return Variant(
        name=raw["name"],
        provider=provider,
        subfolder=raw.get("subfolder"),
        include=tuple(raw.get("include") or ()),
        size_bytes=int(raw.get("size_bytes", 0)),
        ram_bytes=int(raw.get("ram_bytes", 0)),
        vram_bytes=raw.get("vram_bytes"),
        context_length=raw.get("context_length"),
        size_estimated=bool(raw.get("size_estimated", False)),
    )


def parse_catalog(data: dict) -> Catalog:
    """Build a Catalog from the JSON document; raises ValueError on a malformed entry."""
    entries = []
    seen: set[str] = set()
    for raw in data["models"]:
        if raw["id"] in seen:
            raise ValueError(f"duplicate catalog id {raw['id']!r}")
        seen.add(raw["id"])
        variants = tuple(parse_variant(v) for v in raw["variants"])
        if raw.get("gated") and not raw.get("license_url"):
            raise ValueError(f"gated entry {raw['id']!r} names no license_url")
        if len({v.name for v in variants}) != len(variants):
            raise ValueError(f"duplicate variant names in {raw['id']!r}")
        entries.append(
            CatalogEntry(
                id=raw["id"],
                name=raw["name"],
                repo=raw["repo"],
                revision=raw.get("revision") or "main",
                license=raw.get("license", "unknown"),
                context_length=int(raw["context_length"]),
                parameters=int(raw["parameters"]),
                format=raw["format"],
                description=raw.get("description", ""),
                variants=variants,
                gated=bool(raw.get("gated", False)),
                license_url=raw.get("license_url"),
                revision_verified=bool(raw.get("revision_verified", True)),
                notes=raw.get("notes", ""),
                checked=tuple(raw.get("checked") or ()),
                draft=raw.get("draft"),
            )
        )
    for entry in entries:
        if entry.draft is not None and (entry.draft == entry.id or entry.draft not in seen):
            raise ValueError(f"{entry.id!r} names draft {entry.draft!r}, not another entry")
    return Catalog(tuple(entries))


def load_catalog(path: Path | None = None) -> Catalog:
    """Read the catalog shipped in ``resources/catalog.json`` (or ``path``)."""
    source = path or CATALOG_PATH
    try:
        return parse_catalog(json.loads(source.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HearthError(
            f"The model catalog {source} cannot be read ({exc}).",
            hint="Reinstall Hearth to restore it.",
        ) from exc


# --- the machine -----------------------------------------------------------------------


@dataclass(frozen=True)
class MachineInfo:
    """What the fit hint knows about this machine. ``None`` = could not be detected."""

    ram_bytes: int | None
    vram_bytes: int | None
    disk_free_bytes: int | None
    provider: str = "cpu"


def probe_machine(models_root: Path | None = None, *, provider: str | None = None) -> MachineInfo:
    """RAM, free disk where models are stored, and the provider to choose variants for."""
    disk = None
    if models_root is not None:
        probe = Path(models_root)
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        try:
            disk = shutil.disk_usage(probe).free
        except OSError:
            disk = None
    return MachineInfo(
        ram_bytes=total_ram_bytes(),
        vram_bytes=None,  # not detectable without vendor libraries; the hint says so
        disk_free_bytes=disk,
        provider=provider or machine_provider(),
    )


def choose_variant(entry: CatalogEntry, provider: str) -> Variant:
    """The variant for ``provider``, falling back to the CPU variant."""
    for wanted in (provider, "cpu"):
        for variant in entry.variants:
            if variant.provider == wanted:
                return variant
    return entry.variants[0]


@dataclass(frozen=True)
class FitReport:
    """``level``: "ok", "tight" (will run, but little headroom) or "no"."""

    level: str
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool:
        return self.level != "no"


def fit_report(variant: Variant, machine: MachineInfo) -> FitReport:
    """Whether ``variant`` fits this machine's memory and disk, with readable reasons."""
    level = "ok"
    reasons: list[str] = []

    def worse(new: str) -> None:
        nonlocal level
        order = ("ok", "tight", "no")
        if order.index(new) > order.index(level):
            level = new

    if machine.ram_bytes is not None and variant.ram_bytes:
        if variant.ram_bytes > machine.ram_bytes:
            worse("no")
            reasons.append(
                f"needs {format_bytes(variant.ram_bytes)} of RAM; "
                f"this machine has {format_bytes(machine.ram_bytes)}"
            )
        elif variant.ram_bytes > 0.7 * machine.ram_bytes:
            worse("tight")
            reasons.append(f"uses most of the RAM ({format_bytes(variant.ram_bytes)})")
    if variant.vram_bytes:
        if machine.vram_bytes is None:
            reasons.append(
                f"needs about {format_bytes(variant.vram_bytes)} of GPU memory (not detected)"
            )
        elif variant.vram_bytes > machine.vram_bytes:
            worse("no")
            reasons.append(
                f"needs {format_bytes(variant.vram_bytes)} of GPU memory; "
                f"the GPU has {format_bytes(machine.vram_bytes)}"
            )
    disk_free = machine.disk_free_bytes
    if (
        disk_free is not None
        and variant.size_bytes
        and variant.size_bytes + DISK_MARGIN_BYTES > disk_free
    ):
        worse("no")
        reasons.append(
            f"needs {format_bytes(variant.size_bytes)} of disk; {format_bytes(disk_free)} free"
        )
    return FitReport(level, tuple(reasons))
