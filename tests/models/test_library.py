"""The model library: atomic installs, listing, removal, imports, the default model, plans."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app import paths
from app.errors import HearthError, ModelLoadError
from app.manifest import MANIFEST_NAME
from app.models import library as library_module
from app.models.hub import RemoteFile
from app.models.library import ModelLibrary, slugify
from app.models.repo_variant import variant_for_repo
from tests.fixtures.tiny_models import build_gqa_model, build_plain_kv_model
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests


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
    store = ModelLibrary()
    folder = staged("m1", {"config.json": b"{}", "onnx/model.onnx": b"x" * 1000})
    model = store.install_from_staging(folder, manifest("m1"))
    assert not folder.exists()
    assert model.path == store.root / "m1" and model.id == "m1" and model.name == "M1"
    assert (model.path / "onnx/model.onnx").stat().st_size == 1000
    written = json.loads((model.path / MANIFEST_NAME).read_text())
    assert written["source"]["repo"] == "o/r" and written["installed_at"]
    assert model.size_on_disk == 1002 + (model.path / MANIFEST_NAME).stat().st_size


def test_install_refuses_to_overwrite_and_leaves_both_folders_alone():
    store = ModelLibrary()
    store.install_from_staging(staged("a", {"f": b"old"}), manifest("dup"))
    second = staged("b", {"f": b"new"})
    with pytest.raises(HearthError, match="already installed"):
        store.install_from_staging(second, manifest("dup"))
    assert (store.root / "dup" / "f").read_bytes() == b"old"
    assert (second / "f").read_bytes() == b"new"


def test_install_rejects_an_unsafe_id():
    with pytest.raises(HearthError, match="not a valid model id"):
        ModelLibrary().install_from_staging(staged("c", {"f": b""}), manifest("../escape"))


def test_install_across_file_systems_copies_then_renames(monkeypatch, tmp_path):
    import errno

    store = ModelLibrary(tmp_path / "elsewhere")
    folder = staged("x", {"f": b"data"})
    real_rename = os.rename
    calls = []

    def rename(src, dst):
        calls.append((Path(src), Path(dst)))
        if Path(src) == folder:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_rename(src, dst)

    monkeypatch.setattr(library_module.os, "rename", rename)
    model = store.install_from_staging(folder, manifest("x"))
    assert (model.path / "f").read_bytes() == b"data" and not folder.exists()
    assert calls[-1][0].name.startswith(".incoming-x-") and calls[-1][1] == store.root / "x"


def test_list_get_require_and_the_store_folder_argument(tmp_path):
    store = ModelLibrary(tmp_path / "models")
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
    store = ModelLibrary()
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
    store = ModelLibrary()
    model = store.import_folder(folder)
    assert model.id == "my-model" and model.path == folder.resolve() and model.linked
    assert model.source == {
        "kind": "local",
        "repo": None,
        "revision": None,
        "variant": None,
        "path": str(folder.resolve()),
    }
    assert model.manifest.format == "optimum" and model.manifest.context_length == 512
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
        ModelLibrary().import_folder(bad)
    with pytest.raises(HearthError, match="not a folder"):
        ModelLibrary().import_folder(tmp_path / "missing")
    assert ModelLibrary().list_models() == []


def test_import_gguf_installs_what_the_converter_writes(tmp_path, monkeypatch):
    """The converter itself is tested with real GGUF files by its own tests; here it is
    replaced by one that writes a real model folder with its manifest, as it does."""
    import app.models.gguf.convert as convert

    gguf = tmp_path / "SmolLM2-135M.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    seen = {}

    def fake_convert(src, dest, *, precision, name=None, progress=None, check=None,
                     source_sha256=None, attention=None):
        seen.update(src=src, precision=precision, attention=attention)
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
    model = ModelLibrary().import_gguf(
        gguf, precision="int4", name="My Smol", progress=lambda *a: reports.append(a)
    )
    assert seen == {"src": gguf.resolve(), "precision": "int4", "attention": None}
    assert model.id == "my-smol" and model.name == "My Smol"
    assert model.source["kind"] == "gguf"
    assert model.source["sha256"] == "ab" and model.source["variant"] == "int4"
    assert model.manifest.parameters == 7 and (model.path / "model.onnx").is_file()
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
        ModelLibrary().import_gguf(gguf)
    assert ModelLibrary().list_models() == [] and list(paths.staging_dir().iterdir()) == []


def test_slugify():
    expected = "onnx-community--qwen2.5-0.5b-instruct"
    assert slugify("onnx-community/Qwen2.5-0.5B-Instruct") == expected
    assert slugify("  Ünïcode name!! ") == "n-code-name"
    assert slugify("///") == "model"


# -- the default model ------------------------------------------------------------------


def test_default_model_is_last_used_then_starter_then_newest():
    from app.models.starter import STARTER_ID
    from app.settings import Settings

    library = ModelLibrary()
    assert library.default_model() is None
    for n, (model_id, month) in enumerate((("old", 1), ("new", 3), ("mid", 2))):
        library.install_from_staging(
            staged(str(n), {"config.json": b"{}"}),
            manifest(model_id, installed_at=f"2025-0{month}-01T00:00:00+00:00"),
        )
    assert library.default_model().id == "new"  # nothing used yet: the newest
    library.set_last_used(library.require("mid"))
    assert Settings().get("last_model") == str(library.root / "mid")  # remembered on disk
    assert ModelLibrary().default_model().id == "mid"
    library.install_from_staging(staged("s", {"config.json": b"{}"}), manifest(STARTER_ID))
    assert library.default_model().id == "mid"  # the last used still wins over the starter
    library.remove("mid")
    assert library.default_model().id == STARTER_ID  # gone: the starter
    library.remove(STARTER_ID)
    assert library.default_model().id == "new"
    assert library.default_model(last_used=str(library.root / "old")).id == "old"


def test_default_model_keeps_a_model_folder_opened_outside_the_library(tmp_path):
    folder = build_plain_kv_model(tmp_path / "elsewhere")
    library = ModelLibrary()
    library.set_last_used(folder)
    model = library.default_model()
    assert model is not None and model.path == folder
    (folder / "config.json").unlink()  # no longer a model folder: nothing to open
    assert library.default_model() is None


def test_folders_copied_in_by_hand_are_listed_and_removable():
    by_hand = paths.models_dir() / "copied"
    by_hand.mkdir(parents=True)
    (by_hand / "genai_config.json").write_text("{}")
    library = ModelLibrary()
    listed = library.list_models()
    assert [(m.id, m.name, m.path) for m in listed] == [("copied", "copied", by_hand)]
    assert not listed[0].linked and library.default_model().id == "copied"
    library.remove("copied")
    assert not by_hand.exists()


# -- the catalog on this machine ---------------------------------------------------------


CUDA_WHEEL = ["CUDAExecutionProvider", "CPUExecutionProvider"]


@pytest.fixture
def cuda_wheel(monkeypatch):
    """This machine's onnxruntime lists CUDA; ``devices`` is what the driver reports."""
    import onnxruntime as ort

    from app import machine

    state = {"devices": 0}
    monkeypatch.setattr(ort, "get_available_providers", lambda: list(CUDA_WHEEL))
    monkeypatch.setattr(machine, "cuda_device_count", lambda: state["devices"])
    return state


