"""HTML → sections by heading, with the standard library's parser (no scripts, no styles)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from app.documents.sections import Section

_SKIP = {"script", "style", "noscript", "template", "svg", "head"}
_BLOCK = {"p", "div", "li", "ul", "ol", "tr", "table", "section", "article", "br", "pre",
          "blockquote", "dd", "dt", "hr", "header", "footer", "main", "nav", "aside", "td",
          "th", "figcaption"}
_HEADINGS = {f"h{i}": i for i in range(1, 7)}


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[Section] = []
        self.title = ""
        self._skip = 0
        self._in_title = False
        self._heading: int | None = None
        self._heading_text: list[str] = []
        self._stack: list[tuple[int, str]] = []
        self._body: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag in _HEADINGS and not self._skip:
            self._close()
            self._heading, self._heading_text = _HEADINGS[tag], []
        elif tag in _BLOCK:
            self._body.append("\n" if tag != "p" else "\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag == "title":
            self._in_title = False
        elif tag in _HEADINGS and self._heading is not None:
            title = " ".join("".join(self._heading_text).split())
            while self._stack and self._stack[-1][0] >= self._heading:
                self._stack.pop()
            if title:
                self._stack.append((self._heading, title))
            self._heading = None
        elif tag in _BLOCK:
            self._body.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif self._skip:
            return
        elif self._heading is not None:
            self._heading_text.append(data)
        else:
            self._body.append(data)

    def _close(self) -> None:
        text = re.sub(r"[ \t\r\f\v]+", " ", "".join(self._body))
        text = re.sub(r"\n\s*\n\s*", "\n\n", text).strip()
        if text:
            self.sections.append(Section(text, heading=" › ".join(h for _, h in self._stack)))
        self._body = []

    def finish(self) -> list[Section]:
        self.close()
        self._close()
        return self.sections


def html_sections(text: str) -> list[Section]:
    parser = _Extractor()
    for start in range(0, len(text), 1 << 16):
        parser.feed(text[start:start + (1 << 16)])
    return parser.finish()
