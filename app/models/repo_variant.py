"""What to fetch from a Hub repo outside the catalog: the variant of a repo's file listing.

:func:`variant_for_repo` reads a listing (one ``HubClient.list_files`` answer, which the plan
hands on to the download so the repo is listed once) and picks the files to fetch for a
provider: a model-package variant, an onnxruntime-genai folder or an Optimum graph with its
data. Which build suits a provider is :mod:`app.engine.policy`'s answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from app.engine import package_manifest, policy
from app.errors import HearthError
from app.models.catalog import Variant

if TYPE_CHECKING:
    from app.models.hub import RemoteFile

# Top-level files an Optimum / transformers.js download takes besides its graph.
_ROOT_SUFFIXES = (".json", ".jinja", ".txt", ".model")


def variant_for_repo(
    files: list[RemoteFile],
    provider: str = "cpu",
    *,
    requested: str | None = None,
    repo: str = "This repository",
    read_json: Callable[[str], dict | None] | None = None,
) -> Variant:
    """Pick a variant from the file listing of a repo that is not in the catalog.

    ONNX Runtime model packages (``manifest.json`` + variant descriptors, read through
    ``read_json(path)``) become the package's descriptors and shared files plus the folder of
    the variant :func:`app.engine.policy.best_package_variant` picks (or the one ``requested``
    names). onnxruntime-genai repos (``genai_config.json``, possibly one folder per provider) become
    a subfolder variant, the folder chosen by :func:`app.engine.policy.best_genai_folder`;
    Optimum / transformers.js repos (``config.json`` + ``onnx/model*.onnx`` or a root
    ``model.onnx``) become the top-level configuration files plus one graph with its external
    data, chosen by :func:`app.engine.policy.best_graph`. ``requested`` names a genai folder
    (or its last part), a graph stem or a precision instead. Raises HearthError when the repo
    holds no loadable ONNX chat model, or nothing matches ``requested``.
    """
    paths_ = {f.path for f in files}
    if read_json is not None and package_manifest.PACKAGE_MANIFEST in paths_:
        package = _package_variant(paths_, provider, requested, repo, read_json)
        if package is not None:
            return _sized(package, files)
    genai = sorted(p for p in paths_ if p.rsplit("/", 1)[-1] == "genai_config.json")
    if genai:
        folders = [p.rsplit("/", 1)[0] if "/" in p else "" for p in genai]
        if requested:
            matching = [f for f in folders if requested in (f, f.rsplit("/", 1)[-1])]
            folders = matching or _no_such_variant(repo, requested, folders)
        chosen = policy.best_genai_folder(folders, provider)
        if chosen == "":
            include = tuple(p for p in paths_ if "/" not in p)
            return _sized(Variant("genai", provider, include=include), files)
        return _sized(Variant(chosen.rsplit("/", 1)[-1], provider, subfolder=chosen), files)
    graphs: dict[str, str] = {}
    if "config.json" in paths_:
        for folder in ("", "onnx/"):  # onnx/ wins over the root, as the package reader does
            for p in sorted(paths_):
                rest = p[len(folder) :]
                if p.startswith(folder) and "/" not in rest and rest.endswith(".onnx"):
                    stem = rest[: -len(".onnx")]
                    if policy.is_optimum_graph(stem):
                        graphs[stem] = p
    if not graphs:
        raise HearthError(
            f"{repo} holds no ONNX chat model Hearth can load.",
            hint="Choose a repository with genai_config.json, or config.json and "
            "onnx/model*.onnx (onnx-community and microsoft/*-onnx repos have them).",
        )
    stems = list(graphs)
    if requested:
        wanted = requested.removesuffix(".onnx")
        stems = [s for s in stems if wanted in (s, policy.graph_precision(s))]
        stems = stems or _no_such_variant(repo, requested, sorted(graphs))
    stem = policy.best_graph(stems, provider)
    graph = graphs[stem]
    chosen = [graph]
    embeds = {p.rsplit("/", 1)[-1][: -len(".onnx")]: p for p in paths_
              if p.startswith("onnx/") and p.count("/") == 1 and p.endswith(".onnx")
              and policy.EMBED_GRAPH_RE.match(p[len("onnx/"): -len(".onnx")])}
    if embeds and stem.startswith("decoder_model_merged"):  # split layout: its embedding too
        chosen.append(embeds[policy.choose_embed_graph(embeds, stem, provider)])
    include = (
        *(f"*{suffix}" for suffix in _ROOT_SUFFIXES),
        *(pattern for g in chosen for pattern in (g, f"{g}_data*", f"{g}.data")),
    )
    return _sized(Variant(stem, provider, include=include), files)


def _package_variant(
    paths_: set[str],
    provider: str,
    requested: str | None,
    repo: str,
    read_json: Callable[[str], dict | None],
) -> Variant | None:
    """The include patterns of one model-package variant; None when ``manifest.json`` is not a
    package manifest (the repo is then read as a genai / Optimum repo)."""
    if not package_manifest.looks_like_package(read_json(package_manifest.PACKAGE_MANIFEST)):
        return None
    try:
        package = package_manifest.read_package(read_json, paths_)
    except ValueError as exc:
        raise HearthError(
            f"{repo} is a model package Hearth cannot use ({exc}).",
            hint="Choose another repository, or report the problem to its authors.",
        ) from exc
    chosen = package.variant(requested) if requested else package.best(provider)
    if chosen is None:
        labels = [v.label for v in package.variants]
        if requested:
            _no_such_variant(repo, requested, labels)
        raise HearthError(
            f"{repo} only has variants for execution providers Hearth does not run "
            f"({', '.join(labels)}).",
            hint="Choose a repository with a CPU, CUDA or DirectML build.",
        )
    shared = (f"{package.shared_folder}/*",) if package.shared_folder else ()
    include = (
        *(f"*{suffix}" for suffix in _ROOT_SUFFIXES),
        *package.descriptor_paths,
        *shared,
        f"{chosen.folder}/*",
    )
    return Variant(chosen.name, provider, include=include)


def _no_such_variant(repo: str, requested: str, available: list[str]) -> list[str]:
    raise HearthError(
        f"{repo} has no variant '{requested}'.",
        hint=f"Choose one of: {', '.join(a or '(the repository root)' for a in available)}.",
    )


def _sized(variant: Variant, files: list[RemoteFile]) -> Variant:
    size = sum(f.size for f in files if variant.selects(f.path))
    return Variant(
        variant.name, variant.provider, variant.subfolder, variant.include, size_bytes=size
    )
