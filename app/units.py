"""One way to show byte counts to a person: decimal units, as download pages and the Hub do."""

from __future__ import annotations

_UNITS = ("KB", "MB", "GB", "TB")


def format_bytes(n: int | float | None) -> str:
    """``1_234_567`` → ``"1.2 MB"``; ``None`` → ``"?"``. Decimal (1 KB = 1000 bytes)."""
    if n is None:
        return "?"
    value = float(n)
    if value < 1000:
        return f"{int(value)} bytes"
    for unit in _UNITS:
        value /= 1000
        if value < 1000 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")
