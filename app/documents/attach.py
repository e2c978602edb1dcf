"""Files attached to a message: read once when sent, then either put in the prompt whole or
searched (retrieval), by a budget rule LM Studio also follows.

``attachment(path, context_tokens, used_tokens)`` reads the file (``parse_file``, bounded)
and gives its ``Attachment`` part: with ``text`` when it fits half the context left (4
characters a token, the estimate the remote backend uses too), else without (then it is
indexed into the chat's own collection, ``chat_collection``, and passages are picked per
question). A file that cannot be read raises ``DocumentError`` with a sentence.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from app.chat.parts import Attachment

CHARS_PER_TOKEN = 4
#: the share of the context left that a file may take whole
WHOLE_SHARE = 0.5


def fits_whole(chars: int, context_tokens: int, used_tokens: int) -> bool:
    """Whether a text of ``chars`` characters fits half the context left."""
    left = max(0, context_tokens - used_tokens)
    return chars / CHARS_PER_TOKEN <= left * WHOLE_SHARE


def whole_text(sections) -> str:
    """A parsed file's text as one block, each new heading on its own line."""
    blocks: list[str] = []
    heading = ""
    for section in sections:
        if not section.text.strip():
            continue
        if section.heading and section.heading != heading and not section.heading.startswith(
                "lines "):
            blocks.append(section.heading)
        heading = section.heading
        blocks.append(section.text)
    return "\n\n".join(blocks)


def chat_collection(conversation_id: str) -> str:
    """The collection a chat's large attachments are indexed into."""
    return f"chat-{conversation_id}"


def attachment(path: Path, context_tokens: int, used_tokens: int) -> Attachment:
    from app.documents.parse import kind_of, parse_file

    parsed = parse_file(path)
    text = whole_text(parsed.sections)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    whole = fits_whole(len(text), context_tokens, used_tokens)
    return Attachment(name=path.name, path=str(path.absolute()), sha256=digest,
                      mime=kind_of(path) or "", text=text if whole else "")
