"""POST /v1/embeddings through the real stack (engine thread, Starlette, uvicorn on
127.0.0.1) with the official openai client and the real starter embedder."""

from __future__ import annotations

import base64

import httpx2 as httpx
import numpy as np
import openai
import pytest

from app.documents.embedding import TextEmbedder
from app.documents.starter_embedder import EMBEDDER_ID, INT8_CARD_TOLERANCE
from app.engine.engine import Engine
from app.server.app import HearthApi
from app.server.config import ServerConfig
from app.server.embeddings import EmbeddingService
from app.server.executor import ThreadEngineExecutor
from app.server.runner import ServerRunner

CARD = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]


@pytest.fixture(scope="module")
def served(gqa_model_dir, embedder_dir):
    executor = ThreadEngineExecutor(lambda: Engine.load(gqa_model_dir))
    model = executor.start()
    service = EmbeddingService(EMBEDDER_ID, lambda: embedder_dir, threads=1)
    runner = ServerRunner(HearthApi(executor, ServerConfig(port=0), service))
    address = runner.start()
    yield address.base_url, model
    assert runner.stop()
    assert executor.close()
    service.close()


@pytest.fixture(scope="module")
def client(served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served[0], api_key="unused", max_retries=0)


def test_the_embedder_is_listed_by_its_id_beside_the_chat_model(served, client):
    ids = [m.id for m in client.models.list().data]
    assert ids == [served[1].id, EMBEDDER_ID]
    assert client.models.retrieve(EMBEDDER_ID).id == EMBEDDER_ID


def test_the_openai_client_gets_the_model_cards_similarities(client):
    # the SDK asks for base64 unless told otherwise; it decodes the float32 bytes itself
    reply = client.embeddings.create(model=EMBEDDER_ID, input=CARD)
    assert reply.model == EMBEDDER_ID and [d.index for d in reply.data] == [0, 1, 2]
    vectors = np.array([d.embedding for d in reply.data])
    assert vectors.shape == (3, 384)
    sims = vectors @ vectors.T  # the int8 graph: the card's figures within its tolerance
    for (i, j), published in {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}.items():
        assert abs(float(sims[i, j]) - published) < INT8_CARD_TOLERANCE
    assert reply.usage.prompt_tokens == reply.usage.total_tokens > 3 * 3


def test_float_and_base64_carry_the_same_vector(served, client, embedder_dir):
    floats = client.embeddings.create(model=EMBEDDER_ID, input=CARD[0],
                                      encoding_format="float").data[0].embedding
    raw = httpx.post(f"{served[0]}/embeddings", json={
        "model": EMBEDDER_ID, "input": CARD[0], "encoding_format": "base64"}).json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), "<f4")
    assert isinstance(floats, list) and len(floats) == 384
    np.testing.assert_allclose(decoded, np.array(floats, np.float32), rtol=0, atol=1e-7)
    direct = TextEmbedder(embedder_dir, threads=1).embed([CARD[0]])[0]
    np.testing.assert_allclose(decoded, direct, atol=1e-5)
    assert raw["object"] == "list" and raw["data"][0]["object"] == "embedding"


def test_bad_requests_get_openai_errors(served, client):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.embeddings.create(model="text-embedding-3-small", input="hello")
    with pytest.raises(openai.BadRequestError, match="token ids"):
        client.embeddings.create(model=EMBEDDER_ID, input=[[1, 2, 3]])
    with pytest.raises(openai.BadRequestError, match="384-dimensional"):
        client.embeddings.create(model=EMBEDDER_ID, input="hello", dimensions=256)
    for body, param in (({"model": EMBEDDER_ID}, "input"),
                        ({"model": EMBEDDER_ID, "input": ["a", ""]}, "input"),
                        ({"model": EMBEDDER_ID, "input": "a", "encoding_format": "hex"},
                         "encoding_format"),
                        ({"input": "a"}, "model")):
        reply = httpx.post(f"{served[0]}/embeddings", json=body)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == param


def test_a_server_without_an_embedder_says_so(gqa_model_dir):
    executor = ThreadEngineExecutor(lambda: Engine.load(gqa_model_dir))
    executor.start()
    runner = ServerRunner(HearthApi(executor, ServerConfig(port=0)))
    base = runner.start().base_url
    try:
        reply = httpx.post(f"{base}/embeddings", json={"model": EMBEDDER_ID, "input": "a"})
        assert reply.status_code == 404
        assert "has no embedder" in reply.json()["error"]["message"]
        assert [m["id"] for m in httpx.get(f"{base}/models").json()["data"]] != []
    finally:
        assert runner.stop()
        assert executor.close()
