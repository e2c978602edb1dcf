"""An imported GGUF converted in an older form is converted again from its file, in place
(``gguf.update``): same id, folder, settings and chats; the old package stays whole until the
new one replaces it, and whenever the file is gone, changed, the disk short or the job stopped."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest

from app import paths
from app.cli import main
from app.engine.engine import Engine
from app.engine.types import GenerationSettings, SamplingSettings
from app.errors import DiskFullError, HearthError
from app.jobs import JobCancelled, JobControl
from app.manifest import Manifest
from app.models.gguf import ATTENTION_FORM, update
from app.models.gguf.duplicates import quick_fingerprint
from app.models.library import ModelLibrary
from app.settings import Settings
from app.storage.history import History
from tests.fixtures.grouped_models import tiny_gguf

IDS = [(7 + 13 * i) % 1000 + 3 for i in range(300)]
GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=8)


def _made_old(model, *, drop=("attention", "attention_form", "attention_requested")) -> None:
    """Rewrite ``model``'s record as an older Hearth wrote it (a GQA conversion from before
    grouped attention: no attention keys)."""
    manifest = Manifest.read(model.path)
    for key in drop:
        manifest.extra["conversion"].pop(key, None)
    manifest.write(model.path)


def _old_import(tmp_path, **kwargs):
    src = tiny_gguf(tmp_path)
    library = ModelLibrary()
    model = library.import_gguf(src, precision="fp32", attention="gqa", name="Tiny", **kwargs)
    _made_old(model)
    return library, src, library.require(model.id)


def _ops(folder) -> set[str]:
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    return {n.op_type for n in graph.node}


def _load(folder) -> Engine:
    return Engine.load(folder, provider="cpu", threads=1, huge_pages=False, calibrate=False)


def _logits(folder) -> np.ndarray:
    decoder = _load(folder).decoder
    cache = decoder.new_cache()
    decoder.feed(cache, IDS[:280])
    return decoder.verify(cache, IDS[280:]).copy()


def _greedy(folder) -> list[int]:
    chunks = _load(folder).generate(IDS[:40], GREEDY)
    return [c.token_id for c in chunks if c.token_id is not None]


def test_an_old_form_import_is_updated_in_place_and_replies_the_same(tmp_path):
    library, _src, old = _old_import(tmp_path)
    before = tmp_path / "before"
    shutil.copytree(old.path, before)
    settings = Settings()
    settings.set("last_model", str(old.path))
    settings.save()
    history = History()
    chat = history.create_conversation(model_id=str(old.path))

    state = update.check_model(old)
    assert state.status == update.UPDATABLE and state.gains == ("attention",)
    assert state.sentence.startswith(
        "This model can be updated for faster replies (an older Hearth converted it): faster "
        "replies and half the memory at long context (grouped attention). Update converts "
        "tiny-2048.gguf again")
    new = update.update_model(library, old)

    assert (new.id, new.path, new.name) == (old.id, old.path, "Tiny")
    conversion = new.manifest.extra["conversion"]
    assert conversion["attention"] == "grouped" and conversion["attention_form"] == ATTENTION_FORM
    assert conversion["attention_requested"] is None  # the default: a later form updates too
    assert new.manifest.installed_at == old.manifest.installed_at
    assert new.source["sha256"] == old.source["sha256"]
    assert "GroupQueryAttention" not in _ops(new.path) and "TensorScatter" in _ops(new.path)
    assert update.check_model(new).status == update.CURRENT
    assert [m.id for m in library.list_models()] == [old.id]
    assert list(paths.staging_dir().iterdir()) == []
    # the settings and the chat still name a model that loads, and it answers as before
    assert ModelLibrary(settings=Settings()).default_model().id == old.id
    assert History().get_conversation(chat.id).model_id == str(new.path)
    assert _load(new.path).graph.grouped_attention
    np.testing.assert_allclose(_logits(new.path), _logits(before), rtol=0, atol=1e-4)
    reply = _greedy(new.path)
    assert len(reply) == GREEDY.max_new_tokens and reply == _greedy(before)


def test_importing_the_file_again_updates_the_old_form_import(tmp_path, capsys):
    _library, src, old = _old_import(tmp_path)
    assert main(["import-gguf", str(src), "--precision", "fp32"]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(old.path)
    assert "is updated in place (same id, settings and chats)" in out.err
    new = ModelLibrary().require(old.id)
    assert new.manifest.extra["conversion"]["attention"] == "grouped"
    # now current: the same import is the duplicate it always was
    with pytest.raises(HearthError, match="is already installed as “Tiny”"):
        ModelLibrary().import_gguf(src, precision="fp32")


def test_a_moved_file_imported_again_updates_the_model_and_is_recorded(tmp_path):
    library, src, old = _old_import(tmp_path)
    moved = tmp_path / "elsewhere" / "renamed.gguf"
    moved.parent.mkdir()
    src.rename(moved)
    assert update.check_model(library.require(old.id)).status == update.SOURCE_GONE
    new = library.import_gguf(moved, precision="fp32")
    assert new.id == old.id and new.source["path"] == str(moved)
    assert update.check_model(new).status == update.CURRENT


def test_a_missing_source_keeps_the_old_package_and_says_so(tmp_path):
    library, src, old = _old_import(tmp_path)
    src.unlink()
    state = update.check_model(old)
    assert state.status == update.SOURCE_GONE and not state.can_update
    assert state.sentence == (
        f"This model was converted by an older Hearth from {src.name}, which is no longer "
        f"where it was imported from; it keeps working as it is. Re-import {src.name} to get "
        "faster replies and half the memory at long context (grouped attention).")
    with pytest.raises(HearthError) as info:
        update.update_model(library, old)
    assert str(info.value) == state.sentence
    assert Manifest.read(old.path).as_dict() == old.manifest.as_dict()
    assert len(_greedy(old.path)) == GREEDY.max_new_tokens  # the old form still loads


def test_a_changed_source_keeps_the_old_package_and_says_so(tmp_path):
    library, src, old = _old_import(tmp_path)
    data = bytearray(src.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size
    src.write_bytes(bytes(data))
    manifest = Manifest.read(old.path)  # a change the quick facts miss: only the hash tells
    manifest.source["quick_sha256"] = quick_fingerprint(src)
    manifest.write(old.path)
    old = library.require(old.id)
    assert update.check_model(old).can_update
    with pytest.raises(HearthError, match=f"{src.name} has changed since it was imported"):
        update.update_model(library, old)
    assert Manifest.read(old.path).as_dict() == old.manifest.as_dict()
    assert list(paths.staging_dir().iterdir()) == []
    src.write_bytes(b"GGUF" + bytes(1000))  # another size: the panel says so without hashing
    state = update.check_model(old)
    assert state.status == update.SOURCE_CHANGED
    assert state.sentence.startswith(f"{src.name} has changed since it was imported, so this "
                                     f"model keeps the older conversion. Re-import {src.name}")


@pytest.mark.parametrize("keep_partial", [False, True], ids=["cancel", "quit"])
def test_a_cancel_or_quit_mid_conversion_leaves_the_old_package(tmp_path, keep_partial):
    library, _src, old = _old_import(tmp_path)
    files = {p.name: p.read_bytes() for p in old.path.iterdir()}
    control = JobControl()

    def progress(_fraction: float, message: str) -> None:
        if message.startswith("Converting layer 2"):
            control.cancel(keep_partial=keep_partial)

    with pytest.raises(JobCancelled):
        update.update_model(library, old, progress=progress, check=control.checkpoint)
    assert {p.name: p.read_bytes() for p in old.path.iterdir()} == files
    assert sorted(p.name for p in library.root.iterdir()) == [old.id]
    assert list(paths.staging_dir().iterdir()) == []


def test_a_failed_conversion_leaves_the_old_package(tmp_path, monkeypatch):
    from app.models.gguf import convert

    library, _src, old = _old_import(tmp_path)
    files = {p.name: p.read_bytes() for p in old.path.iterdir()}

    def broken(*_args, **_kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(convert.onnx, "save_model", broken)
    with pytest.raises(HearthError, match=r"Converting tiny-2048\.gguf failed"):
        update.update_model(library, old)
    assert {p.name: p.read_bytes() for p in old.path.iterdir()} == files
    assert list(paths.staging_dir().iterdir()) == []


def test_a_short_disk_is_said_before_anything_is_read(tmp_path, monkeypatch):
    library, _src, old = _old_import(tmp_path)
    monkeypatch.setattr(update, "free_bytes", lambda _path: 1 << 20)
    with pytest.raises(DiskFullError, match=r"Updating Tiny needs about .* free in .* but "
                                            r"only 1\.0 MB are free"):
        update.update_model(library, old)
    assert Manifest.read(old.path).as_dict() == old.manifest.as_dict()


def test_an_explicit_classic_import_stays_classic(tmp_path):
    src = tiny_gguf(tmp_path)
    library = ModelLibrary()
    classic = library.import_gguf(src, precision="fp32", attention="gqa")
    assert classic.manifest.extra["conversion"]["attention_requested"] == "gqa"
    assert update.check_model(classic).status == update.CURRENT
    _made_old(classic, drop=("attention_requested",))  # as the grouped default's Hearth wrote
    assert update.check_model(library.require(classic.id)).status == update.CURRENT
    manifest = Manifest.read(classic.path)
    manifest.extra["conversion"]["sampling_form"] = 0  # another form is older: it updates
    manifest.write(classic.path)
    state = update.check_model(library.require(classic.id))
    assert state.gains == ("sampling",)
    new = update.update_model(library, library.require(classic.id))
    assert new.manifest.extra["conversion"]["attention"] == "gqa"
    assert new.manifest.extra["conversion"]["attention_requested"] == "gqa"
    assert "GroupQueryAttention" in _ops(new.path)


def test_not_an_import_is_never_offered_an_update(tmp_path):
    from app.models.starter_ids import STARTER_ID

    library, _src, old = _old_import(tmp_path)
    starter = library.root / STARTER_ID
    shutil.copytree(old.path, starter)
    manifest = Manifest.read(starter)
    manifest.id = STARTER_ID
    manifest.write(starter)
    assert update.check_model(library.require(STARTER_ID)).status == update.CURRENT


def test_the_cli_lists_updates_and_says_why_not(tmp_path, capsys):
    _library, src, old = _old_import(tmp_path)
    assert main(["models", "list"]) == 0
    assert f"an older conversion: 'hearth models update {old.id}'" in capsys.readouterr().out
    assert main(["models", "update", old.id]) == 0
    assert capsys.readouterr().out.strip() == (
        f"Updated Tiny ('{old.id}') to the current conversion.")
    assert main(["models", "update", old.id]) == 0
    assert capsys.readouterr().out.strip() == "Tiny is up to date."
    _made_old(ModelLibrary().require(old.id))
    src.unlink()
    assert main(["models", "update", old.id]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hearth: This model was converted by an older Hearth from ")
    assert "Traceback" not in err
    assert len(_greedy(old.path)) == GREEDY.max_new_tokens


def test_a_swap_cut_off_between_its_renames_puts_the_old_package_back(tmp_path):
    library, _src, old = _old_import(tmp_path)
    files = {p.name: p.read_bytes() for p in old.path.iterdir()}
    old.path.rename(old.path.with_name(f".{old.id}.old"))  # as a kill after the first rename
    (model,) = ModelLibrary().list_models()
    assert model.id == old.id and model.path == old.path
    assert {p.name: p.read_bytes() for p in old.path.iterdir()} == files
    assert update.update_model(library, model).id == old.id  # and it updates as before


def test_a_folder_that_cannot_be_moved_aside_keeps_the_old_package(tmp_path, monkeypatch):
    """Windows: a loaded model's files cannot be renamed; the update says so and the old
    package stays as it was."""
    import app.models.library as library_module

    library, _src, old = _old_import(tmp_path)
    files = {p.name: p.read_bytes() for p in old.path.iterdir()}
    real_replace = library_module.os.replace

    def in_use(src, dst):
        if str(src) == str(old.path):
            raise PermissionError(13, "The process cannot access the file")
        return real_replace(src, dst)

    monkeypatch.setattr(library_module.os, "replace", in_use)
    with pytest.raises(HearthError, match=r"Tiny could not be replaced \(its folder is in use"):
        update.update_model(library, old)
    assert {p.name: p.read_bytes() for p in old.path.iterdir()} == files
    assert sorted(p.name for p in library.root.iterdir()) == [old.id]
