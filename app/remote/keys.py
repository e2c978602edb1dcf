"""Where remote engines' API keys are kept: the OS keyring (``keyring``: macOS Keychain,
Windows Credential Locker, Secret Service / KWallet on Linux) when it has a working backend;
otherwise a clearly named, unencrypted JSON file in the data folder that only the user may
read (0600 on POSIX). The sources file never holds a key."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Literal

from app.fileio import read_json, write_json_atomic
from app.paths import data_root

SERVICE = "Hearth remote engines"
FALLBACK_NAME = "remote-engine-keys-NOT-ENCRYPTED.json"
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


class KeyStore:
    """API keys by source id."""

    def __init__(self, fallback: Path | None = None) -> None:
        self.fallback = fallback or data_root() / FALLBACK_NAME

    def where(self) -> KeyPlace:
        """Where the next key goes."""
        return "keyring" if keyring_available() else "file"

    def describe(self) -> str:
        """One sentence for the dialog: where a key will be kept."""
        if self.where() == "keyring":
            return f"The API key is kept in the system keyring ({backend_name()})."
        protection = "readable only by you" if sys.platform != "win32" else \
            "in your user profile"
        return (f"No system keyring is available, so the API key will be saved NOT encrypted "
                f"in {self.fallback} ({protection}).")

    def set(self, source_id: str, key: str) -> KeyPlace:
        """Store ``key``; a keyring that fails (a locked or missing Secret Service) falls
        back to the file. Returns where it went."""
        if keyring_available():
            try:
                _keyring().set_password(SERVICE, source_id, key)
            except Exception:
                pass
            else:
                self._drop_from_file(source_id)
                return "keyring"
        keys = self._file_keys()
        keys[source_id] = key
        self._write_file(keys)
        return "file"

    def get(self, source_id: str) -> str | None:
        if keyring_available():
            try:
                value = _keyring().get_password(SERVICE, source_id)
            except Exception:
                value = None
            if value:
                return value
        return self._file_keys().get(source_id) or None

    def delete(self, source_id: str) -> None:
        if keyring_available():
            with contextlib.suppress(Exception):  # not there is fine
                _keyring().delete_password(SERVICE, source_id)
        self._drop_from_file(source_id)

    # the fallback file --------------------------------------------------------------------

    def _file_keys(self) -> dict[str, str]:
        keys = read_json(self.fallback).get("keys")
        return {str(k): str(v) for k, v in keys.items()} if isinstance(keys, dict) else {}

    def _write_file(self, keys: dict[str, str]) -> None:
        data = {
            "warning": "These API keys are NOT encrypted: no system keyring was available. "
                       "Only your user account can read this file.",
            "keys": keys,
        }
        write_json_atomic(self.fallback, data, mode=0o600)

    def _drop_from_file(self, source_id: str) -> None:
        keys = self._file_keys()
        if source_id in keys:
            del keys[source_id]
            if keys:
                self._write_file(keys)
            else:
                self.fallback.unlink(missing_ok=True)