def test_a_cuda_wheel_without_a_device_plans_cpu_variants_for_the_catalog(cuda_wheel):
    library = ModelLibrary()
    plan = library.plan_download("phi-4-mini-instruct")
    assert plan.variant.provider == "cpu" and plan.variant.name == "cpu-int4"
    assert {c.variant.provider for c in library.catalog_entries()} == {"cpu"}
    assert library.machine().provider == "cpu"
    cuda_wheel["devices"] = 1
    assert library.plan_download("phi-4-mini-instruct").variant.provider == "cuda"


def test_catalog_entries_carry_install_state_and_fit():
    library = ModelLibrary()
    qwen = manifest("qwen2.5-0.5b-instruct")
    library.install_from_staging(staged("c", {"config.json": b"{}"}), qwen)
    rows = {c.entry.id: c for c in library.catalog_entries(library.machine("cpu"))}
    assert rows["qwen2.5-0.5b-instruct"].installed
    assert not rows["phi-4-mini-instruct"].installed
    assert rows["phi-4-mini-instruct"].variant.provider == "cpu"
    assert rows["phi-4-mini-instruct"].fit.level in ("ok", "tight", "no")


def test_draft_for_names_the_installed_sibling_the_catalog_names():
    library = ModelLibrary()
    target = library.install_from_staging(
        staged("t", {"config.json": b"{}"}), manifest("qwen2.5-1.5b-instruct"))
    other = library.install_from_staging(
        staged("o", {"config.json": b"{}"}), manifest("phi-4-mini-instruct"))
    assert library.draft_for(target.path) is None  # its draft is not installed yet
    draft = library.install_from_staging(
        staged("d", {"config.json": b"{}"}), manifest("qwen2.5-0.5b-instruct"))
    assert library.catalog().get("qwen2.5-1.5b-instruct").draft == draft.id
    assert library.draft_for(target.path) == draft
    assert library.draft_for(other.path) is None  # the catalog names no draft for it
    assert library.draft_for(draft.path) is None  # nor for the draft itself
    assert library.draft_for(paths.models_dir() / "not-installed") is None


