"""The chat text size ("zoom"): one point size for the messages, the chat list and the
composer, from the ``font_size`` setting (points; 0 = the system's text size).

The system's size is the application font's, which Qt takes from the platform: it follows
the OS text-scale setting, and points (not pixels) keep it right on high-DPI screens. A
stylesheet owns the font of the widgets it styles (Qt does not pass a parent's ``setFont``
on to them reliably), so the chat view and the composer's banner get their size as a
stylesheet rule; widgets without one get ``setFont``.
"""

from __future__ import annotations

from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import QWidget

MIN_POINTS, MAX_POINTS = 6, 48
WELCOME_TITLE_POINTS = 20.0  # the welcome page's title at the system's text size


def system_points() -> float:
    """The platform's text size in points (its text-scale setting included)."""
    size = QGuiApplication.font().pointSizeF()
    return size if size > 0 else 10.0


def text_points(setting: int) -> float:
    """The chat text size for a ``font_size`` setting value (0: the system's)."""
    return float(setting) if setting > 0 else system_points()


def zoomed_setting(setting: int, step: int) -> int:
    """The ``font_size`` value one zoom ``step`` (+1 / -1) from ``setting``; 0 resets."""
    if step == 0:
        return 0
    base = round(text_points(setting))
    return max(MIN_POINTS, min(MAX_POINTS, base + step))


def zoom_stylesheet(points: float) -> str:
    """Rules that size every widget under a styled one (appended to its stylesheet)."""
    title = WELCOME_TITLE_POINTS * points / system_points()
    return f"* {{ font-size: {points:g}pt; }}\n#welcomeTitle {{ font-size: {title:.1f}pt; }}\n"


def set_font_points(widget: QWidget, points: float) -> None:
    """Give ``widget`` (and the unstyled widgets under it) the text size ``points``."""
    font = QFont(widget.font())
    font.setPointSizeF(points)
    widget.setFont(font)
