"""Everything Hearth knows about the network: the socket guard, the activity log, offline
mode and the telemetry opt-outs. Plain Python (no Qt); the UI shows the log through
``app.ui.network_log``.

Feature tags name who connects: wrap the work in ``with feature("model download"):`` (on the
thread that does it). Tags used so far: "Hub search", "Hub connection test" (the token
test), "Hub metadata", "model download", "starter fetch", "remote engine".
"""

from app.network.activity import (
    UNKNOWN_FEATURE,
    ConnectionAttempt,
    ModeSwitch,
    NetworkLog,
    current_feature,
    feature,
)
from app.network.guard import (
    OfflineBlockedError,
    SocketGuard,
    active_guard,
    install_guard,
    uninstall_guard,
)
from app.network.offline import (
    OFFLINE_ENV,
    add_offline_flag,
    is_offline,
    offline_requested,
    record_refusal,
    set_offline,
    startup,
)


def network_log() -> NetworkLog:
    """The process's activity log (installs the guard, online, if nothing did yet)."""
    return install_guard().log


__all__ = [
    "OFFLINE_ENV",
    "UNKNOWN_FEATURE",
    "ConnectionAttempt",
    "ModeSwitch",
    "NetworkLog",
    "OfflineBlockedError",
    "SocketGuard",
    "active_guard",
    "add_offline_flag",
    "current_feature",
    "feature",
    "install_guard",
    "is_offline",
    "network_log",
    "offline_requested",
    "record_refusal",
    "set_offline",
    "startup",
    "uninstall_guard",
]
