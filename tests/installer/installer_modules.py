"""installer/'s modules for the installer tests: ``project`` and ``check_linux_bundle``
(imported from installer/) and ``build`` (installer/build.py, loaded under its own name:
"build" is also a PyPI package, pypa/build), each loaded once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "installer"))

import check_linux_bundle  # noqa: E402
import project  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "hearth_installer_build", project.INSTALLER_DIR / "build.py"
)
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

__all__ = ["ROOT", "build", "check_linux_bundle", "project"]
