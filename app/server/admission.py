"""The bounded request queue's front door, live counts and the record of finished requests.

Jobs run in FIFO order on the engine thread (the executor's queue); this decides which
requests may join it: at most one running plus ``queue`` waiting. A request beyond that gets
429 with ``Retry-After`` (an estimate from recent request durations); while the server stops
(``drain``) every new request gets 503. Thread-safe: the event loop enters, the engine
thread leaves.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.server.errors import ApiError

RECORDS_KEPT = 256


@dataclass(frozen=True)
class RequestRecord:
    """One finished request as the engine saw it. Times in milliseconds."""

    endpoint: str
    status: str  # "ok" | "cancelled" | "error"
    finish_reason: str | None  # the engine's ("eos", "stop", "max_tokens", "cancelled", ...)
    queued_ms: float
    total_ms: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


@dataclass
class Ticket:
    endpoint: str
    entered_at: float


#: ``listener(active, served)``: called (on whichever thread changed them) after each change.
CountListener = Callable[[int, int], None]


class Admission:
    """At most ``1 + queue`` requests admitted at once."""

    def __init__(self, queue: int) -> None:
        self.capacity = queue + 1
        self._lock = threading.Lock()
        self._active = 0
        self._served = 0
        self._draining = False
        self._durations: collections.deque[float] = collections.deque(maxlen=16)
        self.records: collections.deque[RequestRecord] = collections.deque(maxlen=RECORDS_KEPT)
        self._listeners: list[CountListener] = []

    def add_listener(self, listener: CountListener) -> None:
        self._listeners.append(listener)

    @property
    def active(self) -> int:
        """Requests admitted and not finished (running or waiting)."""
        return self._active

    @property
    def served(self) -> int:
        return self._served

    def enter(self, endpoint: str) -> Ticket:
        """Admit a request or raise the ``ApiError`` (429 / 503) that refuses it."""
        with self._lock:
            if self._draining:
                raise ApiError(503, "The server is shutting down.", type="server_error",
                               code="server_shutting_down", headers={"Retry-After": "5"})
            if self._active >= self.capacity:
                raise ApiError(
                    429, f"The server's queue is full ({self.capacity - 1} requests wait "
                    "while one runs). Retry after a few seconds.", type="rate_limit_exceeded",
                    code="rate_limit_exceeded",
                    headers={"Retry-After": str(self._retry_after_locked())})
            self._active += 1
            counts = (self._active, self._served)
        self._notify(counts)
        return Ticket(endpoint, time.perf_counter())

    def leave(self, ticket: Ticket, record: RequestRecord) -> None:
        with self._lock:
            self._active -= 1
            self._served += 1
            self._durations.append(record.total_ms / 1000.0)
            self.records.append(record)
            counts = (self._active, self._served)
        self._notify(counts)

    @property
    def draining(self) -> bool:
        """Whether the server is stopping (new requests get 503)."""
        with self._lock:
            return self._draining

    def drain(self) -> None:
        """Refuse every new request from now on (503)."""
        with self._lock:
            self._draining = True

    def _retry_after_locked(self) -> int:
        typical = (sum(self._durations) / len(self._durations)) if self._durations else 1.0
        return max(1, min(60, math.ceil(typical * self._active)))

    def _notify(self, counts: tuple[int, int]) -> None:
        for listener in list(self._listeners):
            listener(*counts)
