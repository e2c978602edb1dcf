"""Secrets (the Hugging Face token, remote engines' API keys): the one place Hearth keeps them.

The OS keyring (``keyring``: macOS Keychain, Windows Credential Locker, Secret Service /
KWallet on Linux) when it has a working backend; otherwise a clearly named, unencrypted JSON
file in the data folder that only the user may read (0600 on POSIX), and ``describe()`` says
so. No other file ever holds a secret."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Literal

from app.fileio import read_json, write_json_atomic
from app.paths import data_root

SERVICE = "Hearth"
FALLBACK_NAME = "secrets-NOT-ENCRYPTED.json"
HUB_TOKEN = "hub_token"
SERVER_API_KEY = "server_api_key"  # what clients of the local server must send
KeyPlace = Literal["keyring", "file"]


def _keyring():
    import keyring

    return keyring


def keyring_available() -> bool:
    """Whether ``keyring`` has a real backend here (not its "fail" / "null" stand-ins)."""
    try:
        from keyring.backends import fail, null

        backend = _keyring().get_keyring()
    except Exception:  # a broken keyring install counts as none
        return False
    return not isinstance(backend, (fail.Keyring, null.Keyring))


def backend_name() -> str:
    """The keyring backend's name in words, or "none"."""
    if not keyring_available():
        return "none"
    backend = _keyring().get_keyring()
    return getattr(backend, "name", type(backend).__name__)


class SecretStore:
    """Secrets by name, under one keyring ``service`` (and one fallback file)."""

    def __init__(
        self, service: str = SERVICE, fallback: Path | None = None, *, what: str = "The secret"
    ) -> None:
        self.service = service
        self.fallback = fallback or data_root() / FALLBACK_NAME
        self.what = what

    def where(self) -> KeyPlace:
        """Where the next key goes."""
        return "keyring" if keyring_available() else "file"

    def describe(self) -> str:
        """One sentence for the dialog: where a key will be kept."""
        if self.where() == "keyring":
            return f"{self.what} is kept in the system keyring ({backend_name()})."
        protection = "readable only by you" if sys.platform != "win32" else \
            "in your user profile"
        return (f"No system keyring is available, so {self.what.lower()} will be saved NOT "
                f"encrypted in {self.fallback} ({protection}).")

    def set(self, name: str, value: str) -> KeyPlace:
        """Store ``value``; a keyring that fails (a locked or missing Secret Service) falls
        back to the file. Returns where it went."""
        if keyring_available():
            try:
                _keyring().set_password(self.service, name, value)
            except Exception:
                pass
            else:
                self._drop_from_file(name)
                return "keyring"
        keys = self._file_keys()
        keys[name] = value
        self._write_file(keys)
        return "file"

    def get(self, name: str) -> str | None:
        if keyring_available():
            try:
                value = _keyring().get_password(self.service, name)
            except Exception:
                value = None
            if value:
                return value
        return self._file_keys().get(name) or None

    def delete(self, name: str) -> None:
        if keyring_available():
            with contextlib.suppress(Exception):  # not there is fine
                _keyring().delete_password(self.service, name)
        self._drop_from_file(name)

    # the fallback file --------------------------------------------------------------------

    def _file_keys(self) -> dict[str, str]:
        keys = read_json(self.fallback).get("keys")
        return {str(k): str(v) for k, v in keys.items()} if isinstance(keys, dict) else {}

    def _write_file(self, keys: dict[str, str]) -> None:
        data = {
            "warning": "These secrets are NOT encrypted: no system keyring was available. "
                       "Only your user account can read this file.",
            "keys": keys,
        }
        write_json_atomic(self.fallback, data, mode=0o600)

    def _drop_from_file(self, name: str) -> None:
        keys = self._file_keys()
        if name in keys:
            del keys[name]
            if keys:
                self._write_file(keys)
            else:
                self.fallback.unlink(missing_ok=True)


def hub_token(explicit: str | None = None, legacy: str | None = None) -> str | None:
    """The Hugging Face token to send, from the first place that has one: ``explicit`` (a
    command-line flag), the secret store, ``legacy`` (a token older versions kept in the
    settings file), then huggingface_hub's own (``HF_TOKEN`` or ``huggingface-cli login``)."""
    for token in (explicit, SecretStore().get(HUB_TOKEN), legacy):
        if token:
            return token
    try:
        from huggingface_hub import get_token

        return get_token() or None
    except Exception:  # no saved token is not an error
        return None
