"""Fixtures for the network tests: a tripwire under the guard and a fresh guard on top.

The tripwire replaces the real socket functions *before* the guard wraps them, so whatever
the guard lets through lands in the tripwire. For any non-loopback target the tripwire
records the attempt and fails it with an OSError instead of touching the network: tests
never send a packet off this machine, and they assert on ``tripwire`` that the guard
refused first (offline) or let the attempt through (online).
"""

from __future__ import annotations

import socket
import threading

import pytest

from app.network import NetworkLog, install_guard, set_offline, uninstall_guard
from tests.network.tripwire import install_tripwire


@pytest.fixture
def tripwire(monkeypatch):
    uninstall_guard()  # e.g. one a cli.main test installed: capture the real functions
    return install_tripwire(monkeypatch)


@pytest.fixture
def guard(tripwire):
    """A fresh guard (online) over the tripwire, with its own small log."""
    uninstall_guard()
    active = install_guard(NetworkLog(capacity=50), offline=False)
    yield active
    set_offline(False)
    uninstall_guard()


@pytest.fixture
def offline(guard):
    """The guard with offline mode on (as ``--offline`` / HEARTH_OFFLINE=1 would set it)."""
    set_offline(True)
    return guard


@pytest.fixture
def listener():
    """A real TCP server on 127.0.0.1 that accepts and answers b"hi"; yields its port."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hi")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()
    thread.join(5)