def test_plan_download_for_an_unknown_name_is_a_sentence():
    with pytest.raises(HearthError, match="not in the model catalog"):
        ModelLibrary().plan_download("no-such-model")


# -- choosing what to fetch from a Hub repo ------------------------------------------------


def remote(path: str, size: int = 10) -> RemoteFile:
    return RemoteFile(path, size, None, None)


GENAI_FILES = [
    remote("README.md"),
    remote("cpu_and_mobile/cpu-int4/genai_config.json"),
    remote("cpu_and_mobile/cpu-int4/model.onnx", 100),
    remote("cuda/cuda-int4/genai_config.json"),
    remote("cuda/cuda-int4/model.onnx", 200),
]
OPTIMUM_FILES = [
    remote("config.json"),
    remote("tokenizer.json"),
    remote("onnx/model.onnx"),
    remote("onnx/model_q4.onnx"),
    remote("onnx/model_q4.onnx_data"),
    remote("onnx/model_q4f16.onnx"),
]


def test_variant_for_repo_picks_genai_folder_for_the_provider():
    cpu = variant_for_repo(GENAI_FILES, "cpu")
    assert cpu.subfolder == "cpu_and_mobile/cpu-int4" and cpu.size_bytes == 110
    assert variant_for_repo(GENAI_FILES, "cuda").subfolder == "cuda/cuda-int4"
    assert variant_for_repo(GENAI_FILES, "cpu", requested="cuda-int4").subfolder == (
        "cuda/cuda-int4"
    )
    with pytest.raises(HearthError, match="has no variant 'int8'") as err:
        variant_for_repo(GENAI_FILES, "cpu", requested="int8", repo="o/r")
    assert "cpu_and_mobile/cpu-int4" in err.value.hint


def test_variant_for_repo_picks_an_optimum_graph_with_its_data():
    cpu = variant_for_repo(OPTIMUM_FILES, "cpu")
    picked = sorted(f.path for f in OPTIMUM_FILES if cpu.selects(f.path))
    assert picked == [
        "config.json",
        "onnx/model_q4.onnx",
        "onnx/model_q4.onnx_data",
        "tokenizer.json",
    ]
    assert variant_for_repo(OPTIMUM_FILES, "cuda").name == "model_q4f16"
    assert variant_for_repo(OPTIMUM_FILES, "cpu", requested="fp32").name == "model"
    assert variant_for_repo(OPTIMUM_FILES, "cpu", requested="model_q4f16").name == "model_q4f16"
    root_export = [remote("config.json"), remote("model.onnx")]
    assert variant_for_repo(root_export, "cpu").include[-3] == "model.onnx"


def test_variant_for_repo_refuses_a_repo_without_an_onnx_chat_model():
    with pytest.raises(HearthError, match="o/r holds no ONNX chat model"):
        variant_for_repo([remote("README.md"), remote("model.safetensors")], "cpu", repo="o/r")
    with pytest.raises(HearthError, match="no ONNX chat model"):  # graphs, but no config.json
        variant_for_repo([remote("onnx/model.onnx")], "cpu")


@pytest.fixture
def hub(monkeypatch):
    allow_hub_requests(monkeypatch)
    with FakeHub() as server:
        yield server


def test_a_cuda_wheel_without_a_device_plans_cpu_variants_for_hub_repos(hub, cuda_wheel):
    hub.add(FakeRepo("org/genai", {f.path: b"x" * f.size for f in GENAI_FILES}))
    hub.add(FakeRepo("org/optimum", {f.path: b"y" * f.size for f in OPTIMUM_FILES}))
    library = ModelLibrary(endpoint=hub.url)
    genai = library.plan_download("org/genai")
    optimum = library.plan_download("org/optimum")
    assert genai.variant.subfolder == "cpu_and_mobile/cpu-int4" and genai.format == "genai"
    assert optimum.variant.name == "model_q4" and optimum.format == "optimum"
    assert genai.model_id == "org--genai" and genai.revision == hub.repos["org/genai"].commit
    cuda_wheel["devices"] = 1
    assert library.plan_download("org/genai").variant.subfolder == "cuda/cuda-int4"
    assert library.plan_download("org/optimum").variant.name == "model_q4f16"
    assert library.plan_download("org/optimum", variant="cpu").variant.name == "model_q4"


