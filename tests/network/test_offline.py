"""Offline mode through the paths Hearth really uses: huggingface_hub, Hearth's Hub client
and downloader, the command line. Zero attempts reach the (tripwired) network, each refusal
is in the log, and the user reads "offline mode is on"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import OfflineModeIsEnabled

from app.errors import DownloadError
from app.models.catalog import Variant
from app.models.downloader import Downloader, DownloadRequest
from app.models.hub import HubClient, HubUnreachable
from app.models.library import ModelLibrary
from app.network import feature, offline_requested, set_offline
from tests.models.hub_server import FakeHub, FakeRepo

ROOT = Path(__file__).resolve().parents[2]
BLOCKED_ENDPOINT = "http://192.0.2.1"


def test_hf_hub_is_switched_offline(offline, tripwire):
    assert constants.HF_HUB_OFFLINE is True
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(OfflineModeIsEnabled):
        HfApi(endpoint=BLOCKED_ENDPOINT).model_info("org/model")
    assert tripwire == []


def test_a_library_that_ignores_hf_offline_is_still_stopped_at_the_socket(
    offline, tripwire, monkeypatch
):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # as if it had not listened
    # huggingface_hub's own error, or Hearth's (app/models/hub.py wraps the Hub client's
    # transport once imported, so that a refused connect is not retried)
    with feature("Hub metadata"), pytest.raises((httpx2.ConnectError, HubUnreachable),
                                                match="offline mode"):
        HfApi(endpoint=BLOCKED_ENDPOINT).model_info("org/model")
    assert tripwire == []
    blocked = offline.log.blocked()
    assert blocked
    assert {(e.target, e.feature) for e in blocked} == {("192.0.2.1:80", "Hub metadata")}


def test_hearth_hub_client_refuses_with_a_sentence(offline, tripwire):
    client = HubClient(BLOCKED_ENDPOINT, retries=0)
    with pytest.raises(DownloadError, match="offline mode is on") as caught:
        client.search("phi")
    assert "Turn off offline mode" in str(caught.value)
    with pytest.raises(DownloadError, match="offline mode is on"):
        client.resolve_revision("org/model", "main")
    assert tripwire == []
    assert [(e.feature, e.target, e.kind) for e in offline.log.blocked()] == [
        ("Hub search", "192.0.2.1:80", "request"),
        ("Hub metadata", "192.0.2.1:80", "request"),
    ]


def test_downloader_refuses_and_names_the_feature(offline, tripwire):
    downloader = Downloader(ModelLibrary(), endpoint="https://huggingface.co", retries=0)
    request = DownloadRequest(
        model_id="m", name="M", repo="org/model", revision="main", variant=Variant("cpu", "cpu")
    )
    with feature("model download"), pytest.raises(DownloadError, match="offline mode is on"):
        downloader.download(request)
    assert tripwire == []
    [entry] = offline.log.blocked()
    assert (entry.feature, entry.target) == ("model download", "huggingface.co:443")


def test_loopback_stays_allowed_offline(offline, tripwire):
    """The downloader's own HTTP client (httpx2) still reaches a server on 127.0.0.1."""
    with FakeHub() as hub:
        hub.add(FakeRepo("org/model", {"config.json": b"{}"}))
        commit = hub.repos["org/model"].commit
        with httpx2.Client() as client:
            answer = client.get(f"{hub.url}/org/model/resolve/{commit}/config.json")
    assert answer.status_code == 200
    assert answer.content == b"{}"
    assert tripwire == []
    entries = offline.log.entries()
    assert entries
    assert all(e.allowed and e.reason == "loopback" for e in entries)


def test_switching_back_online_restores_the_environment(guard, monkeypatch):
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    set_offline(True)
    assert constants.HF_HUB_OFFLINE is True
    assert (os.environ["PIP_NO_INDEX"], os.environ["HF_HUB_OFFLINE"]) == ("1", "1")
    assert os.environ["HEARTH_OFFLINE"] == "1"
    set_offline(False)
    assert "PIP_NO_INDEX" not in os.environ
    assert os.environ["HF_HUB_OFFLINE"] == "0"
    assert constants.HF_HUB_OFFLINE is False
    assert guard.offline is False


def test_offline_is_asked_for_by_flag_env_or_setting(monkeypatch):
    from app.settings import Settings

    monkeypatch.delenv("HEARTH_OFFLINE", raising=False)
    assert offline_requested(["models", "list"]) is False
    assert offline_requested(["models", "list", "--offline"]) is True
    assert offline_requested(["chat", "--", "--offline"]) is False
    monkeypatch.setenv("HEARTH_OFFLINE", "1")
    assert offline_requested([]) is True
    monkeypatch.delenv("HEARTH_OFFLINE")
    settings = Settings()
    settings.set("offline", True)
    settings.save()
    assert offline_requested([]) is True
    assert offline_requested(["--version"]) is False


def test_every_subcommand_takes_the_flag():
    from app.cli import build_parser

    parser = build_parser()
    for argv in (["--offline"], ["--offline", "models", "list"], ["models", "list", "--offline"],
                 ["models", "search", "x", "--offline"], ["setup-starter", "--offline"]):
        assert parser.parse_args(argv).offline is True


def test_cli_offline_search_exits_with_a_sentence(tmp_path):
    env = dict(os.environ, HEARTH_HOME=str(tmp_path), HF_HUB_OFFLINE="0")
    env.pop("HEARTH_OFFLINE", None)
    result = subprocess.run(
        [sys.executable, "-m", "app", "--offline", "models", "search", "foo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("hearth: Cannot reach https://huggingface.co/api/models")
    assert "offline mode is on" in result.stderr
    assert result.stdout == ""
