"""Secrets (the Hugging Face token, remote engines' API keys) in the OS keyring.

The one place Hearth stores a secret. ``keyring`` picks the platform's store (Windows
Credential Manager, macOS Keychain, Secret Service on Linux desktops). Where no store exists
(a bare Linux machine), ``available()`` is False and callers say so instead of pretending the
secret is stored safely; nothing is ever written to a file here.
"""

from __future__ import annotations

import contextlib

SERVICE = "Hearth"


def _backend():
    import keyring
    from keyring.backends import fail

    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 1) <= 0:
        return None
    return keyring


def available() -> bool:
    """Whether this machine has a keyring to keep secrets in."""
    try:
        return _backend() is not None
    except Exception:  # a broken keyring backend is the same as none
        return False


def get_secret(name: str) -> str | None:
    """The secret stored under ``name``, or None (also when there is no keyring)."""
    try:
        backend = _backend()
        return backend.get_password(SERVICE, name) if backend is not None else None
    except Exception:
        return None


def set_secret(name: str, value: str) -> bool:
    """Store ``value`` (an empty value deletes it). False when there is no keyring or it
    refused."""
    try:
        backend = _backend()
        if backend is None:
            return False
        if value:
            backend.set_password(SERVICE, name, value)
        else:
            with contextlib.suppress(Exception):  # nothing stored is fine
                backend.delete_password(SERVICE, name)
        return True
    except Exception:
        return False


HUB_TOKEN = "hub_token"


def hub_token(explicit: str | None = None, legacy: str | None = None) -> str | None:
    """The Hugging Face token to send, from the first place that has one: ``explicit`` (a
    command-line flag), the keyring, ``legacy`` (a token older versions kept in the settings
    file), then huggingface_hub's own (``HF_TOKEN`` or ``huggingface-cli login``)."""
    for token in (explicit, get_secret(HUB_TOKEN), legacy):
        if token:
            return token
    try:
        from huggingface_hub import get_token

        return get_token() or None
    except Exception:  # no saved token is not an error
        return None
