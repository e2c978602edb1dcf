"""app.models.bundled: the frozen app installs the models its bundle carries, once, through
the model library (app.resources finds them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import paths, resources
from app.models import bundled

BIG = 2 << 20  # above the hard-link threshold


@pytest.fixture
def bundle(tmp_path, monkeypatch) -> Path:
    """A bundle resources/models folder with one complete model and one incomplete folder."""
    root = tmp_path / "bundle" / "models"
    model = root / "starter-x"
    (model / "onnx").mkdir(parents=True)
    (model / "hearth-manifest.json").write_text(json.dumps({"id": "starter-x"}))
    (model / "genai_config.json").write_text("{}")
    (model / "onnx" / "model.onnx.data").write_bytes(b"\x01" * BIG)
    (root / "half-done").mkdir()  # no manifest: never installed
    monkeypatch.setattr(resources, "bundled_models_dir", lambda: root)
    return root


def test_source_tree_resources_dir_holds_the_catalog_and_icons():
    assert (resources.resources_dir() / "catalog.json").is_file()
    icon = resources.app_icon_path(40)
    assert icon is not None and icon.name == "hearth-48.png"
    assert resources.bundled_models() == {}  # a source tree bundles no model


def test_seed_installs_once_and_respects_removal(bundle):
    installed = bundled.seed_bundled_models()
    target = paths.models_dir() / "starter-x"
    assert installed == [target]
    assert not (paths.models_dir() / "half-done").exists()
    big = target / "onnx" / "model.onnx.data"
    assert big.read_bytes() == (bundle / "starter-x" / "onnx" / "model.onnx.data").read_bytes()
    assert big.stat().st_nlink == 2  # hard-linked: same volume, no second copy
    assert (target / "genai_config.json").stat().st_nlink == 1  # small files are copied
    assert list(paths.staging_dir().iterdir()) == []

    assert bundled.seed_bundled_models() == []  # second start: nothing to do
    import shutil

    shutil.rmtree(target)  # the user removed the starter
    assert bundled.seed_bundled_models() == []
    assert not target.exists()
    # ... and asks for it again (the "Set up the starter model" button).
    assert bundled.install_bundled_model("starter-x") == target
    assert (target / "hearth-manifest.json").is_file()


def test_install_replaces_an_incomplete_leftover(bundle):
    leftover = paths.models_dir() / "starter-x"
    leftover.mkdir(parents=True)
    (leftover / "junk").write_text("partial")
    assert bundled.install_bundled_model("starter-x") == leftover
    assert not (leftover / "junk").exists()
    assert bundled.install_bundled_model("nope") is None


def test_seed_never_raises_when_the_disk_refuses(bundle, monkeypatch, capsys):
    def refuse(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bundled, "_link_or_copy_tree", refuse)
    assert bundled.seed_bundled_models() == []
    assert "No space left" in capsys.readouterr().err
    assert not (paths.models_dir() / "starter-x").exists()
    monkeypatch.undo()
