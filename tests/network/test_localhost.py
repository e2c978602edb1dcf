"""``localhost`` names (issue 23, finding 10): ``localhost`` and ``*.localhost`` (RFC 6761)
are answered by the guard itself and never reach the system resolver (the tripwire under the
guard stands in for it), online or offline; a socket given such a name gets the loopback
address; every lookup is in the activity log, allowed ones too; and the server wants an API
key on ``foo.localhost`` as on any host that is not plainly loopback."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from app.network import OfflineBlockedError, feature
from app.network.guard import LOCAL_ANSWER, is_loopback_address
from app.server.config import ServerConfig
from app.server.errors import ServerConfigError


def lookups(guard) -> list[tuple[str, bool, str, str]]:
    return [(e.target, e.allowed, e.reason, e.feature) for e in guard.log.entries()
            if e.kind == "lookup"]


@pytest.mark.parametrize("name", ["x.localhost", "deep.app.LOCALHOST.", "localhost"])
def test_offline_a_localhost_name_is_answered_without_the_resolver(offline, tripwire, name):
    with feature("remote engine"):
        answer = socket.getaddrinfo(name, 8000, type=socket.SOCK_STREAM)
    assert tripwire == []  # the system resolver was never asked
    addresses = {ipaddress.ip_address(row[4][0]) for row in answer}
    assert addresses and all(a.is_loopback for a in addresses)
    assert all(row[4][1] == 8000 and row[1] == socket.SOCK_STREAM for row in answer)
    assert answer[0][0] == socket.AF_INET  # IPv4 first, as most local servers listen
    assert lookups(offline) == [(f"{name}:8000", True, LOCAL_ANSWER, "remote engine")]


def test_online_too_and_the_family_asked_for_is_kept(guard, tripwire):
    (v4,) = socket.getaddrinfo("app.localhost", 80, socket.AF_INET, socket.SOCK_STREAM)
    assert v4[4] == ("127.0.0.1", 80)
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("ip6-localhost", 80, socket.AF_INET)
    assert tripwire == []
    assert [t for t, *_ in lookups(guard)] == ["app.localhost:80", "ip6-localhost:80"]


def test_connecting_to_a_localhost_name_reaches_this_machine(offline, tripwire, listener):
    with socket.create_connection(("app.localhost", listener), timeout=5) as sock:
        assert sock.recv(2) == b"hi"
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.settimeout(5)
    raw.connect(("api.localhost", listener))  # a name straight to connect() resolves too
    assert raw.recv(2) == b"hi" and raw.getpeername() == ("127.0.0.1", listener)
    raw.close()
    assert tripwire == []
    entries = offline.log.entries()
    assert all(e.allowed for e in entries)
    assert (f"app.localhost:{listener}", "lookup") in [(e.target, e.kind) for e in entries]
    assert (f"api.localhost:{listener}", "connect") in [(e.target, e.kind) for e in entries]


def test_binding_to_a_localhost_name_binds_loopback_and_is_logged(offline, tripwire):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("foo.localhost", 0))
    host, port = sock.getsockname()
    sock.close()
    assert host == "127.0.0.1" and port > 0
    assert lookups(offline) == [("foo.localhost:0", True, LOCAL_ANSWER, "unknown")]
    other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(OfflineBlockedError):
        other.bind(("example.com", 0))  # binding to a name resolves it: refused offline
    other.close()
    assert tripwire == []


def test_every_lookup_is_logged_online_allowed_ones_too(guard, tripwire):
    with feature("Hub search"), pytest.raises(ConnectionRefusedError, match="tripwire"):
        socket.getaddrinfo("huggingface.co", 443)  # the tripwire plays the resolver
    assert tripwire == [("getaddrinfo", ("huggingface.co", 443))]
    assert lookups(guard) == [("huggingface.co:443", True, "online", "Hub search")]


def test_offline_a_blocked_lookup_is_logged_as_before(offline, tripwire):
    with pytest.raises(OfflineBlockedError):
        socket.getaddrinfo("localhost.example.com", 443)
    assert tripwire == []
    assert lookups(offline) == [("localhost.example.com:443", False, "offline mode is on",
                                 "unknown")]


@pytest.mark.parametrize("host", ["foo.localhost", "localhost.localdomain", "x.localhost."])
def test_serving_on_a_localhost_subdomain_needs_an_api_key(host):
    assert not is_loopback_address(host)
    with pytest.raises(ServerConfigError, match="without an API key"):
        ServerConfig(host=host).validate()
    assert ServerConfig(host=host, api_key="k").validate().host == host


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost",
                                  "LOCALHOST."])
def test_plain_loopback_serves_without_a_key(host):
    assert is_loopback_address(host)
    assert ServerConfig(host=host).validate().host == host
