"""A guard on the socket layer: records every outbound attempt and, offline, refuses it.

Installed once per process (:func:`install_guard`), it wraps ``socket.socket.connect``,
``connect_ex`` and ``sendto``, ``socket.create_connection`` and ``socket.getaddrinfo``.
Loopback addresses (127.0.0.0/8, ::1, "localhost") and non-IP sockets (unix, netlink) are
always allowed. With ``offline`` on, anything else raises :class:`OfflineBlockedError`
*before* the original call runs, so no packet (not even a DNS query) leaves the machine.
With ``offline`` off nothing is blocked; connections are only recorded.

Native code (ONNX Runtime, hf-xet) does not go through Python's socket module: see
:mod:`app.network.offline` for how those are switched off.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Any

from app.network.activity import ConnectionAttempt, NetworkLog, current_feature

_IP_FAMILIES = {socket.AF_INET, socket.AF_INET6}
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


class OfflineBlockedError(ConnectionRefusedError):
    """A connection was refused because Hearth's offline mode is on."""

    def __init__(self, target: str) -> None:
        super().__init__(f"Hearth's offline mode is on: the connection to {target} was blocked.")
        self.target = target


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 (also IPv4-mapped) and the usual names of this machine."""
    name = host.strip("[]").lower().rstrip(".")
    if name in _LOCAL_NAMES or name.endswith(".localhost"):
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
        if is_loopback(text):
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
        if allowed and kind == "lookup":
            return  # allowed lookups are followed by a connect, which is what gets recorded
        self.log.record(attempt)
        if not allowed:
            raise OfflineBlockedError(attempt.target)

    # -- wrappers ------------------------------------------------------------------------

    def _connect(self, sock: socket.socket, address: Any) -> None:
        if sock.family in _IP_FAMILIES and isinstance(address, tuple) and len(address) >= 2:
            self.check(address[0], address[1])
        return self._originals["connect"](sock, address)

    def _connect_ex(self, sock: socket.socket, address: Any) -> int:
        if sock.family in _IP_FAMILIES and isinstance(address, tuple) and len(address) >= 2:
            self.check(address[0], address[1])
        return self._originals["connect_ex"](sock, address)

    def _sendto(self, sock: socket.socket, data: Any, *args: Any) -> int:
        address = args[-1] if args else None
        if sock.family in _IP_FAMILIES and isinstance(address, tuple) and len(address) >= 2:
            self.check(address[0], address[1], "send")
        return self._originals["sendto"](sock, data, *args)

    def _create_connection(self, address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        host, port = address[0], address[1]
        if self.offline and not is_loopback(_host_text(host)):
            self.check(host, port)  # records and raises
        return self._originals["create_connection"](address, *args, **kwargs)

    def _getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list:
        text = _host_text(host)
        if text and not _is_ip_literal(text):  # a name: resolving it may ask a DNS server
            self.check(text, port, "lookup")
        return self._originals["getaddrinfo"](host, port, *args, **kwargs)

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

            self._own = {n for n in ("connect", "connect_ex", "sendto") if n in vars(socket.socket)}
            self._originals = {
                "connect": socket.socket.connect,
                "connect_ex": socket.socket.connect_ex,
                "sendto": socket.socket.sendto,
                "create_connection": socket.create_connection,
                "getaddrinfo": socket.getaddrinfo,
            }
            self._wrappers = {
                "connect": connect,
                "connect_ex": connect_ex,
                "sendto": sendto,
                "create_connection": self._create_connection,
                "getaddrinfo": self._getaddrinfo,
            }
            socket.socket.connect = connect  # type: ignore[method-assign]
            socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
            socket.socket.sendto = sendto  # type: ignore[method-assign]
            socket.create_connection = self._create_connection  # type: ignore[assignment]
            socket.getaddrinfo = self._getaddrinfo  # type: ignore[assignment]
            self._installed = True

    def uninstall(self) -> None:
        """Put the original functions back (only where nobody wrapped ours since)."""
        with self._lock:
            if not self._installed:
                return
            for name in ("connect", "connect_ex", "sendto"):
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
