"""Secrets go to the OS keyring (an in-memory backend here), never to a file."""

from __future__ import annotations

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail

from app import secrets


class MemoryKeyring(KeyringBackend):
    priority = 1

    def __init__(self) -> None:
        super().__init__()
        self.store: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.store.get((service, username))

    def set_password(self, service, username, password):
        self.store[(service, username)] = password

    def delete_password(self, service, username):
        self.store.pop((service, username))


@pytest.fixture
def memory_keyring():
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


def test_a_secret_round_trips_through_the_keyring_and_empty_deletes_it(memory_keyring, tmp_path):
    assert secrets.available()
    assert secrets.set_secret("hub_token", "hf_abc")
    assert memory_keyring.store == {("Hearth", "hub_token"): "hf_abc"}
    assert secrets.get_secret("hub_token") == "hf_abc"
    assert secrets.set_secret("hub_token", "")
    assert secrets.get_secret("hub_token") is None
    assert secrets.set_secret("hub_token", "")  # deleting nothing is fine


def test_without_a_keyring_nothing_is_stored_and_callers_are_told():
    previous = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        assert not secrets.available()
        assert secrets.set_secret("hub_token", "hf_abc") is False
        assert secrets.get_secret("hub_token") is None
    finally:
        keyring.set_keyring(previous)
