"""The Linux bundle runs the same desktop-library check as ``python -m app``: its entry
point answers ``--check-desktop-libs`` and the desktop-entry installer calls it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.desktop_libs import check_xcb

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "installer"))
import project

ROOT = project.ROOT
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux bundle")


def test_entry_point_reports_what_the_loader_says(tmp_path):
    report = check_xcb(tmp_path)
    assert report is not None
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HEARTH_HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, str(project.ENTRY_SCRIPT), "--check-desktop-libs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    expected_rc = 0 if report.ok else 1
    expected = (
        "Qt's X11 plugin has every library it needs (or this start will not use X11)."
        if report.ok
        else report.message()
    )
    assert (result.returncode, result.stdout.strip()) == (expected_rc, expected), result.stderr
    assert not (tmp_path / "models").exists()  # a check, not a start: nothing seeded


def test_desktop_entry_installer_runs_the_check(tmp_path):
    folder = tmp_path / "Hearth-x"
    folder.mkdir()
    for source, name in (
        (project.DESKTOP_FILE, "hearth.desktop"),
        (project.ICON_PNG, "hearth.png"),
        (project.LINUX_INSTALL_SCRIPT, "install-desktop-entry.sh"),
    ):
        shutil.copy(source, folder / name)
    calls = tmp_path / "calls"
    (folder / "Hearth").write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\necho "missing: libxcb-icccm.so.4"\nexit 1\n'
    )
    (folder / "Hearth").chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "x")}
    result = subprocess.run(
        ["sh", str(folder / "install-desktop-entry.sh")], env=env, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr  # a missing library warns, never blocks
    assert calls.read_text() == "--check-desktop-libs\n"
    assert "missing: libxcb-icccm.so.4" in result.stderr
    assert (tmp_path / "x" / "applications" / "hearth.desktop").is_file()
