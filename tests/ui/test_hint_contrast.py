"""Hint text the user must read reaches WCAG AA (4.5:1) in every theme: the composer's
placeholder ("Message (Enter to send…)", "Waiting for the reply in …"), the greyed notes
drawn in the disabled colour (Settings ▸ Documents' note, the Libraries menu's "none
yet"), and the disabled controls beside them. Measured twice: from the palette the app
really uses after ``apply_theme`` (light, dark, and the platform's own, whose disabled text
is 1.6:1 as Qt ships it), and from the pixels of the widgets as drawn."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from PySide6.QtGui import QColor, QGuiApplication, QPalette

from app.ui.theme import (
    _HINT_ROLES,
    DARK,
    LIGHT,
    apply_theme,
    contrast_ratio,
    hint_contrast,
    readable_hints,
    send_button_stylesheet,
)

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

THEMES = ["light", "dark", "system"]


@pytest.fixture
def themed(app):
    yield app
    apply_theme("system")


def _drawn_contrast(widget) -> float:
    """The strongest contrast of any pixel of ``widget`` as drawn against its background
    (its most common colour): the text's own colour, where a glyph's stem is solid."""
    image = widget.grab().toImage()
    pixels = [image.pixelColor(x, y).name() for y in range(image.height())
              for x in range(image.width())]
    background = Counter(pixels).most_common(1)[0][0]
    return max(contrast_ratio(p, background) for p in set(pixels))


@pytest.mark.parametrize("theme", THEMES)
def test_the_palettes_hint_colours_reach_4_5_to_1(themed, theme):
    apply_theme(theme)
    palette = QGuiApplication.palette()
    low = {f"{g.name} {r.name}": round(hint_contrast(palette, g, r), 2)
           for g, r in _HINT_ROLES if hint_contrast(palette, g, r) < 4.5}
    assert low == {}


def test_a_dark_platform_palette_with_dim_hints_is_made_readable(qapp):
    dim = QPalette()
    for role, color in ((QPalette.ColorRole.Window, "#353535"),
                        (QPalette.ColorRole.Base, "#2a2a2a"),
                        (QPalette.ColorRole.Button, "#353535"),
                        (QPalette.ColorRole.Text, "#ffffff"),
                        (QPalette.ColorRole.WindowText, "#ffffff"),
                        (QPalette.ColorRole.ButtonText, "#ffffff"),
                        (QPalette.ColorRole.PlaceholderText, "#6a6a6a")):
        dim.setColor(QPalette.ColorGroup.All, role, QColor(color))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText,
                 QPalette.ColorRole.ButtonText):
        dim.setColor(QPalette.ColorGroup.Disabled, role, QColor("#5f5f5f"))
    assert min(hint_contrast(dim, g, r) for g, r in _HINT_ROLES) < 2.5  # as the system has it
    fixed = readable_hints(dim)
    assert min(hint_contrast(fixed, g, r) for g, r in _HINT_ROLES) >= 4.5
    # still secondary: dimmer than the text itself
    disabled = fixed.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText)
    assert contrast_ratio(disabled.name(), "#353535") < contrast_ratio("#ffffff", "#353535")


@pytest.mark.parametrize("theme", THEMES)
def test_the_composers_placeholder_as_drawn_reaches_4_5_to_1(themed, theme):
    app = themed
    apply_theme(theme)
    edit = app.window.composer.edit
    edit.clear()
    app.window.conversation_list.view.setFocus()  # no caret: only the placeholder is drawn
    app.qtbot.waitUntil(lambda: not edit.hasFocus(), timeout=2000)
    assert edit.placeholderText()
    app.qtbot.wait(20)
    assert _drawn_contrast(edit.viewport()) >= 4.5


@pytest.mark.parametrize("theme", THEMES)
def test_the_documents_pages_note_as_drawn_reaches_4_5_to_1(themed, theme):
    app = themed
    apply_theme(theme)
    app.window.on_preferences()
    prefs = app.window.preferences
    titles = [prefs.tabs.tabText(i) for i in range(prefs.tabs.count())]
    prefs.tabs.setCurrentIndex(titles.index("Documents"))
    prefs.resize(800, 600)
    app.qtbot.wait(20)
    note = prefs.tabs.currentWidget().note
    assert note.isVisible() and not note.isEnabled()  # drawn in the disabled colour
    assert _drawn_contrast(note) >= 4.5
    prefs.hide()


@pytest.mark.parametrize("colors", [LIGHT, DARK], ids=["light", "dark"])
def test_a_disabled_send_buttons_text_reaches_4_5_to_1(colors):
    rule = re.search(r"#sendButton:disabled \{([^}]*)\}", send_button_stylesheet(colors))
    assert rule is not None
    color = re.search(r"(?<![-\w])color: (#[0-9a-f]{6})", rule.group(1)).group(1)
    background = re.search(r"background: (#[0-9a-f]{6})", rule.group(1)).group(1)
    assert contrast_ratio(color, background) >= 4.5
