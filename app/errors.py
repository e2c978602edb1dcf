"""Errors a user can act on.

Every problem caused by the environment or the user's input (a corrupt model folder, a full
disk, a cut network, an over-long prompt, a bad chat template) is raised as a ``HearthError``
whose message is a sentence the user can act on. Anything else is a bug and goes to the
crash reporter.
"""

from __future__ import annotations


class HearthError(Exception):
    """Base class: ``str(err)`` is shown to the user as is."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}" if self.hint else self.message


class ModelLoadError(HearthError):
    """A model folder cannot be loaded (missing/corrupt file, unknown layout, bad config)."""


class TemplateError(HearthError):
    """The model's chat template failed to render or tried to escape its sandbox."""


class ContextOverflowError(HearthError):
    """The conversation does not fit in the model's context window."""


class PromptError(HearthError, ValueError):
    """A raw prompt cannot be run as given (no tokens, a token id outside the vocabulary)."""


class ProviderError(HearthError):
    """An execution provider was asked for but cannot be used."""


class DownloadError(HearthError):
    """A download failed; the partial data is kept for resuming when possible."""


class GatedError(DownloadError):
    """The Hub refused a file or listing with 401 / 403: the repo is gated (or private).
    ``repo`` (None when the URL names none) and ``status`` let the app offer the licence page
    and the token setting."""

    def __init__(self, message: str, *, repo: str | None, status: int,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.repo = repo
        self.status = status


class DiskFullError(HearthError):
    """Not enough free disk space for the operation."""


class ConversionError(HearthError):
    """A GGUF file cannot be converted."""


class StorageError(HearthError):
    """The history database cannot be opened or written."""
