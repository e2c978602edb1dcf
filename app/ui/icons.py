"""The app's icons: one set (Material Design Icons 6, bundled by qtawesome), tinted per theme.

Names here are the app's words for an action; ``ICONS`` maps them to the icon font. The
font's licence is recorded in resources/ICON_LICENSES.md.
"""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtGui import QIcon

from app.ui.theme import Colors

ICONS = {
    "copy": "mdi6.content-copy",
    "edit": "mdi6.pencil-outline",
    "regenerate": "mdi6.refresh",
    "delete": "mdi6.delete-outline",
    "info": "mdi6.information-outline",
    "previous": "mdi6.chevron-left",
    "next": "mdi6.chevron-right",
    "pin": "mdi6.pin-outline",
    "unpin": "mdi6.pin-off-outline",
    "pinned": "mdi6.pin",
    "new": "mdi6.square-edit-outline",
    "search": "mdi6.magnify",
    "undo": "mdi6.undo",
    "close": "mdi6.close",
    "collapsed": "mdi6.chevron-right",  # a folded block (the thinking above a reply)
    "expanded": "mdi6.chevron-down",
}


def icon(name: str, colors: Colors) -> QIcon:
    """The icon for ``name`` in the theme's muted colour (full text colour when active, the
    border colour when disabled).
    Empty before a QApplication exists (the font cannot be loaded yet; nothing is cached)."""
    from PySide6.QtWidgets import QApplication

    if QApplication.instance() is None:
        return QIcon()
    return _icon(name, colors.muted, colors.text, colors.border)


MDI6_FONT = ("mdi6", "materialdesignicons6-webfont-6.9.96.ttf",
             "materialdesignicons6-webfont-charmap-6.9.96.json")


@lru_cache(maxsize=1)
def _font():
    """Only the one icon font Hearth uses: ``qtawesome.icon`` would load all eleven bundled
    fonts first (~0.8 s at start-up on a busy 2-core machine)."""
    from qtawesome.iconic_font import IconicFont  # needs a QApplication: imported late

    return IconicFont(MDI6_FONT)


@lru_cache(maxsize=128)
def _icon(name: str, color: str, active: str, disabled: str) -> QIcon:
    return _font().icon(ICONS[name], color=color, color_active=active,
                        color_disabled=disabled)
