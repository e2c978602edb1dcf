"""A guard on the socket layer: records every outbound attempt and, offline, refuses it.

Installed once per process (:func:`install_guard`), it wraps ``socket.socket.connect``,
``connect_ex``, ``sendto`` and ``bind``, ``socket.create_connection`` and
``socket.getaddrinfo``. Loopback addresses (127.0.0.0/8, ::1, "localhost") and non-IP
sockets (unix, netlink) are always allowed. With ``offline`` on, anything else raises
:class:`OfflineBlockedError` *before* the original call runs, so no packet (not even a DNS
query) leaves the machine. With ``offline`` off nothing is blocked; attempts are only
recorded. Every name lookup is recorded, allowed or not.

``localhost`` and every ``*.localhost`` name (RFC 6761), and the usual other names of this
machine, are answered here (127.0.0.1 and ::1) and never reach the system resolver, online
or off: a DNS server never learns them. A socket given such a name (connect, bind) gets the
loopback address instead.

Native code (ONNX Runtime, hf-xet) does not go through Python's socket module: see
:mod:`app.network.offline` for how those are switched off.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from typing import Any

from app.network.activity import ConnectionAttempt, NetworkLog, current_feature

_IP_FAMILIES = {socket.AF_INET, socket.AF_INET6}
_METHODS = ("connect", "connect_ex", "sendto", "bind")  # wrapped on socket.socket
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
_IPV6_ONLY_NAMES = {"ip6-localhost", "ip6-loopback"}
LOCAL_ANSWER = "loopback name, answered locally"


class OfflineBlockedError(ConnectionRefusedError):
    """A connection was refused because Hearth's offline mode is on."""

    def __init__(self, target: str) -> None:
        super().__init__(f"Hearth's offline mode is on: the connection to {target} was blocked.")
        self.target = target


def _name(host: str) -> str:
    return host.strip("[]").lower().rstrip(".")


def is_local_name(host: str) -> bool:
    """True for ``localhost``, ``*.localhost`` (RFC 6761) and the usual other names of this
    machine: the names the guard resolves itself."""
    name = _name(host)
    return name in _LOCAL_NAMES or name.endswith(".localhost")


