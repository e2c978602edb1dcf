"""Check the frozen Linux bundle on a real X server (Xvfb), the way a user starts it.

    python installer/check_linux_bundle.py                 # checks dist/Hearth
    python installer/check_linux_bundle.py --bundle DIR --out DIR

Needs a built bundle (``python installer/build.py --package none``), ``Xvfb`` and, for the
missing-library check, root and ``unshare`` (util-linux). ``xwininfo`` (x11-utils) is used
when present to see the window on the X server. Debian: ``apt-get install -y xvfb x11-utils``.

1. **Start on X11**: ``Hearth --smoke-test OUT.png`` with ``QT_QPA_PLATFORM=xcb`` on a fresh
   Xvfb display, a minimal environment (no Python on the PATH, nothing inherited) and a fresh
   ``HEARTH_HOME``: exit code 0, a mapped "Hearth" window on the display, a screenshot that is
   not blank, and no Qt platform-plugin complaint on stderr.
2. **A missing X library**, for each of ``libxcb-icccm.so.4`` (minimal Debian 12 installs
   lack it; the bundle carries it) and ``libxcb.so.1`` (the bundle leaves it to the system):
   hidden in a private mount namespace when the system has it (the host keeps it).
   If the bundle carries the library, the smoke test must still pass; otherwise
   ``Hearth --check-desktop-libs`` and a plain ``Hearth`` start must name the library and
   the command that installs it and exit with Hearth's error code 2, not Qt's abort.

Prints one line per check; exit code 0 when all pass, 1 when one fails, 2 when a
prerequisite is missing (the line says which).
"""

from __future__ import annotations

import argparse
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import project

from app.desktop_libs import DEBIAN, distro_family, package_for, read_os_release

# One library the bundle carries (a minimal Debian 12 lacks it) and one it leaves to the system.
HIDDEN_DEFAULT = ("libxcb-icccm.so.4", "libxcb.so.1")
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
            "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu")
# What Qt prints when its platform plugin cannot start (any of these on stderr fails check 1).
QT_PLUGIN_ERRORS = re.compile(
    r"qt\.qpa\.plugin|qt\.qpa\.xcb|platform plugin|Cannot load library|could not connect to "
    r"display|This application failed to start|Aborted|core dumped",
    re.IGNORECASE,
)
SCREEN = "1280x800x24"


class Prerequisite(RuntimeError):
    """Something the check needs is not here; the message says what to install or build."""


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        print(f"[check] {'ok  ' if ok else 'FAIL'} {what}{f': {detail}' if detail else ''}",
              flush=True)
        if not ok:
            self.failures.append(what)
        return ok


def say(message: str) -> None:
    print(f"[check] {message}", flush=True)


# --- The X server -------------------------------------------------------------------------

