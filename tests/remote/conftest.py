"""Fixtures for the remote engine tests: the stand-in server and keyring backends."""

from __future__ import annotations

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail

from tests.remote.openai_stub import OpenAIStub, StubConfig


class MemoryKeyring(KeyringBackend):
    """An in-memory keyring: a real backend class as ``keyring`` sees one, no user data."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.secrets: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.secrets.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.secrets[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.secrets.pop((service, username), None)


@pytest.fixture(autouse=True)
def memory_keyring():
    """Every remote test runs on an in-memory keyring, never the user's real one."""
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


@pytest.fixture
def no_keyring():
    previous = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    yield
    keyring.set_keyring(previous)


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
