"""The installed-model store: atomic installs, listing, removal, in-place imports, default."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app import paths
from app.errors import HearthError, ModelLoadError
from app.models import store as store_module
from app.models.store import MANIFEST_NAME, ModelStore, slugify
from tests.fixtures.tiny_models import build_gqa_model, build_plain_kv_model


def staged(name: str, files: dict[str, bytes]) -> Path:
    folder = paths.staging_dir() / name
    folder.mkdir(parents=True)
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return folder


def manifest(model_id: str, **extra) -> dict:
    return {
        "id": model_id,
        "name": model_id.title(),
        "source": {
            "kind": "hub",
            "repo": "o/r",
            "revision": "a" * 40,
            "variant": "cpu",
            "path": None,
        },
        "format": "optimum",
        "files": [],
        "context_length": 512,
        "parameters": 1,
        **extra,
    }


def test_install_from_staging_moves_the_folder_and_writes_the_manifest():
    store = ModelStore()
    folder = staged("m1", {"config.json": b"{}", "onnx/model.onnx": b"x" * 1000})
    model = store.install_from_staging(folder, manifest("m1"))
    assert not folder.exists()
    assert model.path == store.root / "m1" and model.id == "m1" and model.name == "M1"
    assert (model.path / "onnx/model.onnx").stat().st_size == 1000
    written = json.loads((model.path / MANIFEST_NAME).read_text())
    assert written["source"]["repo"] == "o/r" and written["installed_at"]
    assert model.size_on_disk == 1002 + (model.path / MANIFEST_NAME).stat().st_size


def test_install_refuses_to_overwrite_and_leaves_both_folders_alone():
    store = ModelStore()
    store.install_from_staging(staged("a", {"f": b"old"}), manifest("dup"))
    second = staged("b", {"f": b"new"})
    with pytest.raises(HearthError, match="already installed"):
        store.install_from_staging(second, manifest("dup"))
    assert (store.root / "dup" / "f").read_bytes() == b"old"
    assert (second / "f").read_bytes() == b"new"


def test_install_rejects_an_unsafe_id():
    with pytest.raises(HearthError, match="not a valid model id"):
        ModelStore().install_from_staging(staged("c", {"f": b""}), manifest("../escape"))


def test_install_across_file_systems_copies_then_renames(monkeypatch, tmp_path):
    import errno

    store = ModelStore(tmp_path / "elsewhere")
    folder = staged("x", {"f": b"data"})
    real_rename = os.rename
    calls = []

    def rename(src, dst):
        calls.append((Path(src), Path(dst)))
        if Path(src) == folder:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_rename(src, dst)

    monkeypatch.setattr(store_module.os, "rename", rename)
    model = store.install_from_staging(folder, manifest("x"))
    assert (model.path / "f").read_bytes() == b"data" and not folder.exists()
    assert calls[-1][0].name.startswith(".incoming-x-") and calls[-1][1] == store.root / "x"


def test_list_get_require_and_the_store_folder_argument(tmp_path):
    store = ModelStore(tmp_path / "models")
    assert store.list_models() == [] and store.get("nope") is None
    with pytest.raises(HearthError, match="No installed model"):
        store.require("nope")
    store.install_from_staging(
        staged("1", {"a": b"1"}), manifest("first", installed_at="2025-01-01T00:00:00+00:00")
    )
    store.install_from_staging(
        staged("2", {"a": b"22"}), manifest("second", installed_at="2025-02-01T00:00:00+00:00")
    )
    (store.root / "junk").mkdir()  # a folder without a manifest is not a model
    assert [m.id for m in store.list_models()] == ["second", "first"]
    assert store.get("first").size_on_disk > 1
    assert not (paths.models_dir() / "first").exists()


def test_remove_deletes_the_folder_but_refuses_while_loaded():
    store = ModelStore()
    store.install_from_staging(staged("r", {"big": b"z" * 10_000}), manifest("gone"))
    with pytest.raises(HearthError, match="is loaded"):
        store.remove("gone", loaded_ids=["gone"])
    assert store.get("gone") is not None
    store.remove("gone", loaded_ids=["other"])
    assert store.get("gone") is None and list(store.root.iterdir()) == []
    with pytest.raises(HearthError):
        store.remove("gone")


def test_import_folder_registers_in_place_and_rm_keeps_the_files(tmp_path):
    folder = build_plain_kv_model(tmp_path / "My Model")
    store = ModelStore()
    model = store.import_folder(folder)
    assert model.id == "my-model" and model.path == folder.resolve() and model.linked
    assert model.manifest["source"] == {
        "kind": "local",
        "repo": None,
        "revision": None,
        "variant": None,
        "path": str(folder.resolve()),
    }
    assert model.manifest["format"] == "optimum" and model.manifest["context_length"] == 512
    assert sorted(p.name for p in (store.root / "my-model").iterdir()) == [MANIFEST_NAME]
    assert model.size_on_disk > 100_000  # the linked folder's bytes
    with pytest.raises(HearthError, match="already imported"):
        store.import_folder(folder)
    store.remove("my-model")
    assert (folder / "onnx" / "model.onnx").is_file()
    assert store.get("my-model") is None


def test_import_folder_validates_by_loading(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "readme.txt").write_text("not a model")
    with pytest.raises(ModelLoadError):
        ModelStore().import_folder(bad)
    with pytest.raises(HearthError, match="not a folder"):
        ModelStore().import_folder(tmp_path / "missing")
    assert ModelStore().list_models() == []


def test_import_gguf_installs_what_the_converter_writes(tmp_path, monkeypatch):
    """The converter itself is tested with real GGUF files by its own tests; here it is
    replaced by one that writes a real model folder with its manifest, as it does."""
    import app.models.gguf.convert as convert

    gguf = tmp_path / "SmolLM2-135M.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    seen = {}

    def fake_convert(src, dest, *, precision, name=None, progress=None):
        seen.update(src=src, precision=precision)
        assert not dest.exists()
        build_gqa_model(dest)
        (dest / MANIFEST_NAME).write_text(
            json.dumps(
                {
                    "id": dest.name,
                    "name": "Smol",
                    "source": {"kind": "gguf", "path": str(src), "sha256": "ab"},
                    "format": "genai",
                    "files": [{"path": "model.onnx", "size": 1, "sha256": "c"}],
                    "context_length": 512,
                    "parameters": 7,
                }
            )
        )
        progress(1.0, "done")
        return dest

    monkeypatch.setattr(convert, "convert_gguf", fake_convert)
    reports = []
    model = ModelStore().import_gguf(
        gguf, precision="int4", name="My Smol", progress=lambda *a: reports.append(a)
    )
    assert seen == {"src": gguf.resolve(), "precision": "int4"}
    assert model.id == "my-smol" and model.name == "My Smol"
    assert model.manifest["source"]["kind"] == "gguf"
    assert model.manifest["source"]["sha256"] == "ab"
    assert model.manifest["parameters"] == 7 and (model.path / "model.onnx").is_file()
    assert reports == [(1.0, "done")]
    assert list(paths.staging_dir().iterdir()) == []


def test_import_gguf_failure_leaves_nothing_behind(tmp_path, monkeypatch):
    import app.models.gguf.convert as convert
    from app.errors import ConversionError

    gguf = tmp_path / "broken.gguf"
    gguf.write_bytes(b"nope")

    def failing(src, dest, **kwargs):
        dest.mkdir()
        raise ConversionError("broken.gguf is not a GGUF file.")

    monkeypatch.setattr(convert, "convert_gguf", failing)
    with pytest.raises(ConversionError):
        ModelStore().import_gguf(gguf)
    assert ModelStore().list_models() == [] and list(paths.staging_dir().iterdir()) == []


def test_default_model_prefers_choice_then_last_used_then_newest():
    store = ModelStore()
    assert store.default_model() is None
    store.install_from_staging(
        staged("1", {}), manifest("old", installed_at="2025-01-01T00:00:00+00:00")
    )
    store.install_from_staging(
        staged("2", {}), manifest("new", installed_at="2025-03-01T00:00:00+00:00")
    )
    store.install_from_staging(
        staged("3", {}), manifest("mid", installed_at="2025-02-01T00:00:00+00:00")
    )
    assert store.default_model().id == "new"
    store.mark_used("mid")
    assert ModelStore().default_model().id == "mid"
    store.set_default("old")
    assert store.default_model().id == "old"
    store.remove("old")
    assert store.default_model().id == "mid"
    with pytest.raises(HearthError):
        store.set_default("missing")


def test_slugify():
    expected = "onnx-community--qwen2.5-0.5b-instruct"
    assert slugify("onnx-community/Qwen2.5-0.5B-Instruct") == expected
    assert slugify("  Ünïcode name!! ") == "n-code-name"
    assert slugify("///") == "model"
