"""Fixtures for the remote engine tests: the stand-in server. Every remote test runs on an
in-memory keyring (tests/conftest.py ``memory_keyring``), never the user's real one."""

from __future__ import annotations

import pytest

from tests.remote.openai_stub import OpenAIStub, StubConfig


@pytest.fixture
def make_stub():
    stubs: list[OpenAIStub] = []

    def factory(**config) -> OpenAIStub:
        stub = OpenAIStub(StubConfig(**config)).start()
        stubs.append(stub)
        return stub

    yield factory
    for stub in stubs:
        stub.stop()


@pytest.fixture
def stub(make_stub) -> OpenAIStub:
    return make_stub()
