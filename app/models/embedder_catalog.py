"""The embedder catalog (``resources/embedders.json``): ONNX text embedders on the Hub.

The one owner of each embedder's facts: its repo, the files one variant downloads, the graph's
output to read, how to pool it (``cls``: token 0 of the last hidden states; ``mean``: their
mean over the attention mask; ``pooled``: the output is the sentence vector already), whether
to L2-normalise, the query and document prefixes, its window (``max_tokens``) and dims. Each
entry also says what public evidence those facts come from and which were reconstructed.
The installed folder's ``embedder.json`` is written from the entry (``embedder_config``), so
the loader (app/documents/embedding.py) reads the facts from there and never from here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.errors import HearthError
from app.models.catalog import Variant, parse_variant

EMBEDDER_CATALOG_PATH = Path(__file__).resolve().parents[2] / "resources" / "embedders.json"
POOLINGS = ("cls", "mean", "pooled")


@dataclass(frozen=True)
class EmbedderEntry:
    id: str
    name: str
    repo: str
    revision: str
    license: str
    parameters: int
    dims: int
    max_tokens: int
    pooling: str
    normalized: bool
    output: str
    query_prefix: str
    document_prefix: str
    description: str
    variants: tuple[Variant, ...]
    gated: bool = False
    license_url: str | None = None
    languages: str = ""
    evidence: tuple[str, ...] = ()
    reconstructed: tuple[str, ...] = ()

    @property
    def variant(self) -> Variant:
        """The variant Hearth downloads (the CPU build: embedders run on the CPU)."""
        return next((v for v in self.variants if v.provider == "cpu"), self.variants[0])

    @property
    def graph(self) -> str:
        """The repo path of the variant's ONNX graph."""
        return next(p for p in self.variant.include if p.endswith(".onnx"))

    def embedder_config(self) -> dict:
        """The installed folder's ``embedder.json`` (what the loader reads)."""
        return {
            "id": self.id, "name": self.name, "dims": self.dims, "max_tokens": self.max_tokens,
            "pooling": self.pooling, "normalized": self.normalized, "output": self.output,
            "query_prefix": self.query_prefix, "document_prefix": self.document_prefix,
            "license": self.license, "source": f"hub:{self.repo}",
            "graphs": {self.variant.name: self.graph}, "graph": self.variant.name,
        }

    def as_dict(self) -> dict:
        return {
            "id": self.id, "name": self.name, "repo": self.repo, "revision": self.revision,
            "license": self.license, "license_url": self.license_url, "gated": self.gated,
            "parameters": self.parameters, "dims": self.dims, "max_tokens": self.max_tokens,
            "pooling": self.pooling, "normalized": self.normalized, "output": self.output,
            "query_prefix": self.query_prefix, "document_prefix": self.document_prefix,
            "languages": self.languages, "description": self.description,
            "variant": self.variant.as_dict(), "evidence": list(self.evidence),
            "reconstructed": list(self.reconstructed),
        }


@dataclass(frozen=True)
class EmbedderCatalog:
    entries: tuple[EmbedderEntry, ...]

    def find(self, key: str) -> EmbedderEntry | None:
        wanted = key.lower()
        return next((e for e in self.entries if wanted in (e.id.lower(), e.repo.lower())),
                    None)

    def get(self, key: str) -> EmbedderEntry:
        entry = self.find(key)
        if entry is None:
            known = ", ".join(e.id for e in self.entries)
            raise HearthError(f"'{key}' is not an embedder Hearth knows.",
                              hint=f"Choose one of: {known} (hearth docs embedders).")
        return entry

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


def parse_embedder_catalog(data: dict) -> EmbedderCatalog:
    """Raises ValueError on a malformed entry."""
    entries, seen = [], set()
    for raw in data["embedders"]:
        if raw["id"] in seen:
            raise ValueError(f"duplicate embedder id {raw['id']!r}")
        seen.add(raw["id"])
        if raw["pooling"] not in POOLINGS:
            raise ValueError(f"{raw['id']!r}: pooling must be one of {POOLINGS}")
        variants = tuple(parse_variant(v) for v in raw["variants"])
        graphs = [p for v in variants for p in v.include if p.endswith(".onnx")]
        if len(graphs) != len(variants) or any(v.subfolder for v in variants):
            raise ValueError(f"{raw['id']!r}: each variant names exactly one .onnx graph")
        if raw.get("gated") and not raw.get("license_url"):
            raise ValueError(f"gated embedder {raw['id']!r} names no license_url")
        entries.append(EmbedderEntry(
            id=raw["id"], name=raw["name"], repo=raw["repo"],
            revision=raw.get("revision") or "main", license=raw.get("license", "unknown"),
            parameters=int(raw["parameters"]), dims=int(raw["dims"]),
            max_tokens=int(raw["max_tokens"]), pooling=raw["pooling"],
            normalized=bool(raw.get("normalized", True)), output=raw["output"],
            query_prefix=raw.get("query_prefix", ""),
            document_prefix=raw.get("document_prefix", ""),
            description=raw.get("description", ""), variants=variants,
            gated=bool(raw.get("gated", False)), license_url=raw.get("license_url"),
            languages=raw.get("languages", ""), evidence=tuple(raw.get("evidence", ())),
            reconstructed=tuple(raw.get("reconstructed", ()))))
    return EmbedderCatalog(tuple(entries))


def load_embedder_catalog(path: Path | None = None) -> EmbedderCatalog:
    source = path or EMBEDDER_CATALOG_PATH
    try:
        return parse_embedder_catalog(json.loads(source.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HearthError(f"The embedder catalog {source} cannot be read ({exc}).",
                          hint="Reinstall Hearth to restore it.") from exc
