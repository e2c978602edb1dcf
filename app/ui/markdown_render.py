"""Markdown to the HTML subset QTextDocument understands, code highlighted by Pygments.

Raw HTML in the source is escaped (model output is untrusted). Each fenced code block gets a
"Copy code" link ``hearth:code/<row>/<n>``; the code texts are returned alongside the HTML.

Math-looking text stays literal: a ``*`` between two letters or digits (``10*3=30, 7*3=21``,
``x**2``) is not emphasis, and ``$…$``, ``$$…$$``, ``\\(…\\)`` and ``\\[…\\]`` spans are shown
as written, delimiters included (no Markdown inside them).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from functools import lru_cache

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

from app.ui.theme import Colors

CODE_LINK = "hearth:code/{row}/{index}"


@dataclass(frozen=True)
class Rendered:
    html: str
    code_blocks: tuple[str, ...] = field(default_factory=tuple)


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True})
    md.enable(["table", "strikethrough"])
    md.inline.ruler.before("escape", "math_span", _math_span)
    md.inline.ruler.before("emphasis", "intraword_star", _intraword_star)
    md.add_render_rule("fence", _render_code)
    md.add_render_rule("code_block", _render_code)
    return md


def _literal(state, end: int, silent: bool) -> bool:
    """Take ``state.src[state.pos:end]`` as plain text."""
    if not silent:
        state.push("text", "", 0).content = state.src[state.pos:end]
    state.pos = end
    return True


def _intraword_star(state, silent: bool) -> bool:
    """``*`` runs between two letters or digits are arithmetic, not emphasis."""
    src, pos = state.src, state.pos
    if src[pos] != "*" or pos == 0 or not src[pos - 1].isalnum():
        return False
    end = pos
    while end < state.posMax and src[end] == "*":
        end += 1
    if end >= state.posMax or not src[end].isalnum():
        return False
    return _literal(state, end, silent)


_MATH_CLOSERS = {"\\(": "\\)", "\\[": "\\]", "$$": "$$"}


def _math_span(state, silent: bool) -> bool:
    """A TeX span (``$…$``, ``$$…$$``, ``\\(…\\)``, ``\\[…\\]``) stays as written. A single
    ``$`` opens only before a non-space and closes only after one, not before a digit, so
    prices ("$5 and $10") stay prices."""
    src, pos, stop = state.src, state.pos, state.posMax
    opener = src[pos:pos + 2]
    if opener in _MATH_CLOSERS:
        close = src.find(_MATH_CLOSERS[opener], pos + 2, stop)
        if close <= pos + 2:
            return False
        return _literal(state, close + 2, silent)
    if src[pos] != "$" or pos + 1 >= stop or src[pos + 1].isspace():
        return False
    close = pos + 1
    while True:
        close = src.find("$", close + 1, stop)
        if close == -1 or "\n" in src[pos:close]:
            return False
        after = src[close + 1] if close + 1 < stop else ""
        if not src[close - 1].isspace() and not after.isdigit():
            return _literal(state, close + 1, silent)


def _render_code(self, tokens, idx, options, env) -> str:
    """Render rule for fences and indented code: a highlighted table with a copy link."""
    tok = tokens[idx]
    lang = (tok.info or "").strip().split(" ")[0] if tok.type == "fence" else ""
    code = tok.content.rstrip("\n")
    blocks: list[str] = env["blocks"]
    href = CODE_LINK.format(row=env["row"], index=len(blocks))
    blocks.append(code)
    return _code_table(code, lang, env["colors"], href)


@lru_cache(maxsize=4)
def _formatter(style: str) -> HtmlFormatter:
    return HtmlFormatter(style=style, noclasses=True, nowrap=True)


def _lexer(lang: str, code: str):
    return (_named_lexer(lang) if lang else None) or TextLexer()  # guess_lexer: far too slow


@lru_cache(maxsize=64)
def _named_lexer(lang: str):
    """Pygments' lexer for a fence's language (None: unknown). Looking one up imports and
    scans its registry, about 1 ms a code block; a lexer can be used again."""
    try:
        return get_lexer_by_name(lang)
    except ClassNotFound:
        return None


def highlight_code(code: str, lang: str, colors: Colors) -> str:
    """Pygments HTML with inline styles (no CSS classes: QTextDocument has no stylesheet)."""
    body = highlight(code, _lexer(lang, code), _formatter(colors.pygments_style))
    return body.rstrip("\n")


def render_markdown(text: str, colors: Colors, row: int = 0) -> Rendered:
    """Render one message's Markdown. ``row`` names the code-copy links."""
    env: dict = {"blocks": [], "row": row, "colors": colors}
    body = _parser().render(text, env)
    body = _style_tables(body, colors)
    return Rendered(html=body, code_blocks=tuple(env["blocks"]))


def _code_table(code: str, lang: str, colors: Colors, href: str) -> str:
    label = html.escape(lang or "code")
    return (
        f'<table width="100%" cellspacing="0" cellpadding="6" '
        f'style="background-color:{colors.code_bg}; border: 1px solid {colors.border};">'
        f'<tr><td style="color:{colors.muted};">{label} &nbsp; '
        f'<a href="{href}" style="color:{colors.link};">Copy code</a></td></tr>'
        f'<tr><td><pre style="font-family: monospace; margin:0; white-space: pre-wrap;">'
        f"{highlight_code(code, lang, colors)}</pre></td></tr></table>"
    )


def _style_tables(body: str, colors: Colors) -> str:
    """Give Markdown tables borders (QTextDocument ignores CSS on th/td selectors)."""
    return body.replace(
        "<table>",
        f'<table border="1" cellspacing="0" cellpadding="4" '
        f'style="border-color:{colors.border}; border-style: solid;">',
    )
