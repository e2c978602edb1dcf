"""``n`` choices of one request: ``n`` jobs run one after another into one ``Channel``.

Each choice's job (``jobs.run_chat`` / ``run_completion`` with its own sampling: see
``Sampling.for_choice``) sends into a :class:`ChoiceChannel`, which tags its chunks with the
choice's index (:class:`Choice`) and passes one ``Started`` on, the first. The request ends
when the last choice does; its record counts the tokens of all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.engine.types import GenerationChunk
from app.server.jobs import Channel, Started


@dataclass(frozen=True)
class Choice:
    """An item of choice ``index`` (a ``GenerationChunk``)."""

    index: int
    item: Any


def unwrap(item: Any) -> tuple[int, Any]:
    """(choice index, item); a bare item is choice 0's (a request with ``n=1``)."""
    return (item.index, item.item) if isinstance(item, Choice) else (0, item)


class ChoiceChannel:
    """What a job of choice ``index`` sends into: the request's channel, tagged."""

    def __init__(self, channel: Channel, index: int) -> None:
        self.cancel = channel.cancel
        self.index = index
        self.final: GenerationChunk | None = None
        self._channel = channel

    @property
    def started_at(self) -> float | None:
        return self._channel.started_at

    @started_at.setter
    def started_at(self, value: float | None) -> None:
        if self._channel.started_at is None:  # the request started with its first choice
            self._channel.started_at = value

    def send(self, item: Any) -> bool:
        if isinstance(item, Started):
            return self.index > 0 or self._channel.send(item)
        return self._channel.send(Choice(self.index, item))


def run_choices(jobs: Sequence[Callable[..., None]], channel: Channel, *args: Any,
                **kwargs: Any) -> None:
    """Job: each of ``jobs`` (one per choice, in order) with a tagged channel; ``args`` are
    what the executor hands a job (the engine, its caches)."""
    finals: list[GenerationChunk] = []
    try:
        for index, job in enumerate(jobs):
            if channel.cancel.is_set():
                break
            tagged = ChoiceChannel(channel, index)
            try:
                job(tagged, *args, **kwargs)
            finally:
                if tagged.final is not None:
                    finals.append(tagged.final)
    finally:
        channel.final = _combined(finals)


def _combined(finals: list[GenerationChunk]) -> GenerationChunk | None:
    """One final chunk for the request's record: the last choice's, with every choice's
    generated tokens."""
    if not finals:
        return None
    last = finals[-1]
    if last.stats is None:
        return last
    generated = sum(f.stats.generated_tokens for f in finals if f.stats is not None)
    return GenerationChunk(last.text, finish_reason=last.finish_reason,
                           stats=replace(last.stats, generated_tokens=generated))
