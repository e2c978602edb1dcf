"""What went wrong with the history file, told apart so the user gets the right advice.

SQLite reports a read-only file, a full disk, a missing folder, a lock held by another
program and a damaged file with distinct result codes. Only a damaged file earns "move the
file aside": saying that about a healthy history on a full disk would make a user set their
chats aside for nothing. ``storage_error`` is the one place that maps an exception to one of
these ``StorageError`` subclasses.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from app.errors import DiskFullError, StorageError

# SQLite primary result codes (https://sqlite.org/rescode.html).
SQLITE_PERM = 3
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
SQLITE_NOTADB = 26


class HistoryReadOnlyError(StorageError):
    """The history file or its folder cannot be written (permissions, read-only drive)."""


class HistoryDiskFullError(StorageError, DiskFullError):
    """The disk holding the history is full."""


class HistoryUnavailableError(StorageError):
    """The history file cannot be reached (missing folder, unplugged drive, I/O error)."""


class HistoryBusyError(StorageError):
    """Another program holds a lock on the history file."""


class HistoryDamagedError(StorageError):
    """The file is not a SQLite database or its pages are corrupt."""


class ImportFileError(StorageError):
    """An export file cannot be imported; nothing was written."""


def storage_error(exc: BaseException, path: Path | str, action: str = "saved") -> StorageError:
    """The user-facing error for ``exc`` raised while the history at ``path`` was ``action``.

    ``action`` completes "The chat history at PATH could not be …" ("opened", "saved").
    """
    if isinstance(exc, StorageError):
        return exc
    code = _primary_code(exc)
    if code in (SQLITE_READONLY, SQLITE_PERM) or _is_errno(exc, errno.EACCES, errno.EPERM,
                                                           errno.EROFS):
        return _read_only(path, action)
    if code == SQLITE_FULL or _is_errno(exc, errno.ENOSPC, errno.EDQUOT):
        return HistoryDiskFullError(
            f"The chat history at {path} could not be {action}: the disk is full.",
            hint="Free some disk space and try again; the chats saved before are intact.",
        )
    if code in (SQLITE_BUSY, SQLITE_LOCKED):
        return HistoryBusyError(
            f"The chat history at {path} is locked by another program "
            "(perhaps another Hearth window).",
            hint="Close the other program and try again.",
        )
    if code in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return HistoryDamagedError(
            f"The chat history at {path} cannot be opened: the file is damaged or is not a "
            f"Hearth history ({exc}).",
            hint="Move the file aside to start a fresh history, or restore a backup.",
        )
    if code in (SQLITE_CANTOPEN, SQLITE_IOERR) or isinstance(exc, OSError):
        if not _writable(path):
            return _read_only(path, action)
        return HistoryUnavailableError(
            f"The chat history at {path} could not be {action}: the file or its folder "
            f"cannot be reached ({exc}).",
            hint="Check that the folder exists and its drive is connected, then try again.",
        )
    return StorageError(
        f"The chat history at {path} could not be {action} ({exc}).",
        hint="Check that the data folder is writable.",
    )


def _read_only(path: Path | str, action: str) -> HistoryReadOnlyError:
    return HistoryReadOnlyError(
        f"The chat history at {path} could not be {action}: the file or its folder is "
        "read-only.",
        hint="Make them writable (or move the data folder to a writable drive) and try "
        "again; the chats themselves are not damaged.",
    )


def _primary_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(exc, sqlite3.Error) and isinstance(code, int):
        return code & 0xFF
    return None


def _is_errno(exc: BaseException, *codes: int) -> bool:
    return isinstance(exc, OSError) and exc.errno in codes


def _writable(path: Path | str) -> bool:
    """False when the file (or, if absent, its folder) exists and cannot be written."""
    p = Path(path)
    target = p if p.exists() else p.parent
    return not target.exists() or os.access(target, os.W_OK)
