"""Build Hearth's one-folder bundle for this OS, then its OS package.

    python installer/build.py                    # bundle + package for the current OS
    python installer/build.py --package-only     # repackage an existing dist/Hearth bundle
    python installer/build.py --package windows  # e.g. compile the NSIS script on Linux with
                                                 # the Linux bundle as a stand-in payload

Steps: check prerequisites → convert the starter model into a temporary HEARTH_HOME → run
PyInstaller on installer/hearth.spec (the converted model goes into the bundle) → package:
Windows ``Hearth-Setup-<version>.exe`` (NSIS), macOS ``Hearth-<version>.dmg``, Linux
``Hearth-<version>-linux-<arch>.tar.gz``. Outputs go to dist/, scratch to build/installer/.
"""

from __future__ import annotations

import argparse
import ctypes.util
import os
import shutil
import subprocess
import sys
import tarfile
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import project

sys.path.insert(1, str(project.ROOT))  # this checkout's app package (xcb_install_hint)

PACKAGES = {"win32": "windows", "darwin": "macos"}


class BuildError(RuntimeError):
    """A prerequisite is missing or a step failed; the message says what to do."""


def log(message: str) -> None:
    print(f"[build] {message}", flush=True)


def check_prerequisites(version: str, with_model: bool) -> None:
    """Fail early, with the fix, on what would otherwise fail late."""
    try:
        import PyInstaller  # noqa: F401
    except ImportError as exc:
        raise BuildError(
            "PyInstaller is not installed: run `python -m pip install pyinstaller`."
        ) from exc
    try:
        installed = metadata.version("hearth")
    except metadata.PackageNotFoundError as exc:
        raise BuildError("Hearth is not installed in this Python: run `pip install -e .`.") from exc
    if installed != version:
        raise BuildError(
            f"The installed metadata says {installed} but pyproject.toml says {version}: "
            "run `pip install -e .` again so the bundle reports the right version."
        )
    if sys.platform.startswith("linux"):
        missing = missing_xcb_libraries()
        if missing:
            raise BuildError(
                f"This machine lacks {', '.join(missing)}: the Linux bundle carries them (Qt's "
                f"X11 plugin needs them and minimal installs lack them), so install them "
                f"first with {xcb_install_hint(missing)}."
            )
    if with_model and not any(project.STARTER_WHEEL_DIR.glob("*.whl")):
        raise BuildError(f"No starter wheel in {project.STARTER_WHEEL_DIR}.")


def missing_xcb_libraries(find=ctypes.util.find_library) -> tuple[str, ...]:
    """The sonames of ``project.CARRIED_XCB_LIBRARIES`` that this (Linux) machine lacks."""
    missing = []
    for soname in project.CARRIED_XCB_LIBRARIES:
        name = soname.removeprefix("lib").split(".so")[0]
        if find(name) != soname:
            missing.append(soname)
    return tuple(missing)


def xcb_install_hint(sonames: tuple[str, ...]) -> str:
    """The packages that provide ``sonames`` (app/desktop_libs.py owns the table)."""
    from app.desktop_libs import DEBIAN, FEDORA, packages_for

    debian = " ".join(packages_for(sonames, DEBIAN))
    fedora = " ".join(packages_for(sonames, FEDORA))
    return f"`sudo apt-get install -y {debian}` (Fedora: `sudo dnf install -y {fedora}`)"


def check_bundle_carries_xcb(bundle: Path) -> None:
    """Each library the bundle must carry is in it (PyInstaller only warns when it is not)."""
    present = {path.name for path in bundle.rglob("*.so*")}
    absent = tuple(s for s in project.CARRIED_XCB_LIBRARIES if s not in present)
    if absent:
        raise BuildError(
            f"The bundle {bundle} lacks {', '.join(absent)}, which Qt's X11 plugin needs on "
            f"minimal installs: install them with {xcb_install_hint(absent)} and build again."
        )


def convert_starter(home: Path) -> Path:
    """Convert the starter model into ``home`` (a throwaway HEARTH_HOME); return its models dir."""
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    env = dict(os.environ, HEARTH_HOME=str(home), HEARTH_STARTER_DIR=str(project.STARTER_WHEEL_DIR))
    result = subprocess.run(
        [sys.executable, "-m", "app", "setup-starter"],
        cwd=project.ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    models = home / "models"
    if result.returncode != 0 or not any(models.glob("*/hearth-manifest.json")):
        tail = "\n".join(result.stdout.strip().splitlines()[-5:])
        raise BuildError(f"Converting the starter model failed:\n{tail}")
    for leftover in models.iterdir():  # bundle only complete model folders
        if not (leftover / "hearth-manifest.json").is_file():
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    return models


def run_pyinstaller(models: Path | None) -> Path:
    env = dict(os.environ)
    env.pop("HEARTH_BUNDLED_MODELS", None)
    if models is not None:
        env["HEARTH_BUNDLED_MODELS"] = str(models)
    cmd = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--clean",
        "--log-level",
        "WARN",
        "--distpath",
        str(project.DIST_DIR),
        "--workpath",
        str(project.BUILD_DIR / "pyinstaller"),
        str(project.SPEC_FILE),
    ]
    log(" ".join(cmd))
    if subprocess.run(cmd, cwd=project.ROOT, env=env).returncode != 0:
        raise BuildError("PyInstaller failed (its log is above).")
    return bundle_dir()


