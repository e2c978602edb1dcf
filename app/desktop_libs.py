"""Before Qt starts on Linux/X11: are the system libraries of Qt's xcb platform plugin there?

Minimal installs lack some (Debian 12: ``libxcb-icccm4``, ``libxcb-keysyms1``), and Qt then
aborts with a message that blames ``libxcb-cursor0``. This module asks the dynamic loader
(``ldd`` on ``PySide6/Qt/plugins/platforms/libqxcb.so``) what is really missing, maps the
sonames to Debian and Fedora package names and says which command installs them.

Plain Python, no Qt. A good answer is cached per PySide6 build and loader cache
(``cache_dir()/qt-xcb-check.json``), so a normal start costs two ``stat`` calls; a bad
answer is never cached, so installing the packages takes effect at the next start.

``python -m app.desktop_libs`` prints the report; ``--install-command`` prints only the
command (empty when nothing is missing), for ``scripts/run.sh`` and the bundle's launcher.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.errors import HearthError
from app.fileio import write_json_atomic

CACHE_NAME = "qt-xcb-check.json"
LD_CACHE = Path("/etc/ld.so.cache")
PLUGIN = Path("Qt") / "plugins" / "platforms" / "libqxcb.so"
_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$", re.MULTILINE)

# soname -> (Debian/Ubuntu package, Fedora package), for what Qt's xcb plugin links.
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libGLX.so.0": ("libglx0", "libglvnd-glx"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libSM.so.6": ("libsm6", "libSM"),
    "libICE.so.6": ("libice6", "libICE"),
}
DEBIAN, FEDORA = "debian", "fedora"
_INSTALLERS = {DEBIAN: "apt-get install -y", FEDORA: "dnf install -y"}


class MissingDesktopLibrariesError(HearthError):
    """Qt's X11 platform plugin cannot load: system libraries are missing."""


@dataclass(frozen=True)
class XcbReport:
    """What the loader said about the xcb plugin."""

    plugin: Path
    missing: tuple[str, ...]  # sonames, in ldd's order
    family: str | None  # DEBIAN, FEDORA or None (unknown distribution)

    @property
    def ok(self) -> bool:
        return not self.missing

    @property
    def packages(self) -> tuple[str, ...]:
        return packages_for(self.missing, self.family)

    @property
    def install_command(self) -> str | None:
        """The command (without sudo) that installs the packages; None when unknown."""
        if self.ok or self.family not in _INSTALLERS:
            return None
        return f"{_INSTALLERS[self.family]} {' '.join(self.packages)}"

    def message(self) -> str:
        libs = ", ".join(self.missing)
        text = (
            f"Hearth cannot open its window: Qt's X11 plugin ({self.plugin.name}) needs system "
            f"libraries that are not installed: {libs}."
        )
        if self.install_command:
            return f"{text} Install them with: sudo {self.install_command}"
        debian = " ".join(packages_for(self.missing, DEBIAN))
        fedora = " ".join(packages_for(self.missing, FEDORA))
        return (
            f"{text} Install the packages that provide them (Debian/Ubuntu: {debian}; "
            f"Fedora: {fedora})."
        )

    def error(self) -> MissingDesktopLibrariesError:
        return MissingDesktopLibrariesError(
            self.message(),
            hint="Or start it on Wayland (QT_QPA_PLATFORM=wayland) if your desktop has it.",
        )


def parse_ldd(output: str) -> tuple[str, ...]:
    """The sonames ldd reported as "not found", each once, in order."""
    seen: dict[str, None] = {}
    for match in _NOT_FOUND.finditer(output):
        seen.setdefault(match.group(1), None)
    return tuple(seen)


def package_for(soname: str, family: str | None) -> str:
    known = PACKAGES.get(soname)
    if known is not None:
        return known[0] if family == DEBIAN else known[1] if family == FEDORA else known[0]
    stem = re.match(r"^lib(xcb-[\w-]+)\.so\.(\d+)$", soname)
    if stem and family == DEBIAN:  # the libxcb-*N naming rule
        return f"lib{stem.group(1)}{stem.group(2)}"
    return soname


def packages_for(sonames: tuple[str, ...], family: str | None) -> tuple[str, ...]:
    packages: dict[str, None] = {}
    for soname in sonames:
        packages.setdefault(package_for(soname, family), None)
    return tuple(packages)


def distro_family(os_release: str) -> str | None:
    """DEBIAN or FEDORA from the text of /etc/os-release (its ID and ID_LIKE)."""
    ids: set[str] = set()
    for line in os_release.splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            ids.update(value.strip().strip("\"'").lower().split())
    if ids & {"debian", "ubuntu"}:
        return DEBIAN
    if ids & {"fedora", "rhel", "centos"}:
        return FEDORA
    return None


