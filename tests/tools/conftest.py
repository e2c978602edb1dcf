"""Fixtures for the tools tests: real MCP servers over stdio (PyPI's mcp-server-time and
mcp-server-git, and the misbehaving servers in tests/tools/servers), and the network
tests' tripwire / guard, so nothing ever leaves this machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.tools.config import ServerConfig
from tests.network.conftest import guard, offline, tripwire  # noqa: F401  (fixtures)

SERVERS = Path(__file__).parent / "servers"
PYTHON = sys.executable


def time_server(name: str = "time") -> ServerConfig:
    return ServerConfig(name, "stdio", command=PYTHON,
                        args=("-m", "mcp_server_time", "--local-timezone", "UTC"))


def git_server(name: str = "git") -> ServerConfig:
    return ServerConfig(name, "stdio", command=PYTHON, args=("-m", "mcp_server_git"))


def flaky_server(name: str = "flaky", *extra: str, timeout: float = 60.0) -> ServerConfig:
    return ServerConfig(name, "stdio", command=PYTHON,
                        args=(str(SERVERS / "flaky_server.py"), *extra),
                        call_timeout_s=timeout)


def junk_server(name: str = "junk") -> ServerConfig:
    return ServerConfig(name, "stdio", command=PYTHON, args=(str(SERVERS / "junk_server.py"),))


@pytest.fixture
def git_repo(tmp_path) -> Path:
    """A fresh repository (``git init``) with one committed and one untracked file."""
    repo = tmp_path / "repo"
    repo.mkdir()
    run = {"cwd": repo, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **run)
    (repo / "kept.txt").write_text("kept\n", encoding="utf-8")
    subprocess.run(["git", "add", "kept.txt"], **run)
    subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid",
                    "commit", "-qm", "first"], **run)
    (repo / "new-notes.txt").write_text("new\n", encoding="utf-8")
    return repo
