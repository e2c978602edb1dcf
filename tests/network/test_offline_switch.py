"""Offline mode switched at run time takes effect at once, both ways, for every Hub feature
(issue 28 item 2): start offline, turn it off, and the search, the download's metadata, the
token test and huggingface_hub itself work against the loopback stand-in Hub; turn it back
on and each is refused again, without a restart. The log shows each switch."""

from __future__ import annotations

import os

import pytest
from huggingface_hub import HfApi, constants

from app.errors import DownloadError
from app.models.hub import HubClient
from app.network import set_offline
from tests.models.hub_server import FakeHub, FakeRepo

FILES = {"config.json": b"{}", "tokenizer.json": b"{}", "onnx/model_q4.onnx": b"x"}


@pytest.fixture
def offline_start(guard, monkeypatch):
    """The process as an offline start leaves it: Hearth exported HF_HUB_OFFLINE=1 before
    huggingface_hub was imported, so the library read True into its constant. The user never
    set the variable themselves."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    set_offline(True, note=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as read at import time
    return guard


@pytest.fixture
def hub():
    with FakeHub() as server:
        server.add(FakeRepo("org/chat", FILES))
        yield server


def everything_works(hub: FakeHub) -> None:
    client = HubClient(hub.url, retries=0)
    assert [m.id for m in client.search("chat")] == ["org/chat"]
    commit = hub.repos["org/chat"].commit
    assert client.resolve_revision("org/chat", "main") == commit
    assert client.check_connection().startswith(f"Connected to {hub.url}")
    assert HfApi(endpoint=hub.url).model_info("org/chat", revision="main").sha == commit


def everything_is_refused(hub: FakeHub) -> None:
    client = HubClient(hub.url, retries=0)
    for call in (lambda: client.search("chat"),
                 lambda: client.resolve_revision("org/chat", "main"),
                 client.check_connection):
        with pytest.raises(DownloadError) as caught:
            call()
        assert "offline mode is on, so Hearth makes no network connections" in str(caught.value)
        assert "HF_HUB_OFFLINE" not in str(caught.value)


def test_turning_offline_mode_off_and_on_takes_effect_at_once(offline_start, hub):
    everything_is_refused(hub)
    set_offline(False)  # the Settings switch
    assert constants.HF_HUB_OFFLINE is False
    assert "HF_HUB_OFFLINE" not in os.environ
    everything_works(hub)
    set_offline(True)
    assert constants.HF_HUB_OFFLINE is True
    everything_is_refused(hub)
    set_offline(False)
    everything_works(hub)
    assert [s.offline for s in offline_start.log.switches()] == [False, True, False]


def test_a_variable_the_user_set_stays_theirs(guard, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    set_offline(True)
    set_offline(False)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert constants.HF_HUB_OFFLINE is True
