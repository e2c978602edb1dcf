"""A tripwire under the network guard: the real socket functions, replaced before the guard
wraps them, so whatever the guard lets through lands here.

``install_tripwire(monkeypatch)`` records every attempt at a non-loopback target and fails it
with an OSError instead of touching the network (tests never send a packet off this machine).
``let_through`` names one (host, port) whose connects go on for real after being recorded: a
test's own listener on this machine's outside address, which then sees them too.
"""

from __future__ import annotations

import ipaddress
import socket


def is_loopback(host) -> bool:
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


def install_tripwire(monkeypatch, *, let_through: tuple | None = None) -> list[tuple[str, object]]:
    """Patch connect / connect_ex / sendto / getaddrinfo; return the list of attempts
    (kind, target) that reached the tripwire."""
    reached: list[tuple[str, object]] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_sendto, real_getaddrinfo = socket.socket.sendto, socket.getaddrinfo
    ip_families = (socket.AF_INET, socket.AF_INET6)

    def reach(kind: str, target, real=None, *args):
        reached.append((kind, target))
        if real is not None and let_through is not None and tuple(target[:2]) == let_through:
            return real(*args)
        raise ConnectionRefusedError(f"tripwire: the test tried to reach {target}")

    def connect(sock, address):
        if sock.family in ip_families and not is_loopback(address[0]):
            return reach("connect", address, real_connect, sock, address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        if sock.family in ip_families and not is_loopback(address[0]):
            return reach("connect_ex", address, real_connect_ex, sock, address)
        return real_connect_ex(sock, address)

    def sendto(sock, data, *args):
        if sock.family in ip_families and not is_loopback(args[-1][0]):
            return reach("sendto", args[-1])
        return real_sendto(sock, data, *args)

    def getaddrinfo(host, port, *args, **kwargs):
        if not is_loopback(host) and not _numeric(host):  # a name would ask a DNS server
            return reach("getaddrinfo", (host, port))
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket.socket, "sendto", sendto)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return reached