def bundle_dir() -> Path:
    if sys.platform == "darwin":
        return project.DIST_DIR / f"{project.APP_NAME}.app"
    return project.DIST_DIR / project.APP_NAME


def package_linux(bundle: Path, version: str) -> Path:
    """A tarball: the bundle, a .desktop file, the icon and a script that registers both."""
    out = project.DIST_DIR / project.installer_name(version, "linux")
    top = f"{project.APP_NAME}-{version}"
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        tar.add(bundle, arcname=top)
        tar.add(project.DESKTOP_FILE, arcname=f"{top}/hearth.desktop")
        tar.add(project.ICON_PNG, arcname=f"{top}/hearth.png")
        tar.add(project.LINUX_INSTALL_SCRIPT, arcname=f"{top}/install-desktop-entry.sh")
    return out


def find_makensis() -> str:
    found = shutil.which("makensis")
    for candidate in (
        found,
        r"C:\Program Files (x86)\NSIS\makensis.exe",
        r"C:\Program Files\NSIS\makensis.exe",
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    raise BuildError(
        "makensis not found: install NSIS 3 (Windows: https://nsis.sourceforge.io or "
        "`winget install NSIS.NSIS`; Debian/Ubuntu: `apt-get install nsis`)."
    )


def nsis_command(bundle: Path, version: str, makensis: str = "makensis") -> list[str]:
    """The makensis command line; every ``-D`` the script requires comes from here."""
    out = project.DIST_DIR / project.installer_name(version, "win32")
    quad = ".".join(str(n) for n in project.version_tuple(version))
    return [
        makensis,
        "-V2",
        "-NOCD",
        f"-DVERSION={version}",
        f"-DVERSION_QUAD={quad}",
        f"-DSOURCE_DIR={bundle}",
        f"-DOUT_FILE={out}",
        f"-DICON_FILE={project.ICON_ICO}",
        f"-DPUBLISHER={project.PUBLISHER}",
        str(project.NSIS_SCRIPT),
    ]


def package_windows(bundle: Path, version: str) -> Path:
    cmd = nsis_command(bundle, version, find_makensis())
    log(" ".join(cmd))
    if subprocess.run(cmd, cwd=project.ROOT).returncode != 0:
        raise BuildError("makensis failed (its log is above).")
    return project.DIST_DIR / project.installer_name(version, "win32")


def package_macos(bundle: Path, version: str) -> Path:
    out = project.DIST_DIR / project.installer_name(version, "darwin")
    cmd = ["bash", str(project.MACOS_DMG_SCRIPT), str(bundle), str(out)]
    log(" ".join(cmd))
    if subprocess.run(cmd, cwd=project.ROOT).returncode != 0:
        raise BuildError("make_dmg.sh failed (its log is above).")
    return out


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--package",
        choices=("linux", "windows", "macos", "none"),
        default=PACKAGES.get(sys.platform, "linux"),
        help="which OS package to make after the bundle (default: this OS)",
    )
    parser.add_argument(
        "--package-only", action="store_true", help="package the existing dist bundle"
    )
    parser.add_argument("--no-model", action="store_true", help="bundle without the starter")
    args = parser.parse_args(argv)
    version = project.project_version()
    started = time.monotonic()
    try:
        bundle = bundle_dir()
        if not args.package_only:
            check_prerequisites(version, with_model=not args.no_model)
            models = None
            if not args.no_model:
                log("converting the starter model")
                models = convert_starter(project.BUILD_DIR / "home")
            log(f"bundling Hearth {version} with PyInstaller (several minutes)")
            bundle = run_pyinstaller(models)
            if sys.platform.startswith("linux"):
                check_bundle_carries_xcb(bundle)
            log(
                f"bundle: {bundle} ({du(bundle) / 2**20:.0f} MiB) after "
                f"{time.monotonic() - started:.0f} s"
            )
        elif not bundle.exists():
            raise BuildError(f"No bundle at {bundle}: run without --package-only first.")
        if args.package != "none":
            maker = {"linux": package_linux, "windows": package_windows, "macos": package_macos}
            out = maker[args.package](bundle, version)
            log(f"{args.package} package: {out} ({du(out) / 2**20:.0f} MiB)")
    except BuildError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    log(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
