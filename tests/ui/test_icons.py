"""The icons draw the icon font's glyphs in the theme's colours, per mode, without importing
qtawesome (its qtpy import cost a quarter of the start-up)."""

from __future__ import annotations

import subprocess
import sys

from PySide6.QtCore import QSize
from PySide6.QtGui import QColor, QIcon

from app.ui.icons import ICONS, _font, icon
from app.ui.theme import DARK, LIGHT


def _colours(image) -> set[str]:
    """The opaque-enough colours an icon's pixels are drawn in (antialiased edges left out)."""
    seen = set()
    for y in range(image.height()):
        for x in range(image.width()):
            pixel = image.pixelColor(x, y)
            if pixel.alpha() > 250:
                seen.add(QColor(pixel.red(), pixel.green(), pixel.blue()).name())
    return seen


def test_every_icon_name_is_a_glyph_of_the_font(qapp):
    family, chars = _font()
    assert family
    assert all(glyph in chars for glyph in ICONS.values())


def test_an_icon_is_drawn_in_its_modes_colour(qapp):
    for colors in (LIGHT, DARK):
        drawn = icon("delete", colors)
        assert not drawn.isNull()
        for mode, colour in ((QIcon.Mode.Normal, colors.muted), (QIcon.Mode.Active, colors.text),
                             (QIcon.Mode.Disabled, colors.border)):
            image = drawn.pixmap(QSize(24, 24), mode).toImage()
            assert _colours(image) == {QColor(colour).name()}, (colors, mode)
            opaque = sum(image.pixelColor(x, y).alpha() > 0
                         for y in range(24) for x in range(24))
            assert 30 < opaque < 24 * 24 * 0.6  # a glyph, not an empty or filled square
    assert icon("copy", LIGHT) is icon("copy", LIGHT)  # made once


def test_icons_do_not_import_qtawesome_or_qtpy():
    code = (
        "import sys\n"
        "from PySide6.QtWidgets import QApplication\n"
        "app = QApplication([])\n"
        "from app.ui.icons import icon\n"
        "from app.ui.theme import LIGHT\n"
        "assert not icon('copy', LIGHT).pixmap(16, 16).isNull()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('qtawesome', 'qtpy')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**__import__("os").environ,
                                          "QT_QPA_PLATFORM": "offscreen"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
