"""How a reply's speculative decoding reads in words (the status bar, a reply's info).

The engine's figures (``GenerationStats``: ``speculation``, ``proposed``, ``accepted``,
``target_steps``) are counts, not times: the "fewer model passes" ratio compares the target model's
runs with the one run per token after the first that a plain reply takes. It is the work
saved, not a measured speed-up (a verify step costs more than a one-token step).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.engine.types import GenerationStats

_SHORT_PROPOSERS = {"lookup": "from the chat", "draft": "with a draft model"}
_PROPOSERS = {"lookup": "prompt lookup (text the chat already holds)", "draft": "a draft model"}


@dataclass(frozen=True)
class SpeculationFigures:
    """One reply's speculation: who proposed, how many guesses, how many the model kept."""

    proposer: str
    proposed: int
    accepted: int
    generated: int
    target_steps: int

    @property
    def acceptance(self) -> float:
        """The share of guesses the model accepted (0–1)."""
        return self.accepted / self.proposed

    @property
    def steps_saved_ratio(self) -> float:
        """Plain steps over the target's steps: a plain reply runs the model once per
        token after the first (the prompt's run gives the first)."""
        return max(self.generated - 1, 0) / max(self.target_steps, 1)


def speculation_figures(stats: GenerationStats | Mapping | None) -> SpeculationFigures | None:
    """The figures of a reply that speculated (``stats`` as the engine returns them or as
    stored in a reply's provenance); None when no guess was made, or when the stored stats
    are not an object (a row edited by hand). A figure that is not a count reads as 0."""
    if stats is None:
        return None
    if isinstance(stats, GenerationStats):
        values: Mapping = stats.as_dict()
    elif isinstance(stats, Mapping):
        values = stats
    else:
        return None
    get = values.get
    proposer = str(get("speculation", "off") or "off")
    proposed = _count(get("proposed"))
    if proposer == "off" or proposed <= 0:
        return None
    return SpeculationFigures(
        proposer=proposer,
        proposed=proposed,
        accepted=_count(get("accepted")),
        generated=_count(get("generated_tokens")),
        target_steps=_count(get("target_steps")),
    )


def off_reason(stats: GenerationStats | Mapping | None) -> str | None:
    """Why a reply that could have guessed ahead did not, in words ("Not guessing ahead:
    log-probabilities were asked for"), from the engine's ``speculation_note``; None when
    there is no note (it guessed, or speculation was simply set off)."""
    if isinstance(stats, GenerationStats):
        note = stats.speculation_note
    elif isinstance(stats, Mapping):
        note = stats.get("speculation_note")
    else:
        return None
    if not isinstance(note, str) or not note.strip():
        return None
    reason = note.strip().removeprefix("off:").strip()
    return f"Not guessing ahead: {reason}"


def _count(value: object) -> int:
    """A stored count: a whole number of at most 2**53 (else 0: text, inf, NaN, 1e300)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if not -(2**53) <= value <= 2**53:  # NaN fails too
        return 0
    return int(value)


def status_text(figures: SpeculationFigures) -> str:
    """In plain words: "Guessed ahead: 72% of guesses right · 1.6× fewer model passes"."""
    return (f"Guessed ahead: {figures.acceptance:.0%} of guesses right · "
            f"{figures.steps_saved_ratio:.1f}× fewer model passes")


def compact_status_text(figures: SpeculationFigures) -> str:
    """The short form for a narrow window: "Guesses 72% right" (the tooltip explains)."""
    return f"Guesses {figures.acceptance:.0%} right"


def explanation(figures: SpeculationFigures) -> str:
    """The tooltip: what ran, the counts, and what the ratio does and does not measure."""
    who = _PROPOSERS.get(figures.proposer, figures.proposer)
    return (
        f"Hearth guessed the next words with {who}, and the model checked several guesses "
        f"in one pass; the text is the same as without guessing.\n"
        f"{figures.accepted} of {figures.proposed} guessed tokens were right; the reply's "
        f"{figures.generated} tokens took {figures.target_steps} model passes instead of "
        f"{max(figures.generated - 1, 0)}.\n"
        "Fewer passes is work saved, not measured time: a pass that checks guesses costs more "
        "than one that writes a single token."
    )


def info_text(figures: SpeculationFigures) -> str:
    """A reply's info line part: "guessed ahead with a draft model: 34 of 47 guesses right,
    1.6× fewer model passes"."""
    who = _SHORT_PROPOSERS.get(figures.proposer, figures.proposer)
    return (f"guessed ahead {who}: {figures.accepted} of {figures.proposed} guesses right, "
            f"{figures.steps_saved_ratio:.1f}× fewer model passes")
