"""Fixtures for the network tests: a tripwire under the guard and a fresh guard on top.

The tripwire replaces the real socket functions *before* the guard wraps them, so whatever
the guard lets through lands in the tripwire. For any non-loopback target the tripwire
records the attempt and fails it with an OSError instead of touching the network: tests
never send a packet off this machine, and they assert on ``tripwire`` that the guard
refused first (offline) or let the attempt through (online).
"""

from __future__ import annotations

import ipaddress
import socket

import pytest

from app.network import NetworkLog, install_guard, set_offline, uninstall_guard


def _loopback(host) -> bool:
    """The tripwire's own notion of loopback (independent of the guard's)."""
    if isinstance(host, bytes):
        host = host.decode()
    if host in ("localhost", None, ""):
        return True
    try:
        address = ipaddress.ip_address(str(host).split("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def _numeric(host) -> bool:
    try:
        ipaddress.ip_address(str(host))
    except ValueError:
        return False
    return True


@pytest.fixture
def tripwire(monkeypatch):
    uninstall_guard()  # e.g. one a cli.main test installed: capture the real functions
    reached: list[tuple[str, object]] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_sendto = socket.socket.sendto
    real_getaddrinfo = socket.getaddrinfo
    ip_families = (socket.AF_INET, socket.AF_INET6)

    def refuse(kind: str, target) -> OSError:
        reached.append((kind, target))
        return ConnectionRefusedError(f"tripwire: the test tried to reach {target}")

    def connect(sock, address):
        if sock.family in ip_families and not _loopback(address[0]):
            raise refuse("connect", address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        if sock.family in ip_families and not _loopback(address[0]):
            raise refuse("connect_ex", address)
        return real_connect_ex(sock, address)

    def sendto(sock, data, *args):
        if sock.family in ip_families and not _loopback(args[-1][0]):
            raise refuse("sendto", args[-1])
        return real_sendto(sock, data, *args)

    def getaddrinfo(host, port, *args, **kwargs):
        if not _loopback(host) and not _numeric(host):
            raise refuse("getaddrinfo", (host, port))
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket.socket, "sendto", sendto)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return reached


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
