"""Every catalog entry, as its repo is published, through plan -> download -> load -> chat.

The fake Hub serves each repo of resources/catalog.json from its replica
(tests/models/replica_hub.py, tests/models/replicas/*.json): the published listing and config
facts, with tiny graphs of the published input / output signatures. One test per catalog
entry and distinct download (the dml and cuda variants of an entry share theirs): the real
catalog plans it, the real downloader fetches and verifies it, Engine.load reads it and one
short greedy chat runs. An entry whose published layout Hearth cannot run fails here.
"""

from __future__ import annotations

import re

import pytest

from app.engine.engine import Engine
from app.engine.types import GenerationSettings, Message, SamplingSettings
from app.models.catalog import load_catalog
from app.models.library import ModelLibrary
from tests.models.hub_server import FakeHub, allow_hub_requests
from tests.models.replica_hub import load_replicas, replica_repo

CATALOG = load_catalog()
REPLICAS = load_replicas()
GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=6)


def _downloads():
    """(entry, variant) for each distinct set of files a catalog variant downloads."""
    cases = []
    for entry in CATALOG:
        seen = set()
        for variant in entry.variants:
            key = variant.subfolder or variant.include
            if key in seen:
                continue
            seen.add(key)
            cases.append(pytest.param(entry, variant, id=f"{entry.id}:{variant.name}"))
    return cases


def test_every_catalog_repo_has_a_replica_and_every_replica_an_entry():
    assert {e.repo for e in CATALOG} == set(REPLICAS)
    for replica in REPLICAS.values():
        assert replica.data["evidence"], replica.path.name


def test_a_pinned_entrys_replica_is_the_listing_public_evidence_shows_at_that_commit():
    """The catalog pins a commit only where public evidence shows it (issue 27); the replica
    of that repo says where its listing comes from, naming the same commit."""
    for entry in CATALOG:
        evidence = " ".join(REPLICAS[entry.repo].data["evidence"])
        if entry.revision != "main":
            assert entry.revision in evidence, entry.id


@pytest.mark.parametrize(("entry", "variant"), _downloads())
def test_a_catalog_entry_plans_downloads_loads_and_chats(monkeypatch, tmp_path, entry, variant):
    allow_hub_requests(monkeypatch)
    replica = REPLICAS[entry.repo]
    graphs = [p for p in replica.graphs() if variant.selects(p)]
    assert len(graphs) == 1, f"{variant.name} selects graphs {graphs} of the listing"
    pinned = re.fullmatch(r"[0-9a-f]{40}", entry.revision) is not None
    repo = replica_repo(replica, commit=entry.revision if pinned else "", only=set(graphs))
    with FakeHub() as hub:
        hub.add(repo)
        library = ModelLibrary(tmp_path / "models", endpoint=hub.url,
                               staging_root=tmp_path / "staging",
                               downloader_options={"retries": 1})
        plan = library.plan_download(entry.id, variant=variant.name)
        assert plan.variant == variant and plan.repo == entry.repo
        model = library.download(plan)
        fetched = {path.split("/resolve/", 1)[1].split("/", 1)[1]
                   for method, path, _ in hub.file_requests() if method == "GET"}
    selected = {p for p in replica.files if variant.selects(p)}
    assert fetched == selected  # the variant's files, nothing of the other precisions
    assert model.manifest.source["revision"] == repo.commit
    engine = Engine.load(model.path, provider="cpu", threads=1, huge_pages=False,
                         prompt_session=False, calibrate=False)
    graph_name = graphs[0].rsplit("/", 1)[-1]
    assert engine.spec.model_path.name == graph_name
    inputs, outputs = replica.signature(graphs[0])
    assert len(engine.graph.kv_layers) == replica.layers()
    assert engine.decoder.position_offset == replica.data["signature"]["positions_from"]
    assert engine.context_length == entry.context_for(variant)
    chunks = list(engine.chat([Message("user", "Tell me about the kettle.")], GREEDY))
    stats = chunks[-1].stats
    assert chunks[-1].finish_reason in ("stop", "max_tokens")
    assert stats is not None and stats.prompt_tokens > 5
    assert 1 <= stats.generated_tokens <= GREEDY.max_new_tokens
    assert {"input_ids", *(n for n in inputs if n.startswith("past"))} <= set(inputs)
    assert "logits" in outputs
