"""Hearth's offline mode: where it is asked for, and what switching it does.

Asked for by the ``offline`` setting, the ``--offline`` flag (on ``hearth`` and every
subcommand) or ``HEARTH_OFFLINE=1``. When on:

- the socket guard refuses every non-loopback connection (:mod:`app.network.guard`);
- the Hugging Face libraries run offline (``HF_HUB_OFFLINE=1``, and huggingface_hub's
  constant, read once at its import, recomputed on every switch: :func:`sync_hub_offline`),
  so hf-xet's native transfers never start;
- ``PIP_NO_INDEX=1`` keeps a pip child (the starter fetch) off the network;
- ``HEARTH_OFFLINE=1`` is exported, so any Hearth child process is offline as well.

:func:`startup` runs first thing in ``app.cli.main`` (before the command modules import
huggingface_hub and onnxruntime); :func:`set_offline` switches at run time (the settings
dialog).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from app.network.activity import ConnectionAttempt, current_feature
from app.network.guard import OfflineBlockedError, SocketGuard, active_guard, install_guard
from app.network.telemetry import opt_out_environment

OFFLINE_ENV = "HEARTH_OFFLINE"
OFFLINE_FLAG = "--offline"
OFFLINE_HELP = "block every network connection (also: HEARTH_OFFLINE=1 or the offline setting)"
_CHILD_ENV = {OFFLINE_ENV: "1", "HF_HUB_OFFLINE": "1", "PIP_NO_INDEX": "1"}
_INFO_FLAGS = {"-h", "--help", "--version"}
_saved_env: dict[str, str | None] = {}


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def offline_requested(argv: Sequence[str] = ()) -> bool:
    """Whether the flag (before a ``--``), the environment or the setting asks for offline."""
    args = list(argv)
    if "--" in args:
        args = args[: args.index("--")]
    if OFFLINE_FLAG in args or _truthy(os.environ.get(OFFLINE_ENV)):
        return True
    if _INFO_FLAGS.intersection(args):
        return False  # --version / --help touch no user data (not even the settings file)
    try:
        from app.settings import Settings

        return bool(Settings().get("offline"))
    except Exception:  # an unreadable settings file must not stop the start
        return False


def is_offline() -> bool:
    guard = active_guard()
    return bool(guard is not None and guard.offline)


def set_offline(offline: bool, *, note: bool = True) -> SocketGuard:
    """Switch offline mode for this process, both ways, at once (installs the guard when
    needed) and note the switch in the network activity log.

    The environment carries the mode to child processes. huggingface_hub reads
    ``HF_HUB_OFFLINE`` once, when it is imported, into ``constants.HF_HUB_OFFLINE`` (which
    every request checks); whether it was imported before or after the mode was first set,
    the constant is recomputed here from the environment as it now stands, with the same rule
    huggingface_hub uses, so turning offline mode off really turns the Hub's switch off too
    (unless the user set ``HF_HUB_OFFLINE`` themselves, which stays theirs)."""
    for key, value in _CHILD_ENV.items():
        if offline:
            _saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        elif key in _saved_env:
            previous = _saved_env.pop(key)
            if previous is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = previous
    sync_hub_offline()
    guard = install_guard()
    if note and guard.offline != offline:
        guard.log.note_switch(offline)
    return install_guard(offline=offline)


def hub_offline_from_environment() -> bool:
    """huggingface_hub's own rule for its offline switch, applied to today's environment."""
    return _truthy(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"))


def sync_hub_offline() -> None:
    """Make an imported huggingface_hub's offline constant match the environment now (its
    value from import time is stale once the environment changed since)."""
    hub_constants = sys.modules.get("huggingface_hub.constants")
    if hub_constants is not None:
        hub_constants.HF_HUB_OFFLINE = hub_offline_from_environment()


def record_refusal(url: str) -> OfflineBlockedError:
    """Log a request that Hearth's own code refused up front because offline mode is on
    (so the log shows it although no socket was opened); return the error to raise."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"https": 443, "http": 80}.get(parts.scheme)
    host = parts.hostname or url
    guard = install_guard()
    attempt = ConnectionAttempt(
        time.time(), current_feature(), host, port, False, "request", "offline mode is on"
    )
    guard.log.record(attempt)
    return OfflineBlockedError(attempt.target)


def startup(argv: Sequence[str] = ()) -> SocketGuard:
    """Process start: telemetry opt-outs, then the guard, offline when asked for."""
    opt_out_environment()
    return set_offline(offline_requested(argv), note=False)  # the start is no switch


def add_offline_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every (nested) subcommand an ``--offline`` flag."""
    parser.add_argument(
        OFFLINE_FLAG, action="store_true", default=argparse.SUPPRESS, help=OFFLINE_HELP
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                add_offline_flag(sub)