class Xvfb:
    """A private Xvfb on the first free display (``-displayfd``), stopped on exit."""

    def __init__(self, xvfb: str) -> None:
        self.xvfb = xvfb
        self.display = ""
        self.started_s = 0.0
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> Xvfb:
        started = time.monotonic()
        read, write = os.pipe()
        self._proc = subprocess.Popen(
            [self.xvfb, "-displayfd", str(write), "-screen", "0", SCREEN, "-nolisten", "tcp"],
            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        os.close(write)
        number = b""
        deadline = time.monotonic() + 30
        while not number.endswith(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([read], [], [], 0.5)
            if ready:
                chunk = os.read(read, 16)
                if not chunk:
                    break
                number += chunk
        os.close(read)
        if not number.strip().isdigit():
            self.__exit__(None, None, None)
            raise Prerequisite(f"Xvfb did not start (it said: {self._stderr()})")
        self.display = f":{number.strip().decode()}"
        self.started_s = time.monotonic() - started
        return self

    def _stderr(self) -> str:
        if self._proc is None or self._proc.stderr is None:
            return ""
        try:
            _, err = self._proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            return ""
        return err.decode(errors="replace").strip()[-300:]

    def __exit__(self, *exc) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def mapped_windows(display: str, title: str) -> list[str]:
    """Ids of the viewable top-level windows named ``title`` on ``display`` (needs xwininfo)."""
    xwininfo = shutil.which("xwininfo")
    if xwininfo is None:
        return []
    env = {"PATH": "/usr/bin:/bin", "DISPLAY": display}
    try:
        tree = subprocess.run([xwininfo, "-root", "-tree"], env=env, capture_output=True,
                              text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = []
    for wid in re.findall(rf'^\s*(0x[0-9a-f]+) "{re.escape(title)}"', tree, re.MULTILINE):
        info = subprocess.run([xwininfo, "-id", wid], env=env, capture_output=True, text=True,
                              timeout=10).stdout
        if "IsViewable" in info:
            found.append(wid)
    return found


# --- Runs ---------------------------------------------------------------------------------

@dataclass
class Run:
    rc: int | None
    stdout: str
    stderr: str
    wall_s: float
    window_s: float | None  # when the window was first seen mapped on the X server
    xmessage_seen: bool = False


def user_env(display: str, root: Path) -> dict[str, str]:
    """What a user's session gives the app, and nothing from this Python or this shell."""
    runtime = root / "runtime"
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),
        "HEARTH_HOME": str(root / "hearth"),
        "DISPLAY": display,
        "XDG_RUNTIME_DIR": str(runtime),
        "LANG": "C.UTF-8",
    }


def run_app(cmd: list[str], env: dict[str, str], timeout_s: float, watch: str | None) -> Run:
    """Run ``cmd``; when ``watch`` is a display, note when the Hearth window is mapped there."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    out: list[str] = []
    err: list[str] = []
    readers = [threading.Thread(target=lambda s=s, b=b: b.extend(s), daemon=True)
               for s, b in ((proc.stdout, out), (proc.stderr, err))]
    for reader in readers:
        reader.start()
    window_s = None
    xmessage = False
    while proc.poll() is None and time.monotonic() - started < timeout_s:
        if watch:
            if window_s is None and mapped_windows(watch, project.APP_NAME):
                window_s = time.monotonic() - started
            xmessage = xmessage or bool(mapped_windows(watch, "xmessage"))
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    wall = time.monotonic() - started
    if watch:
        xmessage = xmessage or bool(mapped_windows(watch, "xmessage"))
    for reader in readers:
        reader.join(timeout=10)
    rc = proc.returncode if wall < timeout_s else None
    return Run(rc, "".join(out), "".join(err), wall, window_s, xmessage)


def hidden(cmd: list[str], libs: list[Path], work: Path) -> list[str]:
    """``cmd`` in a private mount namespace where ``libs`` are gone from their folders.

    Each folder is replaced (for this process tree only) by a folder of symlinks to every
    entry of the original except the hidden ones, so the loader's cache points at a missing
    file and the search of the default folders finds nothing: ldd says "not found", as on
    a system without the package."""
    script = []
    args: list[str] = []
    for index, folder in enumerate(sorted({lib.parent for lib in libs})):
        names = {lib.name for lib in libs if lib.parent == folder}
        original, farm = work / f"orig{index}", work / f"farm{index}"
        original.mkdir()
        farm.mkdir()
        for entry in os.listdir(folder):
            if entry not in names:
                (farm / entry).symlink_to(original / entry)
        n = len(args)
        first, second, third = (f'"${{{n + k}}}"' for k in (1, 2, 3))
        script.append(f"mount --bind {first} {second} && mount --bind {third} {first}")
        args += [str(folder), str(original), str(farm)]
    shift = len(args)
    body = " && ".join([*script, f"shift {shift}", 'exec "$@"'])
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", body, "sh",
            *args, *cmd]


def system_copies(soname: str) -> list[Path]:
    """Every file or link named ``soname`` (or ``soname.*``) in the system library folders,
    real folders only (``/lib`` is often a link to ``/usr/lib``)."""
    found = {
        folder.resolve() / entry.name
        for folder in map(Path, LIB_DIRS)
        if folder.is_dir()
        for entry in folder.glob(f"{soname}*")
    }
    return sorted(found)


def bundle_carries(bundle: Path, soname: str) -> list[Path]:
    return sorted(p for p in bundle.rglob(f"{soname}*") if p.is_file())


# --- The screenshot -----------------------------------------------------------------------

def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of RGB(A) pixels of an 8-bit, non-interlaced PNG (what Qt
    writes), with the filters undone. Plain Python: this check needs nothing installed."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError(f"{path} has no PNG header")
    width, height = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    depth, color, interlace = header[8], header[9], header[12]
    channels = {2: 3, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace:
        raise ValueError(f"{path}: PNG depth {depth}, color type {color}, interlace {interlace}")
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line if channels == 3 else _drop_alpha(line)))
        previous = line
    return width, height, rows


def _drop_alpha(line: bytearray) -> bytearray:
    out = bytearray(len(line) // 4 * 3)
    out[0::3], out[1::3], out[2::3] = line[0::4], line[1::4], line[2::4]
    return out


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    colors: int  # distinct RGB colours
    background: float  # share of pixels that have the most common colour

    @property
    def blank(self) -> bool:
        return self.colors < 16 or self.background > 0.98

    def describe(self) -> str:
        return (f"{self.width}x{self.height}, {self.colors} colours, "
                f"{(1 - self.background) * 100:.0f}% of pixels off the background colour")


def look_at(path: Path) -> Picture:
    width, height, rows = read_png(path)
    counts: dict[bytes, int] = {}
    for row in rows:
        for i in range(0, len(row), 3):
            pixel = row[i:i + 3]
            counts[pixel] = counts.get(pixel, 0) + 1
    total = max(1, width * height)
    return Picture(width, height, len(counts), max(counts.values(), default=0) / total)


# --- The checks ---------------------------------------------------------------------------

def check_start(report: Report, exe: Path, display: str, out: Path, timeout_s: float) -> None:
    say(f"1. start on X11: {exe} --smoke-test under Xvfb {display}, QT_QPA_PLATFORM=xcb, "
        "fresh HEARTH_HOME, minimal environment")
    root = Path(tempfile.mkdtemp(prefix="start-", dir=out))
    env = {**user_env(display, root), "QT_QPA_PLATFORM": "xcb"}
    shot = out / "smoke-xcb.png"
    shot.unlink(missing_ok=True)
    run = run_app([str(exe), "--smoke-test", str(shot)], env, timeout_s, watch=display)
    timing = f"{run.wall_s:.1f} s"
    if run.window_s is not None:
        timing += f", window mapped on the X server after {run.window_s:.1f} s"
    report.check(run.rc == 0, "exit code 0", f"got {run.rc} after {timing}"
                 + ("" if run.rc == 0 else f"\n--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"))
    for line in run.stdout.splitlines():
        if line.startswith(("smoke-test: loaded", "reply:", "stats:")):
            say(f"   {line[:200]}")
    if shutil.which("xwininfo"):
        report.check(run.window_s is not None, "a viewable 'Hearth' window on the X server")
    else:
        say("   (xwininfo missing: not looking for the window on the X server; "
            "apt-get install x11-utils)")
    complaints = [line for line in run.stderr.splitlines() if QT_PLUGIN_ERRORS.search(line)]
    report.check(not complaints, "no Qt platform-plugin error on stderr",
                 "; ".join(complaints[:5]) or f"{len(run.stderr.splitlines())} stderr lines")
    if not shot.is_file():
        report.check(False, "screenshot written", str(shot))
        return
    picture = look_at(shot)
    report.check(not picture.blank, "screenshot is not blank", f"{shot}: {picture.describe()}")


def check_missing_library(
    report: Report, exe: Path, bundle: Path, display: str, out: Path, soname: str,
    timeout_s: float,
) -> None:
    say(f"2. {soname} missing from the system")
    carried = bundle_carries(bundle, soname)
    system = system_copies(soname)
    work = Path(tempfile.mkdtemp(prefix="hide-", dir=out))
    if system:
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            raise Prerequisite(f"hiding {soname} needs root and unshare (util-linux); the "
                               f"system has {', '.join(map(str, system))}")
        say(f"   hiding {', '.join(map(str, system))} in a private mount namespace")
    else:
        say(f"   the system has no {soname}: nothing to hide")

    def run(args: list[str], env: dict[str, str], watch: str | None) -> Run:
        cmd = [str(exe), *args]
        if system:
            cmd = hidden(cmd, system, Path(tempfile.mkdtemp(prefix="ns-", dir=work)))
        return run_app(cmd, env, timeout_s, watch)

    if carried:
        say(f"   the bundle carries it ({carried[0].relative_to(bundle)}): it must still start")
        env = {**user_env(display, Path(tempfile.mkdtemp(dir=work))), "QT_QPA_PLATFORM": "xcb"}
        result = run(["--smoke-test", str(out / "smoke-hidden.png")], env, display)
        report.check(result.rc == 0, "starts without the system library",
                     f"exit code {result.rc}\n{result.stderr[-800:]}" if result.rc
                     else f"{result.wall_s:.1f} s")
        if shutil.which("xwininfo"):
            report.check(result.window_s is not None, "its window is on the X server")
        return

    # The bundle declares it: the check and a plain start name it and the install command.
    debian = distro_family(read_os_release()) == DEBIAN
    env = user_env(display, Path(tempfile.mkdtemp(dir=work)))
    probe = run(["--check-desktop-libs"], env, None)
    say(f"   Hearth --check-desktop-libs -> {probe.rc}: {probe.stdout.strip()[:300]}")
    report.check(probe.rc == 1 and soname in probe.stdout,
                 "--check-desktop-libs names the library (exit code 1)", f"exit code {probe.rc}")
    if debian:
        report.check("apt-get install -y" in probe.stdout and package_for(soname, DEBIAN)
                     in probe.stdout, "--check-desktop-libs gives the apt-get command")

    env = user_env(display, Path(tempfile.mkdtemp(dir=work)))  # fresh: no cached verdict
    start = run([], env, display)
    said = start.stderr.strip()
    say(f"   Hearth (plain start) -> {start.rc} after {start.wall_s:.1f} s: {said[-400:]}")
    report.check(start.rc == 2, "a plain start exits with Hearth's error code 2, not Qt's abort",
                 f"exit code {start.rc}" + (" (timed out)" if start.rc is None else ""))
    report.check(soname in said and "Hearth cannot open its window" in said,
                 "its stderr names the missing library")
    if debian:
        report.check(f"sudo apt-get install -y {package_for(soname, DEBIAN)}" in said,
                     "its stderr gives the install command")
    report.check(start.window_s is None, "no Hearth window was opened")
    if shutil.which("xmessage"):  # xmessage itself may need the hidden library: no check
        say(f"   the message appeared as an xmessage box too: {start.xmessage_seen}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=project.DIST_DIR / project.APP_NAME)
    parser.add_argument("--out", type=Path, default=project.BUILD_DIR / "bundle-check",
                        help="screenshots and scratch data folders (default: %(default)s)")
    parser.add_argument("--hide", action="append", metavar="SONAME",
                        help="a library to take away, one start each (default: "
                        f"{' and '.join(HIDDEN_DEFAULT)})")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per start")
    args = parser.parse_args(argv)
    exe = args.bundle / project.APP_NAME
    report = Report()
    try:
        if not sys.platform.startswith("linux"):
            raise Prerequisite("this check is for the Linux bundle")
        if not os.access(exe, os.X_OK):
            raise Prerequisite(f"no bundle at {exe}: run `python installer/build.py --package "
                               "none` first")
        xvfb = shutil.which("Xvfb")
        if xvfb is None:
            raise Prerequisite("Xvfb is not installed (Debian: apt-get install -y xvfb x11-utils)")
        if args.out.exists():
            shutil.rmtree(args.out)
        args.out.mkdir(parents=True)
        out = args.out.resolve()
        with Xvfb(xvfb) as server:
            say(f"Xvfb {server.display} ({SCREEN}) up in {server.started_s:.2f} s")
            check_start(report, exe.resolve(), server.display, out, args.timeout)
        for soname in args.hide or HIDDEN_DEFAULT:
            with Xvfb(xvfb) as server:  # a fresh display: nothing left from the last start
                check_missing_library(report, exe.resolve(), args.bundle.resolve(),
                                      server.display, out, soname, args.timeout)
    except Prerequisite as exc:
        print(f"[check] cannot check: {exc}", file=sys.stderr)
        return 2
    if report.failures:
        say(f"{len(report.failures)} check(s) failed: {'; '.join(report.failures)}")
        return 1
    say("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
