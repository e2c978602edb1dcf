"""The Linux bundle carries the X11 libraries minimal installs lack: build.py requires them on
the build machine and finds them in the bundle after PyInstaller (which only warns)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from app.desktop_libs import PACKAGES, find_plugin
from tests.installer.installer_modules import build, project


def test_the_carried_libraries_are_what_qts_x11_plugin_links():
    assert set(project.CARRIED_XCB_LIBRARIES) <= set(PACKAGES)  # install hints exist
    plugin = find_plugin()
    if plugin is None or not sys.platform.startswith("linux"):
        pytest.skip("no PySide6 xcb plugin here")
    linked = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True,
                            timeout=60).stdout
    names = set(re.findall(r"^\s*(\S+\.so[.\d]*)\s", linked, re.MULTILINE))
    assert set(project.CARRIED_XCB_LIBRARIES) <= names


def test_the_build_machine_must_have_them():
    have = {"xcb-icccm": "libxcb-icccm.so.4", "xcb-cursor": "libxcb-cursor.so.0",
            "xcb-image": "libxcb-image.so.0", "xcb-render-util": "libxcb-render-util.so.0",
            "xcb-util": "libxcb-util.so.1", "xkbcommon-x11": "libxkbcommon-x11.so.0"}
    assert build.missing_xcb_libraries(have.get) == ("libxcb-keysyms.so.1",)
    assert build.missing_xcb_libraries({**have, "xcb-keysyms": "libxcb-keysyms.so.1"}.get) == ()
    assert build.missing_xcb_libraries({**have, "xcb-keysyms": "libxcb-keysyms.so.2"}.get) == (
        "libxcb-keysyms.so.1",  # another soname is another ABI
    )


def test_a_bundle_without_them_fails_the_build_with_the_command(tmp_path):
    bundle = tmp_path / "Hearth"
    lib = bundle / "_internal"
    lib.mkdir(parents=True)
    for soname in project.CARRIED_XCB_LIBRARIES:
        if soname not in ("libxcb-icccm.so.4", "libxcb-keysyms.so.1"):
            (lib / soname).write_bytes(b"\x7fELF")
    with pytest.raises(build.BuildError) as caught:
        build.check_bundle_carries_xcb(bundle)
    message = str(caught.value)
    assert f"The bundle {bundle} lacks libxcb-icccm.so.4, libxcb-keysyms.so.1" in message
    assert "sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1" in message
    assert "sudo dnf install -y xcb-util-wm xcb-util-keysyms" in message

    (lib / "libxcb-icccm.so.4").write_bytes(b"\x7fELF")
    (lib / "libxcb-keysyms.so.1").write_bytes(b"\x7fELF")
    build.check_bundle_carries_xcb(bundle)  # complete: no error
