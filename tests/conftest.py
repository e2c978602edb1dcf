"""Shared test setup: every test gets its own HEARTH_HOME; Qt runs offscreen."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Tests never reach the network: the Hub client must not try either.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture(autouse=True)
def hearth_home(tmp_path_factory, monkeypatch):
    """Redirect all user data to a fresh temp folder for each test."""
    home = tmp_path_factory.mktemp("hearth_home")
    monkeypatch.setenv("HEARTH_HOME", str(home))
    return home
