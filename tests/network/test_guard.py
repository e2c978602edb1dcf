"""The socket guard on real sockets: offline it refuses before anything is sent (the
tripwire under it stays untouched); loopback and unix sockets always pass; online it only
records."""

from __future__ import annotations

import socket

import pytest

from app.network import OfflineBlockedError, feature, install_guard, uninstall_guard
from app.network.guard import LOCAL_ANSWER, is_loopback

DOC_ADDRESS = "192.0.2.1"  # TEST-NET-1: documentation only, never routed



def test_offline_refuses_connect_before_the_real_call(offline, tripwire):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with feature("remote engine"), pytest.raises(OfflineBlockedError, match="offline mode is on"):
        sock.connect((DOC_ADDRESS, 443))
    sock.close()
    assert tripwire == []
    [entry] = offline.log.entries()
    assert (entry.feature, entry.target, entry.allowed, entry.kind) == (
        "remote engine",
        f"{DOC_ADDRESS}:443",
        False,
        "connect",
    )
    assert entry.reason == "offline mode is on"


def test_offline_refuses_connect_ex_sendto_and_ipv6(offline, tripwire):
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with pytest.raises(OfflineBlockedError):
        tcp.connect_ex(("10.255.255.1", 80))
    with pytest.raises(OfflineBlockedError):
        udp.sendto(b"query", (DOC_ADDRESS, 53))
    tcp.close()
    udp.close()
    with pytest.raises(OfflineBlockedError):
        socket.create_connection(("2001:db8::1", 443), timeout=1)
    assert tripwire == []
    targets = [(e.target, e.kind, e.allowed) for e in offline.log.entries()]
    assert targets == [
        ("10.255.255.1:80", "connect", False),
        (f"{DOC_ADDRESS}:53", "send", False),
        ("[2001:db8::1]:443", "connect", False),
    ]


def test_offline_refuses_name_lookups_so_no_dns_query_leaves(offline, tripwire):
    with pytest.raises(OfflineBlockedError):
        socket.getaddrinfo("huggingface.co", 443)
    with pytest.raises(OfflineBlockedError):
        socket.create_connection(("example.com", 80), timeout=1)
    assert tripwire == []
    assert [(e.target, e.kind) for e in offline.log.blocked()] == [
        ("huggingface.co:443", "lookup"),
        ("example.com:80", "connect"),
    ]


def test_offline_keeps_loopback_working(offline, tripwire, listener):
    with socket.create_connection(("127.0.0.1", listener), timeout=5) as sock:
        assert sock.recv(2) == b"hi"
    with socket.create_connection(("localhost", listener), timeout=5) as sock:
        assert sock.recv(2) == b"hi"
    assert tripwire == []
    entries = offline.log.entries()
    assert entries
    assert all(e.allowed and e.reason in ("loopback", LOCAL_ANSWER) for e in entries)
    assert ("localhost", "lookup", LOCAL_ANSWER) in [(e.host, e.kind, e.reason) for e in entries]
    assert f"127.0.0.1:{listener}" in [e.target for e in entries]


def test_unix_sockets_pass_and_are_not_network(offline, tmp_path):
    path = str(tmp_path / "s")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    client.close()
    server.close()
    assert offline.log.entries() == []


def test_online_blocks_nothing_and_records_everything(guard, tripwire, listener):
    with socket.create_connection(("127.0.0.1", listener), timeout=5) as sock:
        assert sock.recv(2) == b"hi"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with feature("Hub search"), pytest.raises(ConnectionRefusedError, match="tripwire"):
        sock.connect((DOC_ADDRESS, 443))  # let through: it reached the (fake) network
    sock.close()
    assert tripwire == [("connect", (DOC_ADDRESS, 443))]
    [local, remote] = guard.log.entries()
    assert (local.allowed, local.reason, local.feature) == (True, "loopback", "unknown")
    assert (remote.allowed, remote.reason, remote.feature) == (True, "online", "Hub search")


def test_switching_offline_at_run_time(guard, tripwire):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    guard.offline = True
    with pytest.raises(OfflineBlockedError):
        sock.connect((DOC_ADDRESS, 80))
    guard.offline = False
    with pytest.raises(ConnectionRefusedError, match="tripwire"):
        sock.connect((DOC_ADDRESS, 80))
    sock.close()
    assert [e.allowed for e in guard.log.entries()] == [False, True]
    assert len(tripwire) == 1


def test_uninstall_puts_the_original_functions_back(tripwire):
    uninstall_guard()
    before = (socket.socket.connect, socket.create_connection, socket.getaddrinfo)
    install_guard()
    assert socket.socket.connect is not before[0]
    assert socket.getaddrinfo is not before[2]
    uninstall_guard()
    assert (socket.socket.connect, socket.create_connection, socket.getaddrinfo) == before


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("app.localhost", True),
        ("192.0.2.1", False),
        ("::ffff:192.0.2.1", False),
        ("10.255.255.1", False),
        ("huggingface.co", False),
        ("localhost.example.com", False),
        ("", False),
    ],
)
def test_is_loopback(host, expected):
    assert is_loopback(host) is expected
