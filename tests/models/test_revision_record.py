"""An unpinned repo's first download fixes the commit every later download of it uses."""

from __future__ import annotations

import pytest

from app.errors import DownloadError
from app.models.catalog import parse_catalog
from app.models.library import ModelLibrary
from app.models.revision_record import RECORD_NAME, RevisionRecord
from tests.fixtures.tiny_models import build_plain_kv_model
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests

REPO = "org/tiny-unpinned"


@pytest.fixture()
def hub(monkeypatch, tmp_path):
    allow_hub_requests(monkeypatch)
    with FakeHub() as server:
        server.add(FakeRepo.from_folder(REPO, build_plain_kv_model(tmp_path / "plain")))
        yield server


def _library(hub: FakeHub) -> ModelLibrary:
    entry = {"id": "tiny", "name": "Tiny", "repo": REPO, "revision": "main", "context_length": 512,
             "parameters": 1000, "format": "optimum",
             "variants": [{"name": "cpu-fp32", "provider": "cpu",
                           "include": ["*.json", "onnx/model.onnx*"]}]}
    return ModelLibrary(endpoint=hub.url, catalog=parse_catalog({"models": [entry]}),
                        downloader_options={"retries": 1})


def test_the_first_download_records_main_and_later_downloads_reuse_it(hub):
    library = _library(hub)
    commit = hub.repos[REPO].commit
    model = library.download(library.plan_download("tiny", provider="cpu"))
    assert model.source["revision"] == commit  # the manifest names the commit, not "main"
    assert RevisionRecord(library.root).get(REPO) == commit
    assert (library.root / RECORD_NAME).is_file()
    assert [m.id for m in library.list_models()] == ["tiny"]  # the record is not a model

    library.remove("tiny")
    hub.requests.clear()
    again = library.download(library.plan_download("tiny", provider="cpu"))
    assert again.source["revision"] == commit
    paths = [path for _, path, _ in hub.requests]
    assert not any("/revision/main" in p for p in paths)
    assert any(f"/tree/{commit}" in p for p in paths)


def test_a_recorded_commit_is_what_the_download_asks_for(hub):
    library = _library(hub)
    RevisionRecord(library.root).remember(REPO, "f" * 40)
    RevisionRecord(library.root).remember(REPO, "e" * 40)  # the first record stays
    with pytest.raises(DownloadError, match="revision or file was not found"):
        library.download(library.plan_download("tiny", provider="cpu"))
    assert RevisionRecord(library.root).get(REPO) == "f" * 40
    assert RevisionRecord(library.root).get("org/other") is None
