"""The GGUFs other apps keep: LM Studio, Ollama (blobs named by manifests), GPT4All and Jan,
found under a redirected home, bounded in depth, count and time."""

from __future__ import annotations

import json
import os

import pytest

from app.models.gguf import locations


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    return home


def gguf(path, size: int = 64):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + b"\0" * (size - 4))
    return path


def ollama_model(home, model: str, tag: str, digest: str, body: bytes = b"GGUF" + b"\0" * 60):
    root = home / ".ollama" / "models"
    blob = root / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(body)
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / model / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:00"},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"},
    ]}))
    return blob


def test_finds_every_apps_gguf(home):
    lm = gguf(home / ".lmstudio/models/lmstudio-community/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf")
    old_lm = gguf(home / ".cache/lm-studio/models/TheBloke/Mistral/mistral.Q3_K_M.gguf")
    gguf(home / ".lmstudio/models/x/y/mmproj-model-f16.gguf")  # a vision projector: skipped
    (home / ".lmstudio/models/x/y/README.md").write_text("not a model")
    blob = ollama_model(home, "llama3.2", "3b", "ab" * 32)
    ollama_model(home, "broken", "latest", "cd" * 32, body=b"not a gguf")
    g4a = gguf(home / ".local/share/nomic.ai/GPT4All/Phi-3-mini-4k-instruct.Q4_0.gguf")
    jan = gguf(home / "jan/models/llama3.2-1b-instruct/model.gguf")
    jan_data = gguf(home / ".config/Jan/data/models/huggingface.co/a/b/c.gguf")
    found = locations.scan(home)
    by_path = {f.path: f for f in found}
    assert set(by_path) == {lm, old_lm, blob, g4a, jan, jan_data}
    assert by_path[blob].name == "llama3.2:3b" and by_path[blob].app == "Ollama"
    assert by_path[lm].app == "LM Studio" and by_path[lm].size == 64
    assert (by_path[g4a].app, by_path[jan].app, by_path[jan_data].app) == ("GPT4All", "Jan", "Jan")
    assert [f.app for f in found] == sorted(f.app for f in found)


def test_nothing_installed_finds_nothing(home):
    assert locations.scan(home) == []
    assert locations.existing_folders(home) == []


def test_depth_and_count_are_bounded(home):
    deep = home / ".lmstudio/models" / "/".join(f"d{i}" for i in range(8)) / "deep.gguf"
    gguf(deep)
    for i in range(12):
        gguf(home / f".lmstudio/models/pub/m{i}/m{i}.gguf")
    found = locations.scan(home, max_depth=5, max_files=10)
    assert len(found) == 10 and deep not in {f.path for f in found}
    assert deep in {f.path for f in locations.scan(home, max_depth=9)}


def test_time_is_bounded(home):
    for i in range(30):
        gguf(home / f".lmstudio/models/pub/m{i}/m{i}.gguf")
    assert locations.scan(home, time_budget_s=0.0) == []


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_a_folder_link_loop_is_not_followed(home):
    root = home / ".lmstudio/models"
    model = gguf(root / "pub/m/m.gguf")
    os.symlink(root, root / "pub/loop")
    assert [f.path for f in locations.scan(home)] == [model]
