"""Moving the models folder: all-or-nothing per model, space-checked, on real files."""

from __future__ import annotations

import errno
import shutil

import pytest

from app.errors import DiskFullError, HearthError
from app.jobs import JobControl
from app.models import relocate


def make_models(root, names=("a", "b", "c")):
    for name in names:
        (root / name / "onnx").mkdir(parents=True)
        (root / name / "hearth-manifest.json").write_text("{}")
        (root / name / "onnx" / "model.onnx").write_bytes(name.encode() * 1000)


def test_models_move_and_report_progress(tmp_path):
    source, target = tmp_path / "old", tmp_path / "new"
    make_models(source)
    seen = []
    assert relocate.move_models(source, target, seen.append, JobControl()) == 3
    assert sorted(p.name for p in target.iterdir()) == ["a", "b", "c"]
    assert (target / "b" / "onnx" / "model.onnx").read_bytes() == b"b" * 1000
    assert list(source.iterdir()) == []
    assert seen[-1].state == "done" and seen[-1].fraction == 1.0


def test_another_disk_without_room_moves_nothing(tmp_path, monkeypatch):
    source, target = tmp_path / "old", tmp_path / "new"
    make_models(source)
    target.mkdir()
    real_stat = relocate.os.stat
    monkeypatch.setattr(relocate.os, "stat", lambda p, *a, **k: _other_dev(real_stat(p), p, target))
    monkeypatch.setattr(relocate, "free_space", lambda path: 1000)
    with pytest.raises(DiskFullError, match="Nothing was moved"):
        relocate.move_models(source, target, lambda p: None, JobControl())
    assert sorted(p.name for p in source.iterdir()) == ["a", "b", "c"]
    assert list(target.iterdir()) == []


class _Stat:
    def __init__(self, st, dev):
        self.st_dev = dev
        self._st = st

    def __getattr__(self, name):
        return getattr(self._st, name)


def _other_dev(st, path, target):
    return _Stat(st, st.st_dev + 1) if str(path).startswith(str(target)) else st


def test_a_failed_copy_keeps_that_model_in_the_old_folder_and_leaves_no_half_copy(
    tmp_path, monkeypatch
):
    source, target = tmp_path / "old", tmp_path / "new"
    make_models(source)
    target.mkdir()
    real_stat = relocate.os.stat
    monkeypatch.setattr(relocate.os, "stat", lambda p, *a, **k: _other_dev(real_stat(p), p, target))
    real_copytree = shutil.copytree

    def copytree(src, dst, *args, **kw):
        result = real_copytree(src, dst, *args, **kw)
        if src == source / "b":  # the disk fills up once b's files are written
            raise OSError(errno.ENOSPC, "No space left on device")
        return result

    monkeypatch.setattr(relocate.shutil, "copytree", copytree)
    with pytest.raises(DiskFullError, match="while moving b"):
        relocate.move_models(source, target, lambda p: None, JobControl())
    assert sorted(p.name for p in target.iterdir()) == ["a"]  # no ".incoming-b-…" left
    assert sorted(p.name for p in source.iterdir()) == ["b", "c"]
    assert (source / "b" / "onnx" / "model.onnx").read_bytes() == b"b" * 1000


def test_a_target_inside_the_folder_or_with_clashing_names_is_refused(tmp_path):
    source = tmp_path / "old"
    make_models(source)
    with pytest.raises(HearthError, match="inside the current models folder"):
        relocate.move_models(source, source / "sub", lambda p: None, JobControl())
    target = tmp_path / "new"
    make_models(target, names=("b",))
    with pytest.raises(HearthError, match="already holds models named b"):
        relocate.move_models(source, target, lambda p: None, JobControl())
