"""The activity log and the feature tags, without sockets."""

from __future__ import annotations

import threading

from app.network import ConnectionAttempt, NetworkLog, current_feature, feature


def attempt(n: int, allowed: bool = True) -> ConnectionAttempt:
    return ConnectionAttempt(1_700_000_000.25 + n, "model download", "10.0.0.1", n, allowed,
                             "connect", "online" if allowed else "offline mode is on")


def test_the_log_keeps_the_last_n_and_counts_all():
    log = NetworkLog(capacity=3)
    for n in range(5):
        log.record(attempt(n, allowed=n % 2 == 0))
    assert [e.port for e in log.entries()] == [2, 3, 4]
    assert log.total == 5
    assert [e.port for e in log.blocked()] == [3]


def test_as_text_is_a_tab_separated_table():
    log = NetworkLog()
    log.record(attempt(443, allowed=False))
    header, row = log.as_text().splitlines()
    assert header == "time\tfeature\ttarget\tverdict\tdetail"
    fields = row.split("\t")
    assert fields[1:] == [
        "model download",
        "10.0.0.1:443",
        "blocked",
        "connect: offline mode is on",
    ]
    assert fields[0].endswith(".250")


def test_feature_tags_nest_and_restore():
    assert current_feature() == "unknown"
    with feature("model download"):
        assert current_feature() == "model download"
        with feature("Hub metadata", keep_outer=True):
            assert current_feature() == "model download"
        with feature("Hub search"):
            assert current_feature() == "Hub search"
        assert current_feature() == "model download"
    with feature("Hub metadata", keep_outer=True):
        assert current_feature() == "Hub metadata"
    assert current_feature() == "unknown"


def test_a_new_thread_starts_untagged():
    seen = []
    with feature("model download"):
        thread = threading.Thread(target=lambda: seen.append(current_feature()))
        thread.start()
        thread.join()
    assert seen == ["unknown"]
