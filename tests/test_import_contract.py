"""The import contract (pyproject.toml ``[tool.importlinter]``, docs/ARCHITECTURE.md "Layers").

import-linter reads every import in ``app/`` (inside functions and under ``TYPE_CHECKING``
too) and checks the contracts: imports point down the layers, only ``app.ui`` and
``app.workers`` import Qt, the engine reaches no Qt even through another module, and no
package's modules import each other in a cycle.
"""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from importlinter.application.use_cases import read_user_options
from importlinter.configuration import configure

import app

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"
QT_PACKAGES = {"ui", "workers"}  # the only ones that may import PySide6
LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))"
)


def lint(root: Path) -> subprocess.CompletedProcess:
    """import-linter over the ``app`` package under ``root``, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-c", LINT], cwd=root, env={"PYTHONPATH": str(root), "PATH": ""},
        capture_output=True, text=True, timeout=120,
    )


def contracts() -> dict[str, dict]:
    configure()  # import-linter's readers (its command line does this first)
    return {c["id"]: c for c in read_user_options(str(CONFIG)).contracts_options}


def test_the_package_checked_is_this_tree():
    assert Path(app.__file__).resolve().is_relative_to(ROOT / "app")


def test_imports_follow_the_contract():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


def test_every_module_of_app_has_a_layer_and_only_ui_and_workers_may_import_qt():
    children = {m.name for m in pkgutil.iter_modules(app.__path__)} - {"__main__"}
    layers = contracts()["layers"]["layers"]
    placed = {name.strip() for layer in layers for name in layer.replace("|", ":").split(":")}
    assert children == placed  # a new module needs a place in the layers
    qt = contracts()["qt"]
    assert set(qt["source_modules"]) == {f"app.{name}" for name in children - QT_PACKAGES}
    assert "PySide6" in qt["forbidden_modules"]


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # an upward import hidden inside a function
        ("engine/sampling.py", "from app.models import library", "app.engine is not allowed"),
        ("settings.py", "from app.engine import types", "app.settings is not allowed"),
        ("models/hub.py", "import PySide6.QtCore", "only app.ui and app.workers import Qt"),
        ("models/downloader.py", "from app.models.library import ModelLibrary",
         "No cycles are allowed in app.models"),
    ],
)
def test_the_check_fails_on_an_import_that_breaks_the_contract(tmp_path, module, line, broken):
    shutil.copytree(ROOT / "app", tmp_path / "app", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(CONFIG, tmp_path / "pyproject.toml")
    with open(tmp_path / "app" / module, "a", encoding="utf-8") as handle:
        handle.write(f"\n\ndef _hidden_edge():\n    {line}\n")
    result = lint(tmp_path)
    assert result.returncode != 0
    assert broken in result.stdout