def platform_will_be_xcb(
    env: Mapping[str, str] | None = None, system: str | None = None
) -> bool:
    """Whether Qt would pick its xcb platform here (Linux, not offscreen/Wayland/minimal)."""
    env = os.environ if env is None else env
    system = sys.platform if system is None else system
    if not system.startswith("linux"):
        return False
    requested = env.get("QT_QPA_PLATFORM", "").strip()
    if requested:
        first = requested.split(";")[0].split(":")[0].strip().lower()
        if first == "wayland" or first.startswith("wayland-"):
            return not env.get("WAYLAND_DISPLAY")  # Qt falls back to the next one, often xcb
        return first == "xcb"
    wayland_session = env.get("XDG_SESSION_TYPE", "").lower() == "wayland"
    return not (wayland_session and env.get("WAYLAND_DISPLAY"))


def find_plugin() -> Path | None:
    """PySide6's libqxcb.so (also inside a PyInstaller bundle), or None."""
    candidates = []
    if getattr(sys, "frozen", False):
        base = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent))
        candidates.append(base / "PySide6" / PLUGIN)
    spec = importlib.util.find_spec("PySide6")
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / PLUGIN for p in spec.submodule_search_locations]
    return next((c for c in candidates if c.is_file()), None)


def run_ldd(plugin: Path) -> str | None:
    """ldd's output for ``plugin``; None when ldd is not available."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    try:
        result = subprocess.run(
            [ldd, str(plugin)],
            capture_output=True,
            text=True,
            timeout=20,
            env={**os.environ, "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout + result.stderr


def _cache_key(plugin: Path) -> str:
    try:
        from importlib.metadata import version

        pyside = version("PySide6-Essentials")
    except Exception:
        pyside = "?"
    stat = plugin.stat()
    try:
        loader = LD_CACHE.stat().st_mtime_ns
    except OSError:
        loader = 0
    return f"PySide6 {pyside}|{plugin}|{stat.st_size}|{stat.st_mtime_ns}|{loader}"


def read_os_release() -> str:
    """The text of os-release (empty where there is none)."""
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return ""


def check_xcb(
    cache_dir: Path | None = None,
    *,
    plugin: Path | None = None,
    ldd: Callable[[Path], str | None] = run_ldd,
) -> XcbReport | None:
    """The loader's verdict on the xcb plugin; None when it cannot be told (no plugin, no
    ldd). A good verdict is cached in ``cache_dir`` and then ldd is not run again."""
    plugin = plugin or find_plugin()
    if plugin is None:
        return None
    cache = cache_dir / CACHE_NAME if cache_dir is not None else None
    key = _cache_key(plugin)
    if cache is not None:
        try:
            if json.loads(cache.read_text(encoding="utf-8")).get("ok_for") == key:
                return XcbReport(plugin, (), None)
        except (OSError, ValueError, AttributeError):
            pass
    output = ldd(plugin)
    if output is None:
        return None
    report = XcbReport(plugin, parse_ldd(output), distro_family(read_os_release()))
    if report.ok and cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(cache, {"ok_for": key})
        except OSError:
            pass  # a read-only cache only costs the next start one ldd run
    return report


def check_before_qt(cache_dir: Path | None = None) -> XcbReport | None:
    """The launch-time check: a report with missing libraries, or None (fine / not xcb)."""
    if not platform_will_be_xcb():
        return None
    if cache_dir is None:
        from app.paths import cache_dir as default_cache_dir

        cache_dir = default_cache_dir()
    report = check_xcb(cache_dir)
    return None if report is None or report.ok else report


def tell_user(message: str) -> None:
    """Best effort for launches without a terminal: a desktop notification or a plain X
    dialog (neither needs Qt's missing libraries)."""
    if sys.stderr is not None and sys.stderr.isatty():
        return
    for command in (
        ["notify-send", "--urgency=critical", "Hearth cannot start", message],
        ["xmessage", "-center", message],
    ):
        if shutil.which(command[0]):
            try:
                subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except OSError:
                continue
            return


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    report = check_before_qt() if "--force" not in args else check_xcb()
    if "--install-command" in args:
        if report is not None and not report.ok and report.install_command:
            print(report.install_command)
        return 0
    if report is None or report.ok:
        print("Qt's X11 plugin has every library it needs (or this start will not use X11).")
        return 0
    print(report.message())
    return 1


if __name__ == "__main__":
    sys.exit(main())
