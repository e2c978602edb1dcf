"""The installer files stay consistent with the tree: paths exist, one version, scripts valid.

Fast: nothing here builds the PyInstaller bundle. Where the tools exist, the NSIS script is
compiled against a two-file stand-in payload and the .desktop file is validated.
"""

from __future__ import annotations

import ast
import re
import shutil
import struct
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.installer.installer_modules import ROOT, build, project

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
INSTALLER_TEXT_FILES = [
    project.SPEC_FILE,
    project.NSIS_SCRIPT,
    project.DESKTOP_FILE,
    project.LINUX_INSTALL_SCRIPT,
    project.MACOS_DMG_SCRIPT,
    project.MACOS_ENTITLEMENTS,
]


def test_every_path_the_build_names_exists():
    for name, value in vars(project).items():
        if isinstance(value, Path) and name not in ("BUILD_DIR", "DIST_DIR"):
            assert value.exists(), f"project.{name} -> {value} does not exist"
    for resource in project.BUNDLED_RESOURCES:
        assert (project.RESOURCES_DIR / resource).exists(), resource


def test_version_comes_from_pyproject_only():
    assert project.project_version() == VERSION
    assert project.version_tuple(VERSION)[:3] == tuple(int(p) for p in VERSION.split(".")[:3])
    for path in INSTALLER_TEXT_FILES:
        assert VERSION not in path.read_text(encoding="utf-8"), f"{path} hard-codes {VERSION}"
    quad = ".".join(map(str, project.version_tuple(VERSION)))
    command = build.nsis_command(Path("dist/Hearth"), VERSION)
    assert f"-DVERSION={VERSION}" in command and f"-DVERSION_QUAD={quad}" in command


def test_installed_metadata_matches_pyproject():
    """The frozen app reports the version from the copied package metadata."""
    try:
        installed = metadata.version("hearth")
    except metadata.PackageNotFoundError:
        pytest.skip("hearth is not installed in this environment")
    assert installed == VERSION, "run `pip install -e .` again after changing the version"


def test_spec_is_valid_python_and_uses_the_shared_facts():
    source = project.SPEC_FILE.read_text(encoding="utf-8")
    tree = ast.parse(source)
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert {"Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE"} <= called
    assert "exclude_binaries=True" in source  # one-folder: binaries go to COLLECT, not the exe
    for needed in (
        "project.onnxruntime_binaries()",
        'copy_metadata("hearth")',
        "project.ENTRY_SCRIPT",
        "HEARTH_BUNDLED_MODELS",
        'collect_submodules("app")',
    ):
        assert needed in source, needed


def test_onnxruntime_core_library_is_collected():
    """The known trap: PyInstaller leaves libonnxruntime.so.* out on Linux."""
    binaries = project.onnxruntime_binaries()
    assert any(project.is_onnxruntime_core(src) for src, _ in binaries), binaries
    assert all(dest == "onnxruntime/capi" for _, dest in binaries)
    if sys.platform.startswith("linux"):
        assert any(re.search(r"libonnxruntime\.so\.\d", src) for src, _ in binaries)


def test_entry_script_calls_seed_then_main():
    source = project.ENTRY_SCRIPT.read_text(encoding="utf-8")
    assert source.index("seed_bundled_models()") < source.index("main()")
    from app.__main__ import main  # noqa: F401 - the names it imports exist
    from app.models.bundled import seed_bundled_models  # noqa: F401


def _required_defines(nsi: str) -> set[str]:
    required = set()
    for match in re.finditer(r"!ifndef (\w+)\n\s*!error", nsi):
        required.add(match.group(1))
    return required


def test_nsis_script_gets_every_define_it_requires():
    nsi = project.NSIS_SCRIPT.read_text(encoding="utf-8")
    required = _required_defines(nsi)
    assert {"VERSION", "VERSION_QUAD", "SOURCE_DIR", "ICON_FILE"} <= required
    passed = {
        arg[2:].split("=", 1)[0]
        for arg in build.nsis_command(Path("dist/Hearth"), VERSION)
        if arg.startswith("-D")
    }
    assert required <= passed
    assert "RequestExecutionLevel user" in nsi
    assert "$LOCALAPPDATA\\Hearth" in nsi  # the data folder the uninstaller may keep


