"""What a repo listing says about a variant's graph, before anything is downloaded.

A catalog variant of the Optimum layout names its graph exactly (``onnx/model_q4.onnx``)
beside patterns that always match (``*.json``): a listing without that graph still matches
the patterns, and would install a folder that cannot load. ``missing_graphs`` names the exact
``.onnx`` paths a variant asks for that the listing lacks; ``graph_variants`` lists the
Optimum graphs the listing does hold, to offer instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.engine import policy
from app.models.catalog import Variant

_WILDCARDS = frozenset("*?[")


def missing_graphs(variant: Variant, paths: Iterable[str]) -> list[str]:
    """The ``.onnx`` files ``variant`` names exactly (no wildcard) that ``paths`` lacks."""
    if variant.subfolder is not None:
        return []
    listed = set(paths)
    return [p for p in variant.include
            if p.endswith(".onnx") and not _WILDCARDS & set(p) and p not in listed]


def graph_variants(paths: Iterable[str]) -> list[tuple[str, str]]:
    """(precision, path) of every Optimum decoder graph in ``paths`` (``onnx/`` and the
    root), ordered by path."""
    found = []
    for path in sorted(set(paths)):
        folder, _, name = path.rpartition("/")
        if folder not in ("", "onnx") or not name.endswith(".onnx"):
            continue
        stem = name[: -len(".onnx")]
        if policy.is_optimum_graph(stem):
            found.append((policy.graph_precision(stem), path))
    return found