def test_plan_and_download_a_hub_repo_through_the_library(hub, tmp_path):
    from app.engine.package import read_model_folder

    folder = build_gqa_model(tmp_path / "genai")
    hub.add(FakeRepo.from_folder("org/tiny-genai", folder, prefix="cpu-int4"))
    library = ModelLibrary(endpoint=hub.url, downloader_options={"retries": 1})
    plan = library.plan_download("org/tiny-genai", provider="cpu")
    model = library.download(plan)
    assert model.id == "org--tiny-genai" and model.source["repo"] == "org/tiny-genai"
    assert model.manifest.format == "genai" and model.source["variant"] == "cpu-int4"
    assert read_model_folder(model.path).layout == "genai"


def test_a_hub_download_lists_the_repo_once(hub, tmp_path):
    folder = build_gqa_model(tmp_path / "genai")
    hub.add(FakeRepo.from_folder("org/tiny-genai", folder, prefix="cpu-int4"))
    library = ModelLibrary(endpoint=hub.url, downloader_options={"retries": 1})
    model = library.download(library.plan_download("org/tiny-genai", provider="cpu"))
    assert model.source["variant"] == "cpu-int4"
    trees = [path for _, path, _ in hub.requests if "/tree/" in path]
    assert len(trees) == 1, trees


def test_the_run_on_setting_chooses_the_downloaded_variant_as_it_chooses_the_loaded_one(
    hub, cuda_wheel, tmp_path
):
    """A CUDA wheel without a device: "auto" is CPU, but a user who set "Run on" to CUDA
    gets the CUDA build downloaded (and Engine.load reads that setting the same way)."""
    from app.machine import chosen_provider
    from app.settings import Settings

    hub.add(FakeRepo("org/genai", {f.path: b"x" * f.size for f in GENAI_FILES}))
    settings = Settings(tmp_path / "settings.json")
    library = ModelLibrary(endpoint=hub.url, settings=settings)
    assert library.plan_download("org/genai").variant.subfolder == "cpu_and_mobile/cpu-int4"
    settings.set("provider", "cuda")
    assert library.provider() == chosen_provider(settings.get("provider")) == "cuda"
    assert library.plan_download("org/genai").variant.subfolder == "cuda/cuda-int4"
    assert library.plan_download("phi-4-mini-instruct").variant.provider == "cuda"
    assert library.machine().provider == "cuda"
    assert {c.variant.provider for c in library.catalog_entries()} >= {"cuda"}
    assert library.plan_download("org/genai", provider="cpu").variant.subfolder == (
        "cpu_and_mobile/cpu-int4")  # an explicit provider still wins


def _package_repo(tmp_path: Path) -> FakeRepo:
    """A model package: manifest.json, configs/ and one genai folder per hardware variant."""
    folder = build_gqa_model(tmp_path / "genai")
    files: dict[str, bytes] = {}
    for name in ("qnn-npu", "cuda-fp16", "cpu-int4"):
        for file in ("genai_config.json", "model.onnx"):
            files[f"models/decoder/{name}/{file}"] = (folder / file).read_bytes()
    for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        files[f"configs/{file}"] = (folder / file).read_bytes()
    files["manifest.json"] = json.dumps({"model_name": "tiny", "component_models": ["decoder"]})
    variants = {
        "qnn-npu": {"constraints": {"ep": "QNNExecutionProvider", "device": "npu"}},
        "cuda-fp16": {"constraints": {"ep": "CUDAExecutionProvider", "device": "gpu"}},
        "cpu-int4": {"constraints": {"ep": "CPUExecutionProvider", "device": "cpu"}},
    }
    files["models/decoder/metadata.json"] = json.dumps({"model_variants": variants})
    files["README.md"] = b"# tiny package"
    return FakeRepo("org/tiny-package", {k: v if isinstance(v, bytes) else v.encode()
                                          for k, v in files.items()})


