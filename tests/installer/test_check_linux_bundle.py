"""installer/check_linux_bundle.py: the frozen Linux bundle on a real X server (Xvfb).

The full check runs only against an already-built bundle (``python installer/build.py
--package none``; CI does not build one) on a machine with Xvfb, as root (it hides a library
in a private mount namespace). Its parts run everywhere on Linux, in well under a second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.installer.installer_modules import check_linux_bundle as check
from tests.installer.installer_modules import project

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux bundle")
BUNDLE_EXE = project.DIST_DIR / project.APP_NAME / project.APP_NAME
CAN_HIDE = os.geteuid() == 0 and shutil.which("unshare") is not None


def _save(tmp_path: Path, name: str, draw) -> Path:
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor, QImage, QPainter

    image = QImage(240, 160, QImage.Format.Format_ARGB32)
    image.fill(QColor("#f4f1ea"))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    draw(painter, Qt)
    painter.end()
    path = tmp_path / name
    assert image.save(str(path))
    return path


def test_reads_qt_pngs_and_tells_a_blank_one(qapp, tmp_path):
    blank = check.look_at(_save(tmp_path, "blank.png", lambda painter, qt: None))
    assert (blank.width, blank.height, blank.colors, blank.blank) == (240, 160, 1, True)

    def window(painter, qt):
        painter.fillRect(0, 0, 240, 24, qt.GlobalColor.darkBlue)  # a title bar
        painter.setPen(qt.GlobalColor.black)
        for row in range(5):
            painter.drawText(12, 50 + 20 * row, "Hello! Who are you? I am a model.")
        painter.drawEllipse(180, 100, 40, 40)

    drawn = check.look_at(_save(tmp_path, "window.png", window))
    assert (drawn.width, drawn.height) == (240, 160)
    assert drawn.colors > 16 and not drawn.blank, drawn.describe()
    assert 0.02 < 1 - drawn.background < 0.9  # text and a bar on the background colour


def test_reads_pixels_exactly(qapp, tmp_path):
    from PySide6.QtGui import QColor, QImage

    image = QImage(3, 2, QImage.Format.Format_RGB32)
    colours = [["#ff0000", "#00ff00", "#0000ff"], ["#102030", "#fefefe", "#000000"]]
    for y, row in enumerate(colours):
        for x, name in enumerate(row):
            image.setPixelColor(x, y, QColor(name))
    path = tmp_path / "pixels.png"
    assert image.save(str(path))
    width, height, rows = check.read_png(path)
    assert (width, height) == (3, 2)
    expected = [b"".join(bytes.fromhex(name[1:]) for name in row) for row in colours]
    assert rows == expected


def test_not_a_png_is_refused(tmp_path):
    path = tmp_path / "x.png"
    path.write_bytes(b"GIF89a not a png")
    with pytest.raises(ValueError, match="is not a PNG file"):
        check.read_png(path)


@pytest.mark.skipif(not CAN_HIDE, reason="hiding a library needs root and unshare")
def test_a_hidden_library_is_not_found_inside_only(tmp_path):
    copies = check.system_copies("libxcb.so.1")
    if not copies:
        pytest.skip("this system has no libxcb.so.1 to hide")
    libx11 = next((p for p in check.system_copies("libX11.so.6") if p.is_file()), None)
    assert libx11 is not None, "libxcb.so.1 without libX11.so.6"
    ldd = ["ldd", str(libx11)]
    inside = subprocess.run(check.hidden(ldd, copies, tmp_path), capture_output=True,
                            text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    outside = subprocess.run(ldd, capture_output=True, text=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    assert "libxcb.so.1 => not found" in inside.stdout, inside.stdout + inside.stderr
    assert "libxcb.so.1 => /" in outside.stdout  # the host keeps it
    assert all(copy.exists() for copy in copies)


def test_without_a_bundle_it_says_what_to_build(tmp_path):
    result = subprocess.run(
        [sys.executable, str(project.INSTALLER_DIR / "check_linux_bundle.py"),
         "--bundle", str(tmp_path / "nothing"), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "no bundle at" in result.stderr and "installer/build.py" in result.stderr


@pytest.mark.skipif(not BUNDLE_EXE.is_file(),
                    reason=f"no bundle built ({BUNDLE_EXE}): python installer/build.py "
                    "--package none (CI does not build it)")
@pytest.mark.skipif(shutil.which("Xvfb") is None,
                    reason="Xvfb is not installed (apt-get install -y xvfb x11-utils)")
@pytest.mark.skipif(not CAN_HIDE, reason="hiding a library needs root and unshare")
def test_the_built_bundle_starts_on_x11_and_names_a_missing_library(tmp_path):
    out = tmp_path / "check"
    result = subprocess.run(
        [sys.executable, str(project.INSTALLER_DIR / "check_linux_bundle.py"),
         "--bundle", str(BUNDLE_EXE.parent), "--out", str(out), "--timeout", "240"],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[check] all checks passed" in result.stdout
    assert "FAIL" not in result.stdout
    picture = check.look_at(out / "smoke-xcb.png")
    assert not picture.blank, picture.describe()
    for soname in check.HIDDEN_DEFAULT:
        assert f"2. {soname} missing from the system" in result.stdout