@pytest.mark.skipif(shutil.which("makensis") is None, reason="makensis (nsis) not installed")
def test_nsis_script_compiles_with_a_stand_in_payload(tmp_path):
    payload = tmp_path / "Hearth"
    (payload / "_internal").mkdir(parents=True)
    (payload / "Hearth.exe").write_bytes(b"MZ stand-in")
    (payload / "_internal" / "base_library.zip").write_bytes(b"stand-in")
    out = tmp_path / "Hearth-Setup.exe"
    cmd = build.nsis_command(payload, VERSION)
    cmd = [f"-DOUT_FILE={out}" if arg.startswith("-DOUT_FILE=") else arg for arg in cmd]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert out.read_bytes()[:2] == b"MZ"


def test_desktop_file_fields():
    text = project.DESKTOP_FILE.read_text(encoding="utf-8")
    assert text.startswith("[Desktop Entry]\n")
    fields = dict(line.split("=", 1) for line in text.splitlines()[1:] if "=" in line)
    assert fields["Type"] == "Application" and fields["Name"] == "Hearth"
    assert fields["Icon"] == "hearth" and fields["Terminal"] == "false"


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="no desktop-file-utils")
def test_desktop_file_validates():
    result = subprocess.run(
        ["desktop-file-validate", str(project.DESKTOP_FILE)], capture_output=True, text=True
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell script")
def test_linux_install_script_registers_an_absolute_exec(tmp_path):
    folder = tmp_path / "Hearth-x"
    folder.mkdir()
    shutil.copy(project.DESKTOP_FILE, folder / "hearth.desktop")
    shutil.copy(project.ICON_PNG, folder / "hearth.png")
    shutil.copy(project.LINUX_INSTALL_SCRIPT, folder / "install-desktop-entry.sh")
    (folder / "Hearth").write_text("#!/bin/sh\n")
    (folder / "Hearth").chmod(0o755)
    data = tmp_path / "xdg"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_DATA_HOME": str(data)}
    subprocess.run(
        ["sh", str(folder / "install-desktop-entry.sh")], env=env, check=True, capture_output=True
    )
    entry = (data / "applications" / "hearth.desktop").read_text(encoding="utf-8")
    assert f'Exec="{folder}/Hearth"' in entry
    assert (data / "icons" / "hicolor" / "256x256" / "apps" / "hearth.png").is_file()
    if shutil.which("desktop-file-validate"):
        check = subprocess.run(
            ["desktop-file-validate", str(data / "applications" / "hearth.desktop")],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0 and not check.stdout.strip(), check.stdout
    subprocess.run(
        ["sh", str(folder / "install-desktop-entry.sh"), "--uninstall"],
        env=env,
        check=True,
        capture_output=True,
    )
    assert not (data / "applications" / "hearth.desktop").exists()


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_icon_set_is_complete_and_well_formed():
    for png in project.ICON_DIR.glob("hearth-*.png"):
        size = int(png.stem.split("-")[1])
        assert _png_size(png.read_bytes()) == (size, size), png
    ico = project.ICON_ICO.read_bytes()
    reserved, kind, count = struct.unpack("<HHH", ico[:6])
    assert (reserved, kind) == (0, 1) and count >= 4
    sizes = set()
    for i in range(count):
        w, _h, _c, _r, _planes, _bpp, length, offset = struct.unpack(
            "<BBBBHHII", ico[6 + 16 * i : 22 + 16 * i]
        )
        assert offset + length <= len(ico)
        sizes.add(w or 256)
    assert {16, 32, 48, 256} <= sizes
    icns = project.ICON_ICNS.read_bytes()
    assert icns[:4] == b"icns" and struct.unpack(">I", icns[4:8])[0] == len(icns)
    assert len(icns) < 1_000_000 and len(ico) < 200_000
