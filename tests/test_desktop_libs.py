"""The check of Qt's xcb plugin before QApplication: ldd parsing, package names, the
platform decision, the cache, and a real run on this machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app import desktop_libs
from app.desktop_libs import (
    DEBIAN,
    FEDORA,
    XcbReport,
    check_xcb,
    distro_family,
    find_plugin,
    parse_ldd,
    platform_will_be_xcb,
)
from app.errors import HearthError

ROOT = Path(__file__).resolve().parents[1]

# What ldd printed on a minimal Debian 12 (trimmed): transitive "not found" lines repeat.
LDD_DEBIAN12 = """\
\tlinux-vdso.so.1 (0x00007ffd4d1f6000)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/plugins/platforms/../../lib/libQt6XcbQpa.so.6 (0x1)
\tlibxcb-cursor.so.0 => /lib/x86_64-linux-gnu/libxcb-cursor.so.0 (0x00007f0c5a3f0000)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-util.so.1 => /lib/x86_64-linux-gnu/libxcb-util.so.1 (0x00007f0c5a3e0000)
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-frobnicate.so.2 => not found
\t/lib64/ld-linux-x86-64.so.2 (0x00007f0c5a600000)
"""


def test_parse_ldd_keeps_each_missing_soname_once_in_order():
    assert parse_ldd(LDD_DEBIAN12) == (
        "libxcb-icccm.so.4",
        "libxcb-keysyms.so.1",
        "libxcb-frobnicate.so.2",
    )
    assert parse_ldd("\tlibc.so.6 => /lib/libc.so.6 (0x1)\n") == ()


def test_report_names_packages_and_the_command():
    report = XcbReport(Path("libqxcb.so"), parse_ldd(LDD_DEBIAN12), DEBIAN)
    assert report.packages == ("libxcb-icccm4", "libxcb-keysyms1", "libxcb-frobnicate2")
    assert report.install_command == (
        "apt-get install -y libxcb-icccm4 libxcb-keysyms1 libxcb-frobnicate2"
    )
    fedora = XcbReport(Path("libqxcb.so"), ("libxcb-icccm.so.4", "libxcb-keysyms.so.1"), FEDORA)
    assert fedora.install_command == "dnf install -y xcb-util-wm xcb-util-keysyms"
    unknown = XcbReport(Path("libqxcb.so"), ("libxcb-icccm.so.4",), None)
    assert unknown.install_command is None
    assert "Debian/Ubuntu: libxcb-icccm4; Fedora: xcb-util-wm" in unknown.message()
    error = report.error()
    assert isinstance(error, HearthError)
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in str(error)
    assert "sudo apt-get install -y libxcb-icccm4" in str(error)


def test_distro_family():
    assert distro_family('ID=debian\nVERSION_ID="12"\n') == DEBIAN
    assert distro_family('ID=linuxmint\nID_LIKE="ubuntu debian"\n') == DEBIAN
    assert distro_family('ID="rocky"\nID_LIKE="rhel centos fedora"\n') == FEDORA
    assert distro_family("ID=arch\n") is None


@pytest.mark.parametrize(
    ("env", "system", "expected"),
    [
        ({}, "linux", True),
        ({"QT_QPA_PLATFORM": "xcb"}, "linux", True),
        ({"QT_QPA_PLATFORM": "offscreen"}, "linux", False),
        ({"QT_QPA_PLATFORM": "minimal"}, "linux", False),
        ({"QT_QPA_PLATFORM": "wayland", "WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
        ({"QT_QPA_PLATFORM": "wayland;xcb"}, "linux", True),  # no compositor: falls to xcb
        ({"XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
        ({"XDG_SESSION_TYPE": "x11", "DISPLAY": ":0"}, "linux", True),
        ({}, "darwin", False),
        ({}, "win32", False),
    ],
)
def test_platform_will_be_xcb(env, system, expected):
    assert platform_will_be_xcb(env, system) is expected


def test_a_good_answer_is_cached_and_a_bad_one_is_not(tmp_path):
    plugin = tmp_path / "libqxcb.so"
    plugin.write_bytes(b"\x7fELF")
    calls = []

    def fake_ldd(answer: str):
        def run(path: Path) -> str:
            calls.append(path)
            return answer

        return run

    bad = check_xcb(tmp_path, plugin=plugin, ldd=fake_ldd(LDD_DEBIAN12))
    assert bad is not None and not bad.ok
    again = check_xcb(tmp_path, plugin=plugin, ldd=fake_ldd(LDD_DEBIAN12))
    assert again is not None and not again.ok
    assert len(calls) == 2  # not cached: installing the packages helps at the next start
    good = check_xcb(tmp_path, plugin=plugin, ldd=fake_ldd("\tlibc.so.6 => /lib/libc.so.6\n"))
    assert good is not None and good.ok
    cached = check_xcb(tmp_path, plugin=plugin, ldd=fake_ldd(LDD_DEBIAN12))
    assert cached is not None and cached.ok
    assert len(calls) == 3  # the good answer was reused without running ldd
    plugin.write_bytes(b"\x7fELF, another build")  # a new PySide6 build: check again
    assert not check_xcb(tmp_path, plugin=plugin, ldd=fake_ldd(LDD_DEBIAN12)).ok
    assert len(calls) == 4


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="xcb is Linux only")
def test_real_check_on_this_machine_matches_the_loader(tmp_path):
    plugin = find_plugin()
    assert plugin is not None and plugin.name == "libqxcb.so"
    ldd = shutil.which("ldd")
    assert ldd is not None
    output = subprocess.run([ldd, str(plugin)], capture_output=True, text=True).stdout
    expected = []
    for line in output.splitlines():
        if line.strip().endswith("=> not found"):
            name = line.split()[0]
            if name not in expected:
                expected.append(name)
    report = check_xcb(tmp_path)
    assert report is not None
    assert list(report.missing) == expected
    assert report.ok is (not expected)
    assert all(p in desktop_libs.PACKAGES or p.startswith("libxcb-") for p in report.missing)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="xcb is Linux only")
def test_launch_names_the_libraries_instead_of_aborting(tmp_path):
    """A real start on X11 here: with libraries missing it exits with the sentence; with
    all present it gets past the check (and, with no X server, Qt says so itself)."""
    report = check_xcb(tmp_path)
    assert report is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QT_QPA", "WAYLAND"))}
    env.update(HEARTH_HOME=str(tmp_path), DISPLAY=":99", XDG_SESSION_TYPE="x11")
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from app.ui.launch import _check_desktop_libraries;"
         "from app.errors import HearthError\n"
         "try:\n    _check_desktop_libraries()\nexcept HearthError as e:\n"
         "    print(e); sys.exit(2)\nprint('ok')"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    expected = (0, "ok") if report.ok else (2, str(report.error()))
    assert (result.returncode, result.stdout.strip()) == expected, result.stderr
