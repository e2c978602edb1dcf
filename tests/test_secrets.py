"""Secrets go to the OS keyring (an in-memory backend in tests), or, where there is none, to
a labelled 0600 file that ``describe`` names; never anywhere else."""

from __future__ import annotations

import json
import stat
import sys

from app.paths import data_root
from app.secrets import FALLBACK_NAME, HUB_TOKEN, SERVICE, SecretStore, hub_token


def test_a_secret_round_trips_through_the_keyring(memory_keyring):
    store = SecretStore(what="The token")
    assert store.where() == "keyring" and "system keyring" in store.describe()
    assert store.set(HUB_TOKEN, "hf_abc") == "keyring"
    assert memory_keyring.secrets == {(SERVICE, HUB_TOKEN): "hf_abc"}
    assert store.get(HUB_TOKEN) == "hf_abc" and hub_token() == "hf_abc"
    assert not (data_root() / FALLBACK_NAME).exists()
    store.delete(HUB_TOKEN)
    assert store.get(HUB_TOKEN) is None


def test_without_a_keyring_the_secret_goes_to_a_private_labelled_file(no_keyring):
    store = SecretStore(what="The token")
    assert store.where() == "file"
    assert "NOT encrypted" in store.describe() and str(store.fallback) in store.describe()
    assert store.set(HUB_TOKEN, "hf_abc") == "file"
    data = json.loads(store.fallback.read_text(encoding="utf-8"))
    assert data["keys"] == {HUB_TOKEN: "hf_abc"} and "NOT encrypted" in data["warning"]
    if sys.platform != "win32":
        assert stat.S_IMODE(store.fallback.stat().st_mode) == 0o600
    assert hub_token() == "hf_abc"
    store.delete(HUB_TOKEN)
    assert not store.fallback.exists()


def test_the_hub_token_comes_from_the_first_place_that_has_one(memory_keyring, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert hub_token("explicit", legacy="old") == "explicit"
    assert hub_token(legacy="old") == "old"
    SecretStore().set(HUB_TOKEN, "stored")
    assert hub_token(legacy="old") == "stored"
