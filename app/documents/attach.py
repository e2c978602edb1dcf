"""Files attached to a message: read once when sent, then either put in the prompt whole or
searched (retrieval), by a budget rule LM Studio also follows.

``attachment(path, context_tokens, used_tokens)`` reads the file (``parse_file``, bounded)
and gives its ``Attachment`` part: with ``text`` when it fits half the context left (4
characters a token, the estimate the remote backend uses too), else without (then it is
indexed into the chat's own collection, ``chat_collection``, and passages are picked per
question). A file that cannot be read raises ``DocumentError`` with a sentence.
``context_tokens`` None: the context is not known yet (the model still loads), so the text
is kept and ``by_budget`` decides once it is, the same rule for the same file whether the
model was loaded when it was sent or not.

``read_attachments(paths, …)`` reads several (the window runs it on a worker thread: a
large PDF takes seconds): each file that cannot be read is left out with its sentence, and
``checkpoint`` (``JobControl.checkpoint``) runs before each file, so a quit stops it there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
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


#: the prefix of a chat's own collection (its attached files), which is not a library
CHAT_PREFIX = "chat-"


def names_of(paths: Sequence[Path]) -> str:
    """The files' names, as a sentence lists them ("a.txt, b.pdf")."""
    return ", ".join(Path(p).name for p in paths)


def were(paths: Sequence[Path]) -> str:
    """"was" for one file, "were" for more ("a.txt, b.txt were read")."""
    return "was" if len(paths) == 1 else "were"


def them(paths: Sequence[Path]) -> str:
    """"it" for one file, "them" for more ("attach them again")."""
    return "it" if len(paths) == 1 else "them"


def chat_collection(conversation_id: str) -> str:
    """The collection a chat's large attachments are indexed into."""
    return f"{CHAT_PREFIX}{conversation_id}"


def is_chat_collection(name: str) -> bool:
    """Whether collection ``name`` is a chat's own (its attached files), not a library."""
    return name.startswith(CHAT_PREFIX)


def attachment(path: Path, context_tokens: int | None, used_tokens: int) -> Attachment:
    from app.documents.parse import kind_of, parse_file

    parsed = parse_file(path)
    text = whole_text(parsed.sections)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    whole = context_tokens is None or fits_whole(len(text), context_tokens, used_tokens)
    return Attachment(name=path.name, path=str(path.absolute()), sha256=digest,
                      mime=kind_of(path) or "", text=text if whole else "")


Reader = Callable[[Path, "int | None", int], Attachment]


@dataclass
class AttachmentsRead:
    """What ``read_attachments`` found: the parts, which of them must be indexed first (no
    ``text``), and a sentence per file that could not be read."""

    parts: list[Attachment] = field(default_factory=list)
    large: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_attachments(paths: Sequence[Path], context_tokens: int | None, used_tokens: int, *,
                     read: Reader = attachment,
                     checkpoint: Callable[[], None] | None = None) -> AttachmentsRead:
    """Read each of ``paths`` with ``read`` (``attachment``); see the module's docstring."""
    from app.documents.sections import DocumentError

    out = AttachmentsRead()
    for path in map(Path, paths):
        if checkpoint is not None:
            checkpoint()
        try:
            part = read(path, context_tokens, used_tokens)
        except DocumentError as exc:
            out.problems.append(str(exc))
            continue
        except OSError as exc:
            out.problems.append(f"{path.name} cannot be read ({exc.strerror or exc}).")
            continue
        out.parts.append(part)
        if not part.text:
            out.large.append(path)
    return out


def by_budget(found: AttachmentsRead, context_tokens: int, used_tokens: int) -> AttachmentsRead:
    """``found`` as read without a context (``context_tokens`` None), now decided: each file
    whose text does not fit half the context left loses it and joins ``large`` (it is
    searched); the others go in the prompt whole."""
    out = AttachmentsRead(problems=list(found.problems), large=list(found.large))
    for part in found.parts:
        if part.text and not fits_whole(len(part.text), context_tokens, used_tokens):
            part = replace(part, text="")
            out.large.append(Path(part.path))
        out.parts.append(part)
    return out