def test_a_model_package_downloads_only_the_variant_the_policy_picks(hub, tmp_path):
    from app.engine.package import read_model_folder

    hub.add(_package_repo(tmp_path))
    library = ModelLibrary(endpoint=hub.url, downloader_options={"retries": 1})
    assert library.plan_download("org/tiny-package", provider="cuda").variant.name == "cuda-fp16"
    plan = library.plan_download("org/tiny-package", provider="cpu")
    assert plan.variant.name == "cpu-int4" and plan.format == "genai"
    model = library.download(plan)
    on_disk = sorted(p.relative_to(model.path).as_posix() for p in model.path.rglob("*.onnx"))
    assert on_disk == ["models/decoder/cpu-int4/model.onnx"]
    spec = read_model_folder(model.path, provider="cpu")
    assert spec.variant == "cpu-int4" and spec.tokenizer_path.parent.name == "configs"
    with pytest.raises(HearthError, match="no variant 'npu'"):
        library.plan_download("org/tiny-package", variant="npu")


def test_a_gated_repo_says_where_to_accept_the_licence(hub, tmp_path):
    folder = build_gqa_model(tmp_path / "genai")
    hub.add(FakeRepo.from_folder("org/gated", folder, prefix="cpu-int4", gated_token="hf_ok"))
    with pytest.raises(HearthError) as err:
        ModelLibrary(endpoint=hub.url).plan_download("org/gated", provider="cpu")
    message = str(err.value)
    assert "This model is gated: accept its licence at https://huggingface.co/org/gated" in message
    assert "add your token in Settings ▸ Models" in message and "401" in message
    library = ModelLibrary(endpoint=hub.url, token="hf_ok", downloader_options={"retries": 1})
    assert library.plan_download("org/gated", provider="cpu").variant.name == "cpu-int4"


def test_a_copy_to_another_disk_that_fills_up_keeps_the_download(hub, monkeypatch):
    """The models folder is on another file system (EXDEV) and the copy runs out of space:
    a sentence, no half copy left in the models folder, the staged download kept, and the
    next attempt installs without fetching a byte again."""
    import errno
    import shutil

    from app.errors import DiskFullError
    from app.models.catalog import Variant
    from app.models.downloader import DownloadRequest

    data = b"w" * 300_000
    repo = hub.add(FakeRepo("org/far", {"config.json": b"{}", "onnx/model.onnx": data}))
    library = ModelLibrary(endpoint=hub.url, downloader_options={"retries": 0})
    request = DownloadRequest(
        "far", "Far", repo.repo_id, "main", Variant("cpu", "cpu", include=("*.json", "onnx/*"))
    )
    staging = library.downloader().staging_folder("far")
    real_rename, real_copy = os.rename, shutil.copy2

    def rename(src, dst):
        if Path(src) == staging:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_rename(src, dst)

    def full_disk_copy(src, dst, **kwargs):
        if str(src).endswith(".onnx"):
            Path(dst).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_copy(src, dst, **kwargs)

    monkeypatch.setattr(library_module.os, "rename", rename)
    monkeypatch.setattr(shutil, "copy2", full_disk_copy)
    with pytest.raises(DiskFullError) as err:
        library.download(request)
    assert f"Not enough free disk space in {library.root}" in str(err.value)
    assert "downloaded files were kept" in str(err.value)
    assert [p.name for p in library.root.iterdir()] == []  # no .incoming-* half copy
    assert (staging / "onnx/model.onnx").read_bytes() == data
    served = hub.served()

    monkeypatch.setattr(shutil, "copy2", real_copy)
    model = library.download(request)
    assert (model.path / "onnx/model.onnx").read_bytes() == data
    assert hub.served() == served  # nothing downloaded twice
    assert not staging.exists()


def test_a_split_layout_repo_downloads_its_decoder_with_the_matching_embedding_graph():
    listing = [
        remote(p) for p in (
            "config.json", "tokenizer.json", "onnx/decoder_model_merged_q4.onnx",
            "onnx/decoder_model_merged_q4.onnx_data", "onnx/decoder_model_merged_fp16.onnx",
            "onnx/embed_tokens_q4.onnx", "onnx/embed_tokens_fp16.onnx",
            "onnx/vision_encoder_q4.onnx", "onnx/audio_encoder_q4.onnx",
        )
    ]
    variant = variant_for_repo(listing, "cpu", repo="org/gemma-split")
    chosen = sorted(f.path for f in listing if variant.selects(f.path))
    assert chosen == [
        "config.json", "onnx/decoder_model_merged_q4.onnx",
        "onnx/decoder_model_merged_q4.onnx_data", "onnx/embed_tokens_q4.onnx", "tokenizer.json",
    ]  # the encoders of other modalities are not fetched: Hearth runs the text decoder
