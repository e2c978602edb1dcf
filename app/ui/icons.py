"""The app's icons: one set (Material Design Icons 6, the font qtawesome bundles), tinted per
theme.

Names here are the app's words for an action; ``ICONS`` maps them to the font's glyph names.
The font's licence is recorded in resources/ICON_LICENSES.md.

Hearth reads the font file from qtawesome's package folder and draws the glyphs itself
(``GlyphEngine``): importing qtawesome pulls in qtpy, whose star imports cost ~0.25 s of a
1.2 s start-up on a 2-core machine, before the window could paint.
"""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontDatabase, QIcon, QIconEngine, QPainter, QPixmap

from app.ui.theme import Colors

ICONS = {
    "copy": "content-copy",
    "edit": "pencil-outline",
    "regenerate": "refresh",
    "delete": "delete-outline",
    "info": "information-outline",
    "previous": "chevron-left",
    "next": "chevron-right",
    "pin": "pin-outline",
    "unpin": "pin-off-outline",
    "pinned": "pin",
    "new": "square-edit-outline",
    "search": "magnify",
    "undo": "undo",
    "close": "close",
    "collapsed": "chevron-right",  # a folded block (the thinking above a reply)
    "expanded": "chevron-down",
    "stop": "stop-circle-outline",  # stop the reply in a chat (its row's menu)
    "send": "send-outline",  # send a message a quit left unsent (its row's Send now)
}

MDI6_FONT = "materialdesignicons6-webfont-6.9.96.ttf"
MDI6_CHARMAP = "materialdesignicons6-webfont-charmap-6.9.96.json"
#: the glyph's height in the icon's square: room for the font's bearing (qtawesome's choice)
GLYPH_SCALE = 0.875


def icon(name: str, colors: Colors) -> QIcon:
    """The icon for ``name`` in the theme's muted colour (full text colour when active, the
    border colour when disabled).
    Empty before a QApplication exists (the font cannot be loaded yet; nothing is cached)."""
    from PySide6.QtWidgets import QApplication

    if QApplication.instance() is None:
        return QIcon()
    return _icon(name, colors.muted, colors.text, colors.border)


def fonts_folder() -> Path:
    """qtawesome's font folder, found without importing qtawesome."""
    spec = importlib.util.find_spec("qtawesome")
    if spec is None or not spec.origin:
        raise RuntimeError("qtawesome is not installed: Hearth's icon font comes with it")
    return Path(spec.origin).parent / "fonts"


@lru_cache(maxsize=1)
def _font() -> tuple[str, dict[str, str]]:
    """The icon font's family (loaded into the application once) and its glyph names'
    characters."""
    folder = fonts_folder()
    font_id = QFontDatabase.addApplicationFont(str(folder / MDI6_FONT))
    families = QFontDatabase.applicationFontFamilies(font_id) if font_id >= 0 else []
    if not families:
        raise RuntimeError(f"{folder / MDI6_FONT} could not be loaded as a font")
    codes = json.loads((folder / MDI6_CHARMAP).read_text(encoding="utf-8"))
    return families[0], {name: chr(int(code, 16)) for name, code in codes.items()}


class GlyphEngine(QIconEngine):
    """Draws one glyph of the icon font, centred, in the colour of the icon's mode."""

    def __init__(self, family: str, char: str, normal: str, active: str,
                 disabled: str) -> None:
        super().__init__()
        self.family, self.char = family, char
        self.colors = (normal, active, disabled)

    def paint(self, painter: QPainter, rect: QRect, mode: QIcon.Mode,
              state: QIcon.State) -> None:
        normal, active, disabled = self.colors
        color = {QIcon.Mode.Active: active, QIcon.Mode.Selected: active,
                 QIcon.Mode.Disabled: disabled}.get(mode, normal)
        painter.save()
        font = QFont(self.family)
        font.setPixelSize(max(1, round(GLYPH_SCALE * rect.height())))
        painter.setFont(font)
        painter.setPen(QColor(color))
        painter.drawText(rect, int(Qt.AlignmentFlag.AlignCenter), self.char)
        painter.restore()

    def pixmap(self, size: QSize, mode: QIcon.Mode, state: QIcon.State) -> QPixmap:
        pixmap = QPixmap(size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        self.paint(painter, QRect(QPoint(0, 0), size), mode, state)
        painter.end()
        return pixmap

    def clone(self) -> QIconEngine:
        return GlyphEngine(self.family, self.char, *self.colors)


@lru_cache(maxsize=128)
def _icon(name: str, color: str, active: str, disabled: str) -> QIcon:
    family, chars = _font()
    return QIcon(GlyphEngine(family, chars[ICONS[name]], color, active, disabled))
