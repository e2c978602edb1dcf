"""Markdown rendering: structure, escaping, highlighted code with copy links, themes."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette

from app.ui.markdown_render import render_markdown
from app.ui.theme import DARK, LIGHT, colors_for


def test_markdown_structure_and_tables():
    text = "# Title\n\n- a\n- b\n\n| x | y |\n|---|---|\n| 1 | 2 |\n\n[link](https://e.org) `c`"
    html = render_markdown(text, LIGHT).html
    for needle in (
        "<h1>Title</h1>",
        "<li>a</li>",
        "<td>1</td>",
        'href="https://e.org"',
        "<code>c</code>",
        'border="1"',
    ):
        assert needle in html


def test_raw_html_and_script_links_are_not_passed_through():
    html = render_markdown("<b>x</b> [bad](javascript:alert(1))", LIGHT).html
    assert "<b>x</b>" not in html and "&lt;b&gt;" in html
    assert 'href="javascript' not in html


def test_code_blocks_highlighted_inline_with_copy_links():
    text = "```python\ndef f():\n    return 1\n```\n\n- item\n\n  ```\n  plain\n  ```\n"
    rendered = render_markdown(text, LIGHT, row=7)
    assert rendered.code_blocks == ("def f():\n    return 1", "plain")
    assert 'href="hearth:code/7/0"' in rendered.html
    assert 'href="hearth:code/7/1"' in rendered.html
    assert 'style="color:' in rendered.html and "class=" not in rendered.html
    dark = render_markdown(text, DARK, row=7).html
    assert DARK.code_bg in dark and LIGHT.code_bg not in dark


def test_theme_follows_palette():
    light = QPalette()
    light.setColor(QPalette.ColorRole.Window, QColor("#ffffff"))
    light.setColor(QPalette.ColorRole.WindowText, QColor("#000000"))
    dark = QPalette()
    dark.setColor(QPalette.ColorRole.Window, QColor("#202020"))
    dark.setColor(QPalette.ColorRole.WindowText, QColor("#f0f0f0"))
    assert colors_for(light) is LIGHT
    assert colors_for(dark) is DARK


def test_arithmetic_stars_are_not_italics():
    html = render_markdown("10*3=30, 7*3=21 and 2**8=256", LIGHT).html
    assert "<em>" not in html and "<strong>" not in html
    assert "10*3=30, 7*3=21 and 2**8=256" in html
    # real emphasis still works
    html = render_markdown("a *real* word and **bold**", LIGHT).html
    assert "<em>real</em>" in html and "<strong>bold</strong>" in html


def test_math_spans_stay_literal_and_prices_stay_prices():
    text = r"Area $a*b*c$ and $$x_1 * y_1 * z$$ or \(p*q*r\) costs $5 and $10."
    html = render_markdown(text, LIGHT).html
    assert "<em>" not in html
    for span in ("$a*b*c$", "$$x_1 * y_1 * z$$", r"\(p*q*r\)", "$5 and $10."):
        assert span in html
    assert "<em>" in render_markdown("$5 and *this* $10", LIGHT).html
