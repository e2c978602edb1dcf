"""Remote sources on disk and their API keys: in the keyring when there is one, else in a
labelled 0600 file; never in the sources file while a keyring exists."""

from __future__ import annotations

import json
import stat
import sys

import pytest

from app.paths import data_root
from app.remote.errors import RemoteError
from app.remote.sources import REMOTE_KEYS_FILE as FALLBACK_NAME
from app.remote.sources import REMOTE_SERVICE as SERVICE
from app.remote.sources import SOURCES_NAME, SourceStore, parse_target, remote_keys, remote_target


def test_sources_persist_and_the_key_goes_to_the_keyring(memory_keyring):
    store = SourceStore()
    source = store.add("GPU box", "http://10.0.0.5:8000/v1/", "sk-secret", cleartext_ok=True)
    assert source.base_url == "http://10.0.0.5:8000"
    assert source.id == "gpu-box" and source.key_place == "keyring"
    assert memory_keyring.secrets == {(SERVICE, "gpu-box"): "sk-secret"}
    text = (data_root() / SOURCES_NAME).read_text(encoding="utf-8")
    assert "sk-secret" not in text
    assert not (data_root() / FALLBACK_NAME).exists()
    again = SourceStore()  # a fresh store reads the file back
    assert again.list() == [source]
    assert again.api_key(again.get("gpu-box")) == "sk-secret"
    second = again.add("GPU box", "localhost:8080")
    assert second.id != "gpu-box" and second.base_url == "http://localhost:8080"
    assert second.key_place is None and again.api_key(second) is None
    assert again.remove("gpu-box") and not again.remove("gpu-box")
    assert memory_keyring.secrets == {}
    assert [s.id for s in SourceStore().list()] == [second.id]


def test_without_a_keyring_the_key_goes_to_a_labelled_private_file(no_keyring):
    keys = remote_keys()
    assert keys.where() == "file"
    assert "NOT encrypted" in keys.describe() and str(keys.fallback) in keys.describe()
    store = SourceStore(keys=keys)
    source = store.add("vLLM", "https://llm.example.org/v1", "sk-file")
    assert source.key_place == "file"
    assert "sk-file" not in (data_root() / SOURCES_NAME).read_text(encoding="utf-8")
    data = json.loads(keys.fallback.read_text(encoding="utf-8"))
    assert data["keys"] == {source.id: "sk-file"} and "NOT encrypted" in data["warning"]
    if sys.platform != "win32":
        assert stat.S_IMODE(keys.fallback.stat().st_mode) == 0o600
    assert SourceStore().api_key(source) == "sk-file"
    store.remove(source.id)
    assert not keys.fallback.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")
def test_the_fallback_file_is_private_even_when_rewritten(no_keyring):
    keys = remote_keys()
    keys.set("a", "one")
    keys.fallback.chmod(0o644)
    keys.set("b", "two")
    assert stat.S_IMODE(keys.fallback.stat().st_mode) == 0o600
    assert (keys.get("a"), keys.get("b")) == ("one", "two")


def test_a_keyring_that_fails_falls_back_to_the_file(memory_keyring):
    def broken(*args):
        raise RuntimeError("Secret Service is locked")

    memory_keyring.set_password = broken  # type: ignore[method-assign]
    store = SourceStore()
    source = store.add("box", "http://127.0.0.1:9", "k")
    assert source.key_place == "file" and store.api_key(source) == "k"


def test_bad_addresses_are_refused_with_a_sentence(memory_keyring):
    store = SourceStore()
    for url in ("ftp://host/v1", "", "http://", "http://host:99999"):
        with pytest.raises(RemoteError) as caught:
            store.add("x", url)
        assert caught.value.kind == "url"
    assert store.list() == []


def test_targets_round_trip_model_ids_with_slashes_and_colons():
    target = remote_target("box", "meta-llama/Llama-3.1-8B:q4")
    assert parse_target(target) == ("box", "meta-llama/Llama-3.1-8B:q4")
    assert parse_target(target.replace("/", "\\")) == ("box", "meta-llama/Llama-3.1-8B:q4")
    with pytest.raises(RemoteError):
        parse_target("remote:onlysource")
