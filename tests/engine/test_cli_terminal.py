"""The terminal as a new user meets it: models by the id ``hearth models list`` prints
(chat, generate, serve), line editing and history in ``chat``, every sampling flag's help
naming its default, and ``hearth --help`` saying that no command opens the window."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import build_parser, main, resolve_models
from app.paths import models_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def installed_gqa(gqa_model_dir) -> Path:
    """The tiny model installed in the library as ``tiny-gqa`` ("Tiny GQA")."""
    folder = models_dir() / "tiny-gqa"
    shutil.copytree(gqa_model_dir, folder)
    (folder / "hearth-manifest.json").write_text(json.dumps({"id": "tiny-gqa",
                                                             "name": "Tiny GQA"}))
    return folder


def test_generate_and_chat_take_an_installed_model_id(installed_gqa, tmp_path, capsys):
    args = ["--prompt", "Ships", "--json", "--temperature", "0", "--max-new-tokens", "4"]
    assert main(["generate", "tiny-gqa", *args]) == 0
    by_id = json.loads(capsys.readouterr().out)
    assert main(["generate", str(installed_gqa), *args]) == 0
    by_folder = json.loads(capsys.readouterr().out)
    assert by_id["tokens"] == by_folder["tokens"] and by_id["tokens"]
    assert main(["generate", "tiny gqa", *args]) == 0  # the name, case aside
    assert json.loads(capsys.readouterr().out)["tokens"] == by_id["tokens"]
    script = tmp_path / "chat.json"
    script.write_text(json.dumps({"turns": ["Hello!"], "max_new_tokens": 3}))
    assert main(["chat", "tiny-gqa", "--script", str(script), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["turn"] == 1


def test_serve_and_draft_take_an_id_too(installed_gqa):
    args = build_parser().parse_args(["serve", "tiny-gqa"])
    resolve_models(args)
    assert args.model_dir == installed_gqa
    args = build_parser().parse_args(["chat", "tiny-gqa", "--draft", "tiny-gqa"])
    resolve_models(args)
    assert args.model_dir == installed_gqa and args.draft == installed_gqa


def test_an_unknown_id_says_what_is_installed(installed_gqa, capsys):
    assert main(["generate", "no-such-model", "--prompt", "x"]) == 2
    err = capsys.readouterr().err
    assert "No model folder and no installed model is called 'no-such-model'" in err
    assert "tiny-gqa" in err and "hearth models list" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["chat", "generate"])
def test_every_sampling_flag_says_its_default(command, capsys):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    helps = {flag: action.help or "" for action in sub._actions
             for flag in action.option_strings}
    for flag in ("--max-new-tokens", "--temperature", "--top-k", "--top-p", "--min-p",
                 "--repetition-penalty", "--presence-penalty", "--frequency-penalty",
                 "--seed", "--stop"):
        assert "default" in helps[flag], flag
    assert "else 0.7" in helps["--temperature"]  # Hearth's when the model sets none
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "hearth models list" in " ".join(capsys.readouterr().out.split())


def test_hearth_help_says_no_command_opens_the_window(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "With no command, 'hearth' opens the desktop window" in out


def _read_until(fd: int, needle: bytes, seen: bytearray, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return needle in seen


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal: Linux and macOS")
def test_interactive_chat_edits_lines_and_recalls_history(gqa_model_dir):
    """Up recalls the last line (readline); without it the terminal would send ^[[A."""
    pytest.importorskip("readline")
    main_fd, child_fd = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "app", "chat", str(gqa_model_dir)],
                            stdin=child_fd, stdout=child_fd, stderr=child_fd, env=env,
                            cwd=ROOT, close_fds=True)
    os.close(child_fd)
    seen = bytearray()
    try:
        assert _read_until(main_fd, b"Up and Down recall", seen), seen
        assert _read_until(main_fd, b"> ", seen), seen
        os.write(main_fd, b"/rest\x1b[De\r")  # Left, then "e": "/reset"
        assert _read_until(main_fd, b"(conversation cleared)", seen), seen
        seen.clear()
        os.write(main_fd, b"\x1b[A\r")  # Up, Enter: the same command again
        assert _read_until(main_fd, b"(conversation cleared)", seen), seen
        os.write(main_fd, b"/quit\r")
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main_fd)
