"""One rule for text that crosses a boundary (files, SQLite, the terminal, the composer).

Python strings may hold lone UTF-16 surrogates (``"\\ud800"``): JSON's ``\\u`` escapes, a
terminal's undecodable bytes (``surrogateescape``) and Qt's UTF-16 text can all produce them,
and they cannot be encoded as UTF-8, so SQLite, tokenizers and ``print`` fail on them.
``clean_text`` is the only place that decides what they become: U+FFFD, the replacement
character. A well-formed surrogate *pair* spelled as two code points becomes the character
it encodes.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (pairs are joined)."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_value(value: Any) -> Any:
    """``clean_text`` applied to every string inside a JSON-like value (keys included)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_value(k): clean_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_value(v) for v in value]
    return value
