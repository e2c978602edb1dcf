"""Hearth's server over a remote backend: the API on a ``RemoteEngine`` (the in-app server
over a remote model picked in the window runs the same jobs), and ``hearth serve --remote``
in front of a real ``hearth serve`` of a tiny model, both on loopback, with the official
openai client."""

from __future__ import annotations

import threading

import httpx2 as httpx
import openai
import pytest

from app.cli import build_parser, main
from app.network import NetworkLog, install_guard, set_offline, uninstall_guard
from app.remote.engine import RemoteEngine
from app.remote.sources import SourceStore
from app.server.app import HearthApi
from app.server.cli import run_serve
from app.server.config import ServerConfig
from app.server.executor import ThreadEngineExecutor
from app.server.runner import ServerRunner
from tests.remote.openai_stub import OpenAIStub, StubConfig

CHAT = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello there, how are you"}]


@pytest.fixture
def stub():
    server = OpenAIStub(StubConfig()).start()
    yield server
    server.stop()


def test_the_api_over_a_remote_backend_answers_and_counts_with_the_remotes_usage(stub):
    target = SourceStore().add("Stub", stub.url, None).target("stub-model")
    executor = ThreadEngineExecutor(lambda: RemoteEngine.load(target))
    served = executor.start()
    runner = ServerRunner(HearthApi(executor, ServerConfig(port=0)))
    address = runner.start()
    try:
        client = openai.OpenAI(base_url=address.base_url, api_key="x", max_retries=0)
        reply = client.chat.completions.create(model=served.id, messages=CHAT, max_tokens=8)
        assert reply.choices[0].message.content == "Hello, world!"
        # the stub has no /tokenize: the figures are the remote's own usage
        assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (8, 4)
        stream = client.chat.completions.create(model=served.id, messages=CHAT, stream=True,
                                                stream_options={"include_usage": True})
        events = list(stream)
        assert "".join(e.choices[0].delta.content or "" for e in events if e.choices) == \
            "Hello, world!"
        assert events[-1].usage.completion_tokens == 4
        sent = [r.body for r in stub.requests if r.path.endswith("/chat/completions")]
        assert sent[0]["messages"] == CHAT and sent[0]["max_tokens"] == 8
    finally:
        assert runner.stop()
        assert executor.close()


@pytest.fixture
def gateway():
    """``gateway(*cli args)`` → the base URL of a running ``hearth serve --remote …``."""
    stops, threads = [], []

    def start(*argv: str) -> str:
        args = build_parser().parse_args(["serve", "--port", "0", *argv])
        ready, stop, addresses, errors = threading.Event(), threading.Event(), [], []

        def run():
            try:
                run_serve(args, on_ready=lambda a: (addresses.append(a), ready.set()),
                          stop=stop)
            except BaseException as exc:
                errors.append(exc)
                ready.set()

        thread = threading.Thread(target=run)
        thread.start()
        stops.append(stop)
        threads.append(thread)
        assert ready.wait(30)
        assert not errors, errors
        return addresses[0].base_url

    yield start
    for stop in stops:
        stop.set()
    for thread in threads:
        thread.join(15)
        assert not thread.is_alive()


def test_a_greedy_chat_through_the_gateway_equals_the_engine_directly(serve, gqa_model_dir,
                                                                      gateway):
    engine = serve(gqa_model_dir)
    direct = engine.client()
    via = openai.OpenAI(base_url=gateway("--remote", engine.url), api_key="x", max_retries=0)
    assert [m.id for m in via.models.list().data] == [engine.model.id]
    asked = dict(model=engine.model.id, messages=CHAT, temperature=0, max_tokens=24)
    want = direct.chat.completions.create(**asked)
    got = via.chat.completions.create(**asked)
    assert got.choices[0].message.content == want.choices[0].message.content
    assert want.choices[0].message.content  # a reply, not two empty ones
    assert got.choices[0].finish_reason == want.choices[0].finish_reason
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (
        want.usage.prompt_tokens, want.usage.completion_tokens)
    streamed = via.chat.completions.create(**asked, stream=True)
    assert "".join(e.choices[0].delta.content or "" for e in streamed if e.choices) == \
        want.choices[0].message.content
    # raw completions pass through too, as text and as token ids
    for prompt in ("Once upon a time", [1, 2, 3, 4]):
        raw = dict(model=engine.model.id, prompt=prompt, temperature=0, max_tokens=12)
        assert via.completions.create(**raw).choices[0].text == \
            direct.completions.create(**raw).choices[0].text
    with pytest.raises(openai.NotFoundError):
        via.chat.completions.create(**{**asked, "model": "no-such-model"})


def test_the_gateway_passes_the_remotes_refusals_on_and_keeps_its_own_key(serve, gqa_model_dir,
                                                                         gateway, tmp_path,
                                                                         monkeypatch):
    engine = serve(gqa_model_dir, api_key="remote-key")
    key_file = tmp_path / "remote.key"
    key_file.write_text("remote-key\n")
    monkeypatch.setenv("HEARTH_API_KEY", "gateway-key")
    base = gateway("--remote", engine.url, "--remote-key-file", str(key_file),
                   "--remote-model", engine.model.id)
    assert httpx.get(f"{base}/models").status_code == 401  # the gateway's own key
    via = openai.OpenAI(base_url=base, api_key="gateway-key", max_retries=0)
    reply = via.chat.completions.create(model=engine.model.id, messages=CHAT, max_tokens=3)
    assert reply.usage.completion_tokens == 3
    with pytest.raises(openai.BadRequestError) as refused:  # the remote's 400, passed on
        via.chat.completions.create(model=engine.model.id, messages=CHAT, max_tokens=10**6)
    assert "maximum context length" in refused.value.message


@pytest.fixture
def offline_guard():
    uninstall_guard()
    guard = install_guard(NetworkLog(capacity=50), offline=False)
    set_offline(True)
    yield guard
    set_offline(False)
    uninstall_guard()


def test_offline_mode_refuses_a_remote_on_another_machine_before_any_connection(
        offline_guard, capsys):
    code = main(["serve", "--remote", "https://192.0.2.10:8000/v1", "--port", "0"])
    assert code == 2
    assert "offline mode is on" in capsys.readouterr().err
    (attempt,) = offline_guard.log.entries()
    assert (attempt.host, attempt.allowed) == ("192.0.2.10", False)


def test_plain_http_to_another_machine_needs_the_users_word(capsys):
    code = main(["serve", "--remote", "http://192.0.2.10:8000/v1", "--port", "0"])
    assert code == 2
    err = capsys.readouterr().err
    assert "unencrypted" in err and "--remote-allow-http" in err
