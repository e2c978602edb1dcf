"""ONNX Runtime model packages: a ``manifest.json`` and per-component variant descriptors.

Newer onnxruntime-genai packages (written by Olive's ``generate-model-package``) ship one
model in several hardware variants::

    manifest.json                      {"model_name" | "name" | "package_name", components …}
    configs/                           shared files (tokenizer, chat template), optional
    models/<component>/metadata.json   (or component.json) {"model_variants": {name: {…}}}
    models/<component>/<variant>/      genai_config.json + model.onnx (+ .data) per variant

A variant names its execution provider and device in ``constraints`` (``{"ep": …,
"device": …}``) or inline. The manifest lists its components as a list of names, an object of
names (optionally with inline ``model_variants``) or an object mapping names to paths; without
a list, components are the ``models/*`` folders that hold a descriptor. The format is young and
has changed between releases, so this reader accepts each of those shapes.

Plain Python over a ``read_json(relative path)`` callable and the package's file paths, so the
package reader (local folders) and the Hub variant chooser (a file listing) share it. Which
variant suits this machine is :func:`app.engine.policy.best_package_variant`'s answer.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from app.engine import policy

PACKAGE_MANIFEST = "manifest.json"
COMPONENT_DESCRIPTORS = ("metadata.json", "component.json")
VARIANT_CONFIG = "genai_config.json"
_NAME_KEYS = ("model_name", "name", "package_name")

ReadJson = Callable[[str], "dict | None"]


@dataclass(frozen=True)
class PackageVariant:
    """One hardware variant: ``folder`` is relative to the package root (posix)."""

    component: str
    name: str
    folder: str
    ep: str | None
    device: str | None

    @property
    def provider(self) -> str | None:
        """Hearth's provider for this variant, None for an EP Hearth does not run."""
        return policy.package_variant_provider(self.ep, self.device)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.ep or 'base'}{', ' + self.device if self.device else ''})"


@dataclass(frozen=True)
class ModelPackage:
    """A package's name, its genai variants (in the package's order) and shared folder."""

    name: str
    variants: tuple[PackageVariant, ...]
    shared_folder: str  # "" when the shared files sit at the package root
    descriptor_paths: tuple[str, ...]  # the JSON files that describe the package

    def variant(self, name: str) -> PackageVariant | None:
        return next((v for v in self.variants if name in (v.name, v.folder)), None)

    def best(self, provider: str) -> PackageVariant | None:
        """The variant :func:`app.engine.policy.best_package_variant` picks for ``provider``."""
        chosen = policy.best_package_variant(
            ((v.folder, v.ep, v.device) for v in self.variants), provider
        )
        return next((v for v in self.variants if v.folder == chosen), None)


def looks_like_package(manifest: object) -> bool:
    """Whether a parsed ``manifest.json`` is a model package manifest (not another tool's)."""
    return isinstance(manifest, dict) and any(isinstance(manifest.get(k), str) for k in _NAME_KEYS)


def read_package(read_json: ReadJson, files: Collection[str]) -> ModelPackage:
    """Parse a package from its ``manifest.json`` and component descriptors.

    ``read_json(path)`` returns the parsed object at a package-relative path, or None when the
    file is not there; ``files`` are every file's package-relative path. Only variants whose
    folder holds a ``genai_config.json`` in ``files`` are kept (a download of one variant has
    only that one). Raises ValueError naming what is wrong.
    """
    manifest = read_json(PACKAGE_MANIFEST)
    if not looks_like_package(manifest):
        raise ValueError(f"{PACKAGE_MANIFEST} names no model (model_name)")
    assert isinstance(manifest, dict)
    name = next(manifest[k] for k in _NAME_KEYS if isinstance(manifest.get(k), str))
    described: list[str] = [PACKAGE_MANIFEST]
    variants: list[PackageVariant] = []
    for component, path, inline in _components(manifest, files):
        raw = inline.get("model_variants") if isinstance(inline, dict) else None
        for descriptor in COMPONENT_DESCRIPTORS:
            data = read_json(f"{path}/{descriptor}")
            if isinstance(data, dict):
                described.append(f"{path}/{descriptor}")
                raw = data.get("model_variants", data.get("variants", raw))
                break
        for variant_name, entry in _variant_items(raw):
            folder = f"{path}/{entry.get('model_id') or variant_name}"
            constraints = entry.get("constraints")
            constraints = constraints if isinstance(constraints, dict) else entry
            ep, device = constraints.get("ep"), constraints.get("device")
            if f"{folder}/{VARIANT_CONFIG}" in files:
                variants.append(
                    PackageVariant(
                        component,
                        variant_name,
                        folder,
                        ep if isinstance(ep, str) else None,
                        device if isinstance(device, str) else None,
                    )
                )
    if not variants:
        raise ValueError("no variant folder with genai_config.json is described")
    shared = manifest.get("configs_dir")
    if not isinstance(shared, str):
        shared = "configs" if any(f.startswith("configs/") for f in files) else ""
    return ModelPackage(name, tuple(variants), shared.strip("/"), tuple(described))


def _components(manifest: dict, files: Collection[str]) -> list[tuple[str, str, object]]:
    """(name, folder, inline description) per component, in the manifest's order."""
    listed = manifest.get("components", manifest.get("component_models"))
    if isinstance(listed, list):
        return [(n, f"models/{n}", None) for n in listed if isinstance(n, str)]
    if isinstance(listed, dict):
        found = []
        for n, value in listed.items():
            path = value if isinstance(value, str) else None
            if isinstance(value, dict) and isinstance(value.get("path"), str):
                path = value["path"]
            found.append((n, (path or f"models/{n}").strip("/"), value))
        return found
    names = sorted(
        {
            parts[1]
            for parts in (f.split("/") for f in files)
            if len(parts) == 3 and parts[0] == "models" and parts[2] in COMPONENT_DESCRIPTORS
        }
    )
    return [(n, f"models/{n}", None) for n in names]


def _variant_items(raw: object) -> list[tuple[str, dict]]:
    if isinstance(raw, dict):
        return [(str(k), v) for k, v in raw.items() if isinstance(v, dict)]
    if isinstance(raw, list):
        return [
            (v["name"], v) for v in raw if isinstance(v, dict) and isinstance(v.get("name"), str)
        ]
    return []
