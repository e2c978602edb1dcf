"""Light and dark colours that follow the system palette (Qt's own palette is the source)."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QPalette


@dataclass(frozen=True)
class Colors:
    dark: bool
    text: str
    muted: str
    user_bg: str
    assistant_bg: str
    code_bg: str
    border: str
    link: str
    warning: str
    error: str
    pygments_style: str


LIGHT = Colors(
    dark=False,
    text="#1f2328",
    muted="#656d76",
    user_bg="#eef3fb",
    assistant_bg="#ffffff",
    code_bg="#f6f8fa",
    border="#d0d7de",
    link="#0969da",
    warning="#9a6700",
    error="#cf222e",
    pygments_style="default",
)

DARK = Colors(
    dark=True,
    text="#e6edf3",
    muted="#9198a1",
    user_bg="#1f2a3a",
    assistant_bg="#161b22",
    code_bg="#0d1117",
    border="#30363d",
    link="#4493f8",
    warning="#d29922",
    error="#f85149",
    pygments_style="monokai",
)


def is_dark(palette: QPalette) -> bool:
    """True when the window background is darker than its text (a dark system theme)."""
    window = palette.color(QPalette.ColorRole.Window)
    text = palette.color(QPalette.ColorRole.WindowText)
    return _lightness(window) < _lightness(text)


def colors_for(palette: QPalette) -> Colors:
    return DARK if is_dark(palette) else LIGHT


def _lightness(color: QColor) -> float:
    return 0.2126 * color.redF() + 0.7152 * color.greenF() + 0.0722 * color.blueF()


_SYSTEM_PALETTE: QPalette | None = None


def palette_for(colors: Colors, base: QPalette) -> QPalette:
    """``base`` with the window, text and accent roles taken from ``colors``."""
    palette = QPalette(base)
    window = QColor("#0d1117" if colors.dark else "#f6f8fa")
    roles = {
        QPalette.ColorRole.Window: window,
        QPalette.ColorRole.WindowText: QColor(colors.text),
        QPalette.ColorRole.Base: QColor(colors.assistant_bg),
        QPalette.ColorRole.AlternateBase: QColor(colors.code_bg),
        QPalette.ColorRole.Text: QColor(colors.text),
        QPalette.ColorRole.Button: QColor(colors.code_bg),
        QPalette.ColorRole.ButtonText: QColor(colors.text),
        QPalette.ColorRole.ToolTipBase: QColor(colors.assistant_bg),
        QPalette.ColorRole.ToolTipText: QColor(colors.text),
        QPalette.ColorRole.PlaceholderText: QColor(colors.muted),
        QPalette.ColorRole.Link: QColor(colors.link),
        QPalette.ColorRole.Highlight: QColor(colors.link),
        QPalette.ColorRole.HighlightedText: QColor("#ffffff"),
    }
    for role, color in roles.items():
        palette.setColor(QPalette.ColorGroup.All, role, color)
    muted = QColor(colors.muted)
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text,
                 QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, muted)
    return palette


def apply_theme(choice: str) -> None:
    """Switch the whole app live: "light", "dark", or "system" (the platform's palette)."""
    from PySide6.QtWidgets import QApplication

    global _SYSTEM_PALETTE
    app = QApplication.instance()
    if app is None:
        return
    if _SYSTEM_PALETTE is None:
        _SYSTEM_PALETTE = QPalette(app.palette())
    if choice == "system":
        app.setPalette(_SYSTEM_PALETTE)
        return
    app.setPalette(palette_for(DARK if choice == "dark" else LIGHT, _SYSTEM_PALETTE))
