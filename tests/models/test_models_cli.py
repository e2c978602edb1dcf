"""``hearth models …`` against the loopback Hub stand-in, in-process and as a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import main
from app.models.catalog import load_catalog
from app.models.library import ModelLibrary
from tests.bounds import AT_ONCE_S
from tests.fixtures.tiny_models import build_plain_kv_model
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests, random_bytes

ROOT = Path(__file__).resolve().parents[2]
MODEL_ID = "smollm2-135m-instruct"
DATA = "onnx/model_q4.onnx_data"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """The catalog's SmolLM2-135M repo at the commit the catalog pins, served with a tiny real
    model (plus 2 MB of weights data so a transfer can be interrupted)."""
    allow_hub_requests(monkeypatch)
    entry = load_catalog().get(MODEL_ID)
    folder = build_plain_kv_model(tmp_path / "tiny", variant_name="model_q4")
    pinned = {} if entry.revision == "main" else {"commit": entry.revision}
    with FakeHub() as server:
        server.add(
            FakeRepo.from_folder(
                entry.repo, folder, downloads=50, extra={DATA: random_bytes(2_000_000)}, **pinned
            )
        )
        server.add(
            FakeRepo("someone/Other-ONNX", {"config.json": b"{}"}, license="mit", downloads=5)
        )
        yield server


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_download_list_and_rm(hub, capsys):
    code, out, err = run(
        capsys, "models", "download", MODEL_ID, "--variant", "cpu", "--endpoint", hub.url
    )
    assert code == 0, err
    assert "Installed SmolLM2 135M instruct (cpu-q4)" in out
    assert f"{MODEL_ID} [" in err and "100.0%" in err and "done" in err  # progress bar

    code, out, _ = run(capsys, "models", "list", "--json")
    listed = json.loads(out)
    assert [m["id"] for m in listed] == [MODEL_ID]
    assert listed[0]["source"]["repo"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert listed[0]["size_on_disk"] > 2_000_000

    code, out, _ = run(capsys, "models", "download", MODEL_ID, "--endpoint", hub.url)
    assert code == 0 and "already installed" in out

    code, out, _ = run(capsys, "models", "rm", MODEL_ID)
    assert code == 0 and "freed" in out
    assert json.loads(run(capsys, "models", "list", "--json")[1]) == []


def test_catalog_json_marks_installed_and_fit(hub, capsys):
    run(capsys, "models", "download", MODEL_ID, "--endpoint", hub.url)
    code, out, _ = run(capsys, "models", "catalog", "--json", "--provider", "cuda")
    data = json.loads(out)
    assert code == 0 and data["provider"] == "cuda"
    assert len(data["models"]) == len(load_catalog())
    rows = {m["id"]: m for m in data["models"]}
    assert rows[MODEL_ID]["installed"] and not rows["phi-4-mini-instruct"]["installed"]
    assert rows["phi-4-mini-instruct"]["chosen_variant"] == "cuda-int4"
    assert rows[MODEL_ID]["fit"]["level"] in ("ok", "tight", "no")


def test_search_json(hub, capsys):
    code, out, _ = run(capsys, "models", "search", "smollm2", "--json", "--endpoint", hub.url)
    results = json.loads(out)
    assert code == 0 and [r["id"] for r in results] == ["HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert results[0]["license"] == "apache-2.0" and results[0]["size_bytes"] > 2_000_000
    assert results[0]["downloads"] == 50


def test_import_folder_in_place(capsys, tmp_path):
    folder = build_plain_kv_model(tmp_path / "local-model")
    code, out, _ = run(capsys, "models", "import", str(folder), "--json")
    assert code == 0 and json.loads(out)["path"] == str(folder.resolve())
    code, _, err = run(capsys, "models", "import", str(tmp_path / "missing"))
    assert code == 2 and "not a folder" in err


def test_errors_are_sentences_with_exit_code_2(capsys):
    code, _, err = run(capsys, "models", "download", "no-such-model")
    assert code == 2 and "not in the model catalog" in err
    code, _, err = run(capsys, "models", "rm", "nothing")
    assert code == 2 and "No installed model" in err


def test_download_interrupted_by_a_killed_process_resumes_on_rerun(hub, capsys, hearth_home):
    hub.faults.delay_per_chunk_s = 0.02
    env = {
        **os.environ,
        "HEARTH_HOME": str(hearth_home),
        "HF_HUB_OFFLINE": "0",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "models", "download", MODEL_ID, "--endpoint", hub.url],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    part = hearth_home / "staging" / MODEL_ID / (DATA + ".part")
    try:
        deadline = time.monotonic() + 30
        while not (part.exists() and part.stat().st_size > 300_000):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    kept = part.stat().st_size
    assert ModelLibrary().get(MODEL_ID) is None
    settled = -1
    while settled != hub.served(DATA):  # the server notices the dead client
        settled = hub.served(DATA)
        time.sleep(0.3)

    hub.faults.delay_per_chunk_s = 0.0
    before = hub.served(DATA)
    code, _, err = run(capsys, "models", "download", MODEL_ID, "--endpoint", hub.url)
    assert code == 0, err
    assert hub.served(DATA) - before == 2_000_000 - kept
    model = ModelLibrary().require(MODEL_ID)
    assert (model.path / DATA).read_bytes() == hub.repos[
        "HuggingFaceTB/SmolLM2-135M-Instruct"
    ].files[DATA]


# -- any Hub repo: ``hearth models download ORG/REPO`` --------------------------------------


def _with_external_data(folder: Path, graph: str) -> Path:
    """Re-save ``folder/graph`` with its weights in ``<graph>_data`` (as Optimum exports)."""
    import onnx

    path = folder / graph
    model = onnx.load(path)
    path.unlink()
    onnx.save_model(
        model,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=path.name + "_data",
        size_threshold=1024,
    )
    return folder


@pytest.fixture
def cuda_wheel_without_device(monkeypatch):
    import onnxruntime as ort

    from app import machine

    wheel = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(ort, "get_available_providers", lambda: list(wheel))
    monkeypatch.setattr(machine, "cuda_device_count", lambda: 0)


def test_download_any_genai_repo_with_one_folder_per_provider(
    hub, capsys, tmp_path, cuda_wheel_without_device
):
    from app.engine.package import read_model_folder
    from tests.fixtures.tiny_models import build_gqa_model

    cpu = build_gqa_model(tmp_path / "cpu")
    cuda = build_gqa_model(tmp_path / "cuda", seed=1)
    repo = FakeRepo.from_folder("org/Tiny-genai", cpu, prefix="cpu_and_mobile/cpu-int4")
    repo = hub.add(
        FakeRepo(
            "org/Tiny-genai",
            {
                **repo.files,
                **FakeRepo.from_folder("x/y", cuda, prefix="cuda/cuda-int4").files,
                "README.md": b"# tiny",
            },
        )
    )
    code, out, err = run(capsys, "models", "download", "org/Tiny-genai", "--endpoint", hub.url)
    assert code == 0, err
    assert "Installed Tiny-genai (cpu-int4)" in out and "100.0%" in err
    model = ModelLibrary().require("org--tiny-genai")
    assert model.source["repo"] == "org/Tiny-genai" and model.source["revision"] == repo.commit
    assert model.source["path"] == "cpu_and_mobile/cpu-int4" and model.manifest.format == "genai"
    assert (model.path / "model.onnx").read_bytes() == (cpu / "model.onnx").read_bytes()
    assert not (model.path / "README.md").exists()
    listed = {f["path"]: f for f in model.manifest.files}
    assert len(listed["model.onnx"]["sha256"]) == 64
    assert read_model_folder(model.path).layout == "genai"
    code, out, _ = run(capsys, "models", "download", "org/Tiny-genai", "--endpoint", hub.url)
    assert code == 0 and "already installed" in out


def test_download_any_optimum_repo_with_external_data_resumes_and_verifies(
    hub, capsys, tmp_path, cuda_wheel_without_device
):
    from app.engine.engine import Engine
    from app.engine.types import GenerationSettings, Message, SamplingSettings
    from tests.fixtures.tiny_models import build_plain_kv_model

    folder = build_plain_kv_model(tmp_path / "opt", variant_name="model_q4")
    _with_external_data(folder, "onnx/model_q4.onnx")
    data = folder / "onnx" / "model_q4.onnx_data"
    size = data.stat().st_size
    assert size > 300_000
    fp16 = random_bytes(50_000, 3)  # a GPU build the CPU plan must skip
    repo = hub.add(
        FakeRepo.from_folder("org/Tiny-optimum", folder, extra={"onnx/model_q4f16.onnx": fp16})
    )
    cut = size // 2
    hub.faults.cut_at = {"onnx/model_q4.onnx_data": cut}  # the connection drops once
    hub.faults.corrupt_at = {"tokenizer.json": 10}  # and one file arrives corrupt once
    code, out, err = run(capsys, "models", "download", "org/Tiny-optimum", "--endpoint", hub.url)
    assert code == 0, err
    assert "Installed Tiny-optimum (model_q4)" in out
    data_gets = [r for r in hub.file_requests() if r[1].endswith("model_q4.onnx_data")]
    assert len(data_gets) == 2 and data_gets[0][2] is None
    resumed_at = int(data_gets[1][2].removeprefix("bytes=").removesuffix("-"))
    assert cut - 64 * 1024 <= resumed_at <= cut  # resumed, not restarted
    assert len([r for r in hub.file_requests() if r[1].endswith("/tokenizer.json")]) == 2
    model = ModelLibrary().require("org--tiny-optimum")
    assert (model.path / "onnx/model_q4.onnx_data").read_bytes() == data.read_bytes()
    assert (model.path / "tokenizer.json").read_bytes() == repo.files["tokenizer.json"]
    assert not (model.path / "onnx/model_q4f16.onnx").exists()
    engine = Engine.load(model.path)  # the engine's own choice, on the same policy
    try:
        assert engine.spec.variant == "model_q4"
        assert engine.provider_report.chosen == "cpu"
        settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=3)
        chunks = list(engine.chat([Message("user", "hello")], settings))
    finally:
        engine.close()
    assert chunks[-1].stats.generated_tokens >= 1


def test_download_of_a_repo_without_an_onnx_model_is_a_sentence(hub, capsys):
    code, out, err = run(capsys, "models", "download", "someone/Other-ONNX", "--endpoint", hub.url)
    assert code == 2 and out == ""
    assert "someone/Other-ONNX holds no ONNX chat model Hearth can load" in err
    assert "Traceback" not in err and ModelLibrary().list_models() == []


# -- the endpoint: saved setting, malformed values -----------------------------------------


def test_download_uses_the_saved_endpoint_when_none_is_given(hub, capsys):
    from app.settings import Settings

    settings = Settings()
    settings.set("hub_endpoint", hub.url + "/")
    settings.save()
    code, out, err = run(capsys, "models", "download", MODEL_ID)
    assert code == 0, err
    assert "Installed SmolLM2 135M instruct" in out
    assert ModelLibrary().require(MODEL_ID).source["endpoint"] == hub.url
    assert hub.served(DATA) == 2_000_000


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("huggingface.co", "has no http:// or https:// in front"),
        ("https://hf mirror.com", "contains spaces or control characters"),
        ("ftp://hf-mirror.com", "uses ftp://, not http:// or https://"),
        ("http://", "names no server"),
    ],
)
def test_a_malformed_endpoint_fails_at_once_with_a_sentence(hub, capsys, endpoint, problem):
    started = time.monotonic()
    code, out, err = run(capsys, "models", "download", MODEL_ID, "--endpoint", endpoint)
    assert code == 2 and out == ""
    assert f"--endpoint '{endpoint}' is not usable: it {problem}." in err
    assert "Traceback" not in err and time.monotonic() - started < AT_ONCE_S
    assert hub.requests == []


def test_a_malformed_saved_endpoint_names_the_setting(hub, capsys):
    from app.paths import settings_path
    from app.settings import Settings

    settings = Settings()
    settings.set("hub_endpoint", "hf-mirror.com")
    settings.save()
    code, _, err = run(capsys, "models", "search", "smollm2")
    assert code == 2
    assert f"The hub_endpoint setting in {settings_path()} 'hf-mirror.com' is not usable" in err
    assert hub.requests == []


# -- two downloads of one model ------------------------------------------------------------


def test_two_processes_downloading_one_model_transfer_it_once(hub, hearth_home):
    hub.faults.delay_per_chunk_s = 0.01
    env = {
        **os.environ,
        "HEARTH_HOME": str(hearth_home),
        "HF_HUB_OFFLINE": "0",
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, "-m", "app", "models", "download", MODEL_ID, "--endpoint", hub.url]
    procs = [
        subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert "Installed SmolLM2 135M instruct" in out
    assert hub.served(DATA) == 2_000_000  # one transfer, not two racing ones
    assert sum("another Hearth window or command" in err for _, err in outputs) == 1
    model = ModelLibrary().require(MODEL_ID)
    assert (model.path / DATA).read_bytes() == hub.repos[
        "HuggingFaceTB/SmolLM2-135M-Instruct"
    ].files[DATA]


def test_import_gguf_converts_grouped_by_default_and_classic_when_asked(tmp_path, capsys):
    """``hearth import-gguf --attention grouped|classic``: the default is grouped attention;
    the same file in the classic form is another model, the same form again a duplicate."""
    from tests.models.tiny_gguf import write_tiny_gguf

    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    forms = {}
    for name, switch in (("Default", ()), ("Classic", ("--attention", "classic"))):
        code, out, err = run(capsys, "import-gguf", str(src), "--name", name, *switch, "--json")
        assert code == 0, err
        model = ModelLibrary().get(json.loads(out)["id"])
        forms[name] = model.manifest.extra["conversion"]["attention"]
    assert forms == {"Default": "grouped", "Classic": "gqa"}
    code, out, err = run(capsys, "import-gguf", str(src), "--attention", "grouped")
    assert code != 0 and "already installed as “Default”" in err
