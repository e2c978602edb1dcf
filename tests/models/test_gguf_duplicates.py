"""A GGUF already installed is found by its bytes (cheap facts first, then sha256)."""

from __future__ import annotations

import pytest

from app import paths
from app.jobs import JobCancelled, JobControl
from app.manifest import sha256_file
from app.models.gguf import duplicates
from app.models.gguf.duplicates import AlreadyInstalledError, find_installed, quick_fingerprint
from app.models.library import ModelLibrary
from tests.models.tiny_gguf import write_tiny_gguf


@pytest.fixture
def hashed(monkeypatch):
    """Records every full hash of a source file the duplicate check computes."""
    seen: list[str] = []

    def recording(path, *args, **kwargs):
        seen.append(str(path))
        return sha256_file(path, *args, **kwargs)

    monkeypatch.setattr(duplicates, "sha256_file", recording)
    return seen


def test_the_same_file_is_refused_naming_the_installed_model(tmp_path, hashed):
    src = tmp_path / "Tiny-Q8_0.gguf"
    write_tiny_gguf(src)
    library = ModelLibrary()
    first = library.import_gguf(src, name="Tiny one")
    assert first.source["size"] == src.stat().st_size
    assert first.source["quick_sha256"] == quick_fingerprint(src)
    assert first.source["sha256"] == sha256_file(src)
    copy = tmp_path / "renamed.gguf"  # a renamed copy is the same model
    copy.write_bytes(src.read_bytes())
    with pytest.raises(AlreadyInstalledError) as info:
        library.import_gguf(copy)
    assert str(info.value).startswith(
        "renamed.gguf is already installed as “Tiny one” (native precision).")
    assert info.value.model.id == first.id
    assert [m.id for m in library.list_models()] == [first.id]
    assert list(paths.staging_dir().iterdir()) == []


def test_another_precision_of_the_same_file_is_a_new_model(tmp_path):
    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    library = ModelLibrary()
    native = library.import_gguf(src)
    fp16 = library.import_gguf(src, precision="fp16")
    assert native.id != fp16.id
    assert fp16.manifest.extra["precision"] == "fp16" and fp16.source["variant"] == "fp16"
    assert native.manifest.extra["precision"] == "native"


def test_a_different_file_is_told_apart_without_hashing_it(tmp_path, hashed):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    write_tiny_gguf(a, seed=0)
    write_tiny_gguf(b, seed=1)  # the same size, other weights (the last MiB differs)
    assert a.stat().st_size == b.stat().st_size
    library = ModelLibrary()
    library.import_gguf(a)
    assert find_installed(library.list_models(), b, "native") == (None, None)
    assert hashed == []
    assert library.import_gguf(b).id == "b"


def test_manifests_without_the_cheap_facts_are_checked_by_full_hash(tmp_path, hashed):
    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    library = ModelLibrary()
    model = library.import_gguf(src)
    for key in ("size", "quick_sha256"):  # as older imports and the starter record it
        del model.manifest.source[key]
    model.manifest.write(model.path)
    twin, sha = find_installed(library.list_models(), src, "native")
    assert twin is not None and twin.id == model.id and sha == sha256_file(src)
    assert hashed == [str(src)]


def test_hashing_stops_on_cancel(tmp_path):
    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    library = ModelLibrary()
    model = library.import_gguf(src)
    del model.manifest.source["quick_sha256"]
    model.manifest.write(model.path)
    control = JobControl()
    control.cancel()
    with pytest.raises(JobCancelled):
        library.import_gguf(src, check=control.checkpoint)
    assert [m.id for m in library.list_models()] == [model.id]
