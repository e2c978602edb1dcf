"""``hearth serve`` from the command line."""

from __future__ import annotations

import threading

import openai

from app.cli import build_parser, main
from app.server.cli import run_serve


def test_serve_command_serves_until_stopped(gqa_model_dir, capsys):
    args = build_parser().parse_args(["serve", str(gqa_model_dir), "--port", "0", "--queue",
                                      "2", "--api-key", "k"])
    ready, stop, addresses = threading.Event(), threading.Event(), []
    codes = []

    def on_ready(address):
        addresses.append(address)
        ready.set()

    thread = threading.Thread(target=lambda: codes.append(run_serve(args, on_ready=on_ready,
                                                                    stop=stop)))
    thread.start()
    try:
        assert ready.wait(30)
        address = addresses[0]
        assert address.host == "127.0.0.1" and address.port > 0
        client = openai.OpenAI(base_url=address.base_url, api_key="k", max_retries=0)
        reply = client.chat.completions.create(
            model=gqa_model_dir.name, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        assert reply.usage.completion_tokens == 3
    finally:
        stop.set()
        thread.join(10)
    assert codes == [0]
    out = capsys.readouterr().out
    assert address.base_url in out and "API key required" in out


def test_serve_refuses_a_network_address_without_a_key(gqa_model_dir, capsys):
    code = main(["serve", str(gqa_model_dir), "--host", "0.0.0.0", "--port", "0"])
    assert code == 2
    err = capsys.readouterr().err
    assert "without an API key" in err and "--api-key" in err


def test_serve_says_when_the_port_is_taken(gqa_model_dir, capsys, serve):
    served = serve(gqa_model_dir)
    code = main(["serve", str(gqa_model_dir), "--port", str(served.address.port)])
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{served.address.port}" in capsys.readouterr().err


def test_api_keys_come_from_a_file_or_the_environment(tmp_path, monkeypatch, capsys):
    from app.server.cli import api_keys

    def keys(*extra):
        return api_keys(build_parser().parse_args(["serve", "m", *extra]))

    monkeypatch.setenv("HEARTH_API_KEY", "  from-env \n")
    assert keys() == ("from-env",)
    monkeypatch.setenv("HEARTH_API_KEY", "   ")  # empty: no key, so loopback still serves
    assert keys() == ()
    path = tmp_path / "keys"
    path.write_text(" alice-key \n\nbob-kéy\n", encoding="utf-8")
    assert keys("--api-key-file", str(path)) == ("alice-key", "bob-kéy")
    assert capsys.readouterr().err == ""
    assert keys("--api-key", " padded ") == ("padded",)
    assert "process list" in capsys.readouterr().err


def test_a_padded_or_non_ascii_key_matches(serve, gqa_model_dir):
    served = serve(gqa_model_dir, api_key="kéy-one", more_api_keys=("two",))
    import httpx2

    for sent in ("kéy-one".encode(), b"  two"):
        models = httpx2.get(f"{served.url}/models",
                            headers={"Authorization": b"Bearer " + sent})
        assert models.status_code == 200, sent
    assert httpx2.get(f"{served.url}/models",
                      headers={"Authorization": "Bearer three"}).status_code == 401


def test_serve_embedder_serves_a_downloaded_hub_embedder_by_its_id(gqa_model_dir, tmp_path,
                                                                    monkeypatch):
    from app.documents.embedders import EmbedderStore
    from tests.documents.embedder_replicas import load_replicas, replica_repo
    from tests.models.hub_server import FakeHub, allow_hub_requests

    allow_hub_requests(monkeypatch)
    store = EmbedderStore(staging_root=tmp_path / "staging")  # the embedders folder
    entry = store.catalog.get("bge-small-en-v1.5")
    with FakeHub() as hub:
        hub.add(replica_repo(load_replicas()[entry.repo], entry.dims))
        store.endpoint = hub.url
        store.download(store.plan(entry.id))
    args = build_parser().parse_args(["serve", str(gqa_model_dir), "--port", "0",
                                      "--embedder", entry.id])
    ready, stop, addresses, codes = threading.Event(), threading.Event(), [], []
    thread = threading.Thread(target=lambda: codes.append(run_serve(
        args, on_ready=lambda a: (addresses.append(a), ready.set()), stop=stop)))
    thread.start()
    try:
        assert ready.wait(30)
        client = openai.OpenAI(base_url=addresses[0].base_url, api_key="x", max_retries=0)
        assert entry.id in [m.id for m in client.models.list().data]
        reply = client.embeddings.create(model=entry.id, input=["the kettle sings"])
        assert len(reply.data[0].embedding) == 384
    finally:
        stop.set()
        thread.join(10)
    assert codes == [0]


def test_serve_names_an_embedder_that_is_not_downloaded(gqa_model_dir, capsys):
    assert main(["serve", str(gqa_model_dir), "--port", "0", "--embedder",
                 "multilingual-e5-small"]) != 0
    assert "multilingual-E5 small is not downloaded yet" in capsys.readouterr().err
