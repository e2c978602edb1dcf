"""The chat turn's retriever over document libraries (app/chat/turn.py ``Retriever``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from app.chat.parts import Source
from app.documents.index import Passage
from app.documents.library import DocumentLibrary

DEFAULT_TOP = 5


class LibraryRetriever:
    """``search(query)`` → the best passages of ``collections`` as ``Source`` parts.
    ``before(collections)`` runs first, on the searching thread (the window's check of the
    libraries' folders: their gone files drop out before this answer searches them)."""

    def __init__(self, library: DocumentLibrary, collections: Sequence[str] = (), *,
                 top: int = DEFAULT_TOP,
                 before: Callable[[Sequence[str]], None] | None = None) -> None:
        self.library = library
        self.collections = tuple(collections)
        self.top = top
        self.before = before

    def search(self, query: str) -> list[Source]:
        if not query.strip():
            return []
        if self.before is not None:
            self.before(self.collections)
        return [to_source(p) for p in self.library.search(query, self.collections,
                                                          top=self.top)]


def to_source(passage: Passage) -> Source:
    return Source(document=Path(passage.file).name, location=passage.location(),
                  text=passage.text, path=passage.file, score=round(passage.score, 6))
