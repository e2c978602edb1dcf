"""The network activity log: every connection the process attempted, and which feature asked.

Callers tag their work with :func:`feature` (a context variable, so it follows the code that
runs inside the ``with`` block on the same thread or asyncio task; a new thread starts
untagged and must set its own tag). The socket guard (:mod:`app.network.guard`) records one
:class:`ConnectionAttempt` per attempt into a :class:`NetworkLog`, which keeps the last N.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

UNKNOWN_FEATURE = "unknown"
DEFAULT_CAPACITY = 1000

_feature: contextvars.ContextVar[str] = contextvars.ContextVar(
    "hearth_network_feature", default=UNKNOWN_FEATURE
)


def current_feature() -> str:
    """The feature tag of the running code ("unknown" when nobody set one)."""
    return _feature.get()


@contextlib.contextmanager
def feature(name: str, *, keep_outer: bool = False) -> Iterator[str]:
    """Tag connections made inside the block as made by ``name`` (e.g. "model download").

    With ``keep_outer`` an enclosing tag wins: library code can name a default ("Hub
    metadata") without hiding the more precise tag its caller set ("model download").
    """
    if keep_outer and _feature.get() != UNKNOWN_FEATURE:
        yield _feature.get()
        return
    token = _feature.set(name)
    try:
        yield name
    finally:
        _feature.reset(token)


@dataclass(frozen=True)
class ConnectionAttempt:
    """One attempt to reach the network.

    ``kind`` is "connect" (a TCP/UDP connect), "lookup" (a host name resolution, allowed or
    blocked), "send" (a datagram sent to an address) or "request" (refused by Hearth's own
    code before any socket); ``reason`` says why it was allowed or blocked ("loopback",
    "loopback name, answered locally", "offline mode is on", "online").
    """

    when: float  # time.time()
    feature: str
    host: str
    port: int | None
    allowed: bool
    kind: str
    reason: str

    @property
    def target(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    def as_row(self) -> tuple[str, str, str, str, str]:
        """(time, feature, host:port, allowed/blocked, reason) as text for tables."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.when))
        stamp += f".{int(self.when % 1 * 1000):03d}"
        verdict = "allowed" if self.allowed else "blocked"
        return stamp, self.feature, self.target, verdict, f"{self.kind}: {self.reason}"


@dataclass(frozen=True)
class ModeSwitch:
    """Offline mode was turned on or off (the log shows it between the attempts)."""

    when: float  # time.time()
    offline: bool

    def as_row(self) -> tuple[str, str, str, str, str]:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.when))
        stamp += f".{int(self.when % 1 * 1000):03d}"
        state = "on" if self.offline else "off"
        detail = (
            "connections off this computer are blocked from now on"
            if self.offline
            else "connections are allowed (and recorded) from now on"
        )
        return stamp, "offline mode", "", f"turned {state}", detail


class NetworkLog:
    """A thread-safe, bounded record of connection attempts (oldest dropped first), and of
    the offline-mode switches between them."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._entries: collections.deque[ConnectionAttempt] = collections.deque(maxlen=capacity)
        self._switches: collections.deque[tuple[int, ModeSwitch]] = collections.deque(maxlen=100)
        self._order: collections.deque[int] = collections.deque(maxlen=capacity)  # entries' seq
        self._lock = threading.Lock()
        self._total = 0

    @property
    def capacity(self) -> int:
        return self._entries.maxlen or 0

    @property
    def total(self) -> int:
        """How many attempts were ever recorded (grows even when old ones are dropped);
        a viewer refreshes when this changes."""
        return self._total

    def record(self, attempt: ConnectionAttempt) -> None:
        with self._lock:
            self._entries.append(attempt)
            self._order.append(self._total)
            self._total += 1

    def note_switch(self, offline: bool) -> None:
        """Record that offline mode was just turned on (``offline``) or off."""
        with self._lock:
            self._switches.append((self._total, ModeSwitch(time.time(), offline)))
            self._total += 1

    def switches(self) -> list[ModeSwitch]:
        with self._lock:
            return [switch for _seq, switch in self._switches]

    def timeline(self) -> list[ConnectionAttempt | ModeSwitch]:
        """Attempts and switches together, in the order they happened (what the dialog
        shows); switches older than the oldest kept attempt are dropped with it."""
        with self._lock:
            items: list[tuple[int, ConnectionAttempt | ModeSwitch]] = [
                *zip(self._order, self._entries, strict=True), *self._switches
            ]
            first = self._order[0] if len(self._entries) == self.capacity else -1
        return [item for seq, item in sorted(items, key=lambda pair: pair[0]) if seq >= first]

    def entries(self) -> list[ConnectionAttempt]:
        """The kept attempts, oldest first."""
        with self._lock:
            return list(self._entries)

    def blocked(self) -> list[ConnectionAttempt]:
        return [e for e in self.entries() if not e.allowed]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._order.clear()
            self._switches.clear()

    def as_text(self) -> str:
        """Tab-separated lines with a header, for the clipboard or a bug report."""
        lines = ["time\tfeature\ttarget\tverdict\tdetail"]
        lines += ["\t".join(e.as_row()) for e in self.timeline()]
        return "\n".join(lines) + "\n"
