"""Hub search against the stand-in Hub: which repos count as chat models, and why one cannot run."""

from __future__ import annotations

import pytest

from app.models.hub import MAX_SEARCH_RESULTS, HubClient
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests

CONFIG = {"config.json": b"{}", "tokenizer.json": b"{}"}


@pytest.fixture()
def hub(monkeypatch):
    allow_hub_requests(monkeypatch)
    with FakeHub() as server:
        yield server


def _repo(repo_id: str, files: list[str], *, tag: str | None = "text-generation",
          downloads: int = 1, **kwargs) -> FakeRepo:
    return FakeRepo(repo_id, {**CONFIG, **{f: b"x" for f in files}}, pipeline_tag=tag,
                    downloads=downloads, **kwargs)


def test_search_finds_chat_models_of_every_tag_and_untagged_decoders(hub):
    hub.add(_repo("org/chat-q4", ["onnx/model_q4.onnx"], downloads=90))
    hub.add(_repo("org/chat-vlm", ["onnx/model_q4.onnx"], tag="image-text-to-text", downloads=80))
    hub.add(_repo("org/chat-any", ["onnx/model.onnx"], tag="any-to-any", downloads=70))
    hub.add(_repo("org/chat-untagged", ["cpu/genai_config.json", "cpu/model.onnx"], tag=None,
                  downloads=60))
    hub.add(_repo("org/chat-embedder", ["onnx/encoder_model.onnx"], tag="feature-extraction"))
    hub.add(_repo("org/chat-untagged-encoder", ["onnx/encoder_model.onnx"], tag=None))
    hub.add(_repo("org/chat-pytorch", ["model.safetensors"], tags=("text-generation",)))
    found = HubClient(hub.url, retries=0).search("chat", ram_bytes=64_000_000_000)
    assert [m.id for m in found] == [
        "org/chat-q4", "org/chat-vlm", "org/chat-any", "org/chat-untagged"
    ]
    assert all(m.runnable and m.reason is None for m in found)
    assert {s.get("pipeline_tag") for s in hub.searches} == {
        "text-generation", "image-text-to-text", "any-to-any", None
    }
    assert all(s["filter"] == "onnx" for s in hub.searches)


def test_search_says_why_a_result_cannot_run(hub):
    hub.add(_repo("org/Big-70B-Instruct", ["onnx/model_q4.onnx"], downloads=4))
    hub.add(_repo("org/split-1B", ["onnx/decoder_model.onnx", "onnx/decoder_with_past_model.onnx"],
                  downloads=3))
    hub.add(_repo("org/vision-1B", ["onnx/embed_tokens.onnx", "onnx/decoder_model_merged.onnx",
                                    "onnx/vision_encoder.onnx"], tag="image-text-to-text",
                  downloads=2))
    hub.add(_repo("org/gated-1B", ["onnx/model_q4.onnx"], gated_token="hf_x", downloads=1))
    found = {m.id: m for m in HubClient(hub.url, retries=0).search("", ram_bytes=16_000_000_000)}
    assert found["org/Big-70B-Instruct"].reason.startswith("too big for this machine")
    assert found["org/Big-70B-Instruct"].parameters == 70_000_000_000
    assert "decoder-with-past" in found["org/split-1B"].reason
    assert found["org/vision-1B"].runnable  # split layout: the text decoder runs
    assert found["org/gated-1B"].runnable and found["org/gated-1B"].gated
    assert found["org/gated-1B"].as_dict()["reason"] is None


def test_search_results_are_capped(hub):
    for i in range(MAX_SEARCH_RESULTS + 5):
        hub.add(_repo(f"org/m{i:03d}", ["onnx/model.onnx"], downloads=i))
    found = HubClient(hub.url, retries=0).search("", limit=1000)
    assert len(found) == MAX_SEARCH_RESULTS
    assert found[0].id == f"org/m{MAX_SEARCH_RESULTS + 4:03d}"
    assert all(int(s["limit"]) == MAX_SEARCH_RESULTS for s in hub.searches)
