"""A Hub that cannot be reached at all (connection refused) is said at once, never retried;
transient failures (5xx) still are (issue 28 item 3). The refused port is on loopback: a
socket bound but not listening."""

from __future__ import annotations

import socket

import pytest

from app.errors import DownloadError
from app.models.hub import HubClient
from app.network import NetworkLog, install_guard, uninstall_guard
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests


@pytest.fixture
def refused_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # bound, never listening: every connect is refused
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def log(monkeypatch):
    allow_hub_requests(monkeypatch)
    uninstall_guard()
    guard = install_guard(NetworkLog(capacity=100), offline=False)
    yield guard.log
    uninstall_guard()


def test_a_refused_connection_is_not_retried_and_says_offline(log, refused_port, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)  # any backoff wait would land here
    client = HubClient(f"http://127.0.0.1:{refused_port}", retries=4)
    for call in (lambda: client.search("phi"), lambda: client.resolve_revision("o/m", "main"),
                 client.check_connection):
        with pytest.raises(DownloadError) as caught:
            call()
        text = str(caught.value)
        assert text.startswith("You're offline (or the Hub is unreachable): "
                               "the connection was refused"), text
        assert f"127.0.0.1:{refused_port}" in text
    assert slept == []
    attempts = [e for e in log.entries() if e.port == refused_port]
    assert len(attempts) == 3  # one connect per call: no retry


def test_server_errors_are_still_retried(log, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    with FakeHub() as hub:
        repo = hub.add(FakeRepo("org/m", {"config.json": b"{}"}))
        hub.faults.api_fail_first = 2  # two HTTP 500 answers, then the real one
        assert HubClient(hub.url, retries=2).resolve_revision("org/m", "main") == repo.commit
