"""The chat turn's retriever over document libraries (app/chat/turn.py ``Retriever``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from app.chat.parts import Source
from app.documents.index import Passage
from app.documents.library import DocumentLibrary

DEFAULT_TOP = 5


class LibraryRetriever:
    """``search(query)`` → the best passages of ``collections`` as ``Source`` parts."""

    def __init__(self, library: DocumentLibrary, collections: Sequence[str] = (), *,
                 top: int = DEFAULT_TOP) -> None:
        self.library = library
        self.collections = tuple(collections)
        self.top = top

    def search(self, query: str) -> list[Source]:
        if not query.strip():
            return []
        return [to_source(p) for p in self.library.search(query, self.collections,
                                                          top=self.top)]


def to_source(passage: Passage) -> Source:
    return Source(document=Path(passage.file).name, location=passage.location(),
                  text=passage.text, path=passage.file, score=round(passage.score, 6))
