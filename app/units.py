"""One way to show sizes to a person: byte counts in decimal units, as download pages and the
Hub do, and parameter counts as model cards do ("1.5B", "135M")."""

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


def format_parameters(n: int) -> str:
    """``1_544_000_000`` → ``"1.5B parameters"``, ``8_030_000_000`` → ``"8B parameters"``,
    ``134_515_008`` → ``"135M parameters"``, ``1000`` → ``"1K parameters"``."""
    for unit, size, digits in (("B", 10**9, 1), ("M", 10**6, 0), ("K", 10**3, 0)):
        if n >= size:
            figure = f"{n / size:.{digits}f}".removesuffix(".0")
            return f"{figure}{unit} parameters"
    return f"{n:,} parameters"
