"""Engine and RemoteEngine implement the whole Backend contract, by signature and by answer."""

from __future__ import annotations

import inspect

import pytest

from app.chat.backend import Backend
from app.engine.engine import Engine
from app.engine.types import BackendInfo, Capabilities, Message
from app.remote.engine import RemoteEngine
from app.remote.sources import SourceStore


def _members() -> list[str]:
    return sorted(name for name, value in vars(Backend).items()
                  if callable(value) and not name.startswith("_"))


def _shape(function) -> list[tuple[str, object, bool]]:
    """Each parameter's name, kind and whether it has a default (annotations aside)."""
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty)
            for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("cls", [Engine, RemoteEngine])
def test_both_engines_have_every_member_with_the_protocols_signature(cls):
    assert _members() == ["capabilities", "chat", "close", "complete", "conversation_caches",
                          "count_tokens", "describe", "encode_chat", "encode_prompt", "prepare"]
    for name in _members():
        assert _shape(getattr(cls, name)) == _shape(getattr(Backend, name)), f"{cls}.{name}"


def test_the_local_engine_answers_what_it_is(gqa_model_dir):
    engine = Engine.load(gqa_model_dir, provider="cpu", threads=1)
    assert isinstance(engine, Backend)
    assert engine.capabilities() == Capabilities(tools=False, vision=False, documents=False,
                                                 embeddings=False, exact_tokens=True)
    info = engine.describe()
    assert isinstance(info, BackendInfo)
    assert (info.name, info.provider, info.context_length) == (
        engine.spec.name, "cpu", engine.context_length)
    ids = engine.encode_chat([Message("user", "hello")])
    assert ids and engine.count_tokens([Message("user", "hello")]) == len(ids)


def _remote(stub) -> RemoteEngine:
    return RemoteEngine.load(SourceStore().add("Stub", stub.url, None).target("stub-model"))


def test_a_remote_engine_tokenizes_where_the_server_can(make_stub):
    engine = _remote(make_stub(tokenize=True))
    assert engine.capabilities().exact_tokens is False  # not known before it is asked
    chat = [Message("user", "say hello")]
    assert engine.encode_chat(chat) == list(range(5))  # the stub's tokens
    assert engine.capabilities() == Capabilities(tools=True, exact_tokens=True,
                                                 tool_format="remote")
    assert engine.describe().provider == "remote"
    engine.close()


def test_a_remote_engine_without_tokenize_says_it_cannot_know(make_stub):
    stub = make_stub()
    engine = _remote(stub)
    chat = [Message("user", "say hello")]
    assert engine.encode_chat(chat) is None
    assert engine.count_tokens(chat) == 7  # the documented estimate: 4 chars a token + 4
    assert engine.token_count_estimated and not engine.capabilities().exact_tokens
    asked = [r.path for r in stub.requests].count("/tokenize")
    engine.count_tokens(chat)
    assert [r.path for r in stub.requests].count("/tokenize") == asked == 1  # not asked again
    engine.close()