def is_loopback_address(host: str) -> bool:
    """True only for a loopback IP (127.0.0.0/8, ::1, IPv4-mapped) or the bare name
    ``localhost``: what may listen without an API key (``foo.localhost`` may not)."""
    return _name(host) == "localhost" or (_is_ip_literal(host) and is_loopback(host))


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 (also IPv4-mapped) and the usual names of this machine."""
    name = _name(host)
    if is_local_name(name):
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return True


def _local_literal(family: int) -> str:
    """The loopback address a local name stands for on a socket of ``family``."""
    return "::1" if family == socket.AF_INET6 else "127.0.0.1"


def _host_text(host: Any) -> str:
    if isinstance(host, bytes):
        return host.decode("ascii", "replace")
    return "" if host is None else str(host)


class SocketGuard:
    """The wrappers and their state. ``offline`` may be switched at any time."""

    def __init__(self, log: NetworkLog | None = None, *, offline: bool = False) -> None:
        self.log = log if log is not None else NetworkLog()
        self.offline = offline
        self._originals: dict[str, Any] = {}
        self._installed = False
        self._lock = threading.Lock()

    # -- decisions ---------------------------------------------------------------------

    def check(self, host: Any, port: Any, kind: str = "connect") -> None:
        """Record an attempt to reach ``host:port``; raise if offline mode blocks it."""
        text = _host_text(host)
        if is_local_name(text) and kind == "lookup":
            allowed, reason = True, LOCAL_ANSWER
        elif is_loopback(text):
            allowed, reason = True, "loopback"
        elif self.offline:
            allowed, reason = False, "offline mode is on"
        else:
            allowed, reason = True, "online"
        port_number = port if isinstance(port, int) else None
        if port_number is None and isinstance(port, str) and port.isdigit():
            port_number = int(port)
        attempt = ConnectionAttempt(
            time.time(), current_feature(), text, port_number, allowed, kind, reason
        )
        self.log.record(attempt)
        if not allowed:
            raise OfflineBlockedError(attempt.target)

    # -- wrappers ------------------------------------------------------------------------

    @staticmethod
    def _is_ip_address(sock: socket.socket, address: Any) -> bool:
        return sock.family in _IP_FAMILIES and isinstance(address, tuple) and len(address) >= 2

    @staticmethod
    def _localised(sock: socket.socket, address: tuple) -> tuple:
        """``address`` with a local name swapped for its loopback address, so the socket
        call never resolves it (the system resolver may ask a DNS server)."""
        text = _host_text(address[0])
        if not is_local_name(text) or _is_ip_literal(text):
            return address
        return (_local_literal(sock.family), *address[1:])

    def _connect(self, sock: socket.socket, address: Any) -> None:
        if self._is_ip_address(sock, address):
            self.check(address[0], address[1])
            address = self._localised(sock, address)
        return self._originals["connect"](sock, address)

    def _connect_ex(self, sock: socket.socket, address: Any) -> int:
        if self._is_ip_address(sock, address):
            self.check(address[0], address[1])
            address = self._localised(sock, address)
        return self._originals["connect_ex"](sock, address)

    def _sendto(self, sock: socket.socket, data: Any, *args: Any) -> int:
        address = args[-1] if args else None
        if self._is_ip_address(sock, address):
            self.check(address[0], address[1], "send")
            args = (*args[:-1], self._localised(sock, address))
        return self._originals["sendto"](sock, data, *args)

    def _bind(self, sock: socket.socket, address: Any) -> None:
        """Listening sends nothing, but binding to a name resolves it: a local name gets
        its loopback address, any other name is a lookup (recorded; refused offline)."""
        if self._is_ip_address(sock, address):
            text = _host_text(address[0])
            if text and text != "<broadcast>" and not _is_ip_literal(text):
                self.check(text, address[1], "lookup")
                address = self._localised(sock, address)
        return self._originals["bind"](sock, address)

    def _create_connection(self, address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        host, port = address[0], address[1]
        if self.offline and not is_loopback(_host_text(host)):
            self.check(host, port)  # records and raises
        return self._originals["create_connection"](address, *args, **kwargs)

    def _getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list:
        text = _host_text(host)
        if text and not _is_ip_literal(text):  # a name: resolving it may ask a DNS server
            self.check(text, port, "lookup")
            if is_local_name(text):
                return self._local_addrinfo(text, port, *args, **kwargs)
        return self._originals["getaddrinfo"](host, port, *args, **kwargs)

    def _local_addrinfo(self, name: str, port: Any, family: int = 0, type: int = 0,
                        proto: int = 0, flags: int = 0) -> list:
        """getaddrinfo's answer for a local name, built from the loopback literals (numeric
        hosts never reach a resolver): IPv4 first, then IPv6."""
        literals = ["::1"] if _name(name) in _IPV6_ONLY_NAMES else ["127.0.0.1", "::1"]
        wanted = {socket.AF_INET: "127.0.0.1", socket.AF_INET6: "::1"}.get(family)
        if wanted is not None:
            literals = [a for a in literals if a == wanted]
        if not literals:
            raise socket.gaierror(socket.EAI_NONAME, f"{name} has no address of that family")
        answer: list = []
        numeric = flags | socket.AI_NUMERICHOST
        for literal in literals:
            with contextlib.suppress(socket.gaierror):  # e.g. no IPv6 on this machine
                answer += self._originals["getaddrinfo"](literal, port, family, type, proto,
                                                         numeric)
        if not answer:
            raise socket.gaierror(socket.EAI_NONAME, f"{name} has no usable address here")
        return answer

    # -- install ---------------------------------------------------------------------------

    def install(self) -> None:
        with self._lock:
            if self._installed:
                return
            guard = self

            def connect(sock: socket.socket, address: Any) -> None:
                return guard._connect(sock, address)

            def connect_ex(sock: socket.socket, address: Any) -> int:
                return guard._connect_ex(sock, address)

            def sendto(sock: socket.socket, data: Any, *args: Any) -> int:
                return guard._sendto(sock, data, *args)

            def bind(sock: socket.socket, address: Any) -> None:
                return guard._bind(sock, address)

            self._own = {n for n in _METHODS if n in vars(socket.socket)}
            self._originals = {
                "connect": socket.socket.connect,
                "connect_ex": socket.socket.connect_ex,
                "sendto": socket.socket.sendto,
                "bind": socket.socket.bind,
                "create_connection": socket.create_connection,
                "getaddrinfo": socket.getaddrinfo,
            }
            self._wrappers = {
                "connect": connect,
                "connect_ex": connect_ex,
                "sendto": sendto,
                "bind": bind,
                "create_connection": self._create_connection,
                "getaddrinfo": self._getaddrinfo,
            }
            socket.socket.connect = connect  # type: ignore[method-assign]
            socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
            socket.socket.sendto = sendto  # type: ignore[method-assign]
            socket.socket.bind = bind  # type: ignore[method-assign]
            socket.create_connection = self._create_connection  # type: ignore[assignment]
            socket.getaddrinfo = self._getaddrinfo  # type: ignore[assignment]
            self._installed = True

    def uninstall(self) -> None:
        """Put the original functions back (only where nobody wrapped ours since)."""
        with self._lock:
            if not self._installed:
                return
            for name in _METHODS:
                if vars(socket.socket).get(name) is self._wrappers[name]:
                    if name in self._own:
                        setattr(socket.socket, name, self._originals[name])
                    else:  # it was inherited from _socket.socket
                        delattr(socket.socket, name)
            for name in ("create_connection", "getaddrinfo"):
                if getattr(socket, name) == self._wrappers[name]:
                    setattr(socket, name, self._originals[name])
            # _originals stay: a wrapper someone else captured keeps passing calls through.
            self._installed = False

    @property
    def installed(self) -> bool:
        return self._installed


_active: SocketGuard | None = None


def install_guard(log: NetworkLog | None = None, *, offline: bool | None = None) -> SocketGuard:
    """The process's guard, installed on first call; ``offline`` (when given) switches it."""
    global _active
    if _active is None:
        _active = SocketGuard(log)
        _active.install()
    if offline is not None:
        _active.offline = offline
    return _active


def active_guard() -> SocketGuard | None:
    return _active


def uninstall_guard() -> None:
    """Remove the process's guard (tests; the app keeps it for its whole life)."""
    global _active
    if _active is not None:
        _active.uninstall()
        _active = None
