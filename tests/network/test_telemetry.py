"""ONNX Runtime's telemetry is switched off before the first session, from one place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnxruntime as ort

from app.engine.package import read_model_folder
from app.engine.providers import create_session
from app.network import telemetry

ROOT = Path(__file__).resolve().parents[2]


def test_create_session_opts_out_first(plain_model_dir, monkeypatch):
    calls = []
    real = ort.disable_telemetry_events

    def spy():
        calls.append(os.environ.get(telemetry.ORT_OPT_OUT_ENV))
        real()

    monkeypatch.setattr(ort, "disable_telemetry_events", spy)
    monkeypatch.setattr(telemetry, "_ort_done", False)
    monkeypatch.delenv(telemetry.ORT_OPT_OUT_ENV, raising=False)
    session, _ = create_session(read_model_folder(plain_model_dir), provider="cpu")
    assert session.get_providers()[0] == "CPUExecutionProvider"
    assert calls == ["1"]  # once, with the environment already set
    create_session(read_model_folder(plain_model_dir), provider="cpu")
    assert calls == ["1"]


def test_the_cli_sets_the_opt_outs_before_onnxruntime_is_imported(tmp_path):
    probe = (
        "import os, sys\n"
        "import app.network.offline as offline\n"
        "real = offline.startup\n"
        "def startup(argv):\n"
        "    guard = real(argv)\n"
        "    print('ort imported:', 'onnxruntime' in sys.modules)\n"
        "    print('env:', os.environ.get('ORT_DISABLE_TELEMETRY'),"
        " os.environ.get('HF_HUB_DISABLE_TELEMETRY'))\n"
        "    return guard\n"
        "import app.cli\n"
        "app.cli.startup = startup\n"
        "sys.exit(app.cli.main(['models', 'list', '--json']))\n"
    )
    env = {k: v for k, v in os.environ.items() if "TELEMETRY" not in k}
    env["HEARTH_HOME"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "ort imported: False" in result.stdout
    assert "env: 1 1" in result.stdout
