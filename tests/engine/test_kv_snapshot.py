"""KV snapshots on disk: a long chat reopens after a restart without a prefill, and the
continued reply equals a fresh engine's, token for token."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from app.engine.engine import Engine
from app.engine.types import GenerationSettings, Message, SamplingSettings

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=10)


def chat(engine, messages, conversation_id="c", caches=None, **kwargs):
    chunks = list(engine.chat(messages, GREEDY, caches=caches, conversation_id=conversation_id,
                              **kwargs))
    return [c.token_id for c in chunks if c.token_id is not None], \
        "".join(c.text for c in chunks), chunks[-1].stats


def conversation(turns: int) -> list[Message]:
    messages = [Message("system", "You are the harbour master.")]
    for i in range(turns):
        messages += [Message("user", f"Question {i}: which boats came in this morning?"),
                     Message("assistant", f"Answer {i}: the fishing boats and a ferry.")]
    return messages


@pytest.mark.parametrize("model", ["plain_model_dir", "gqa_model_dir", "plain_fp16_model_dir"])
def test_chat_reopens_from_disk_after_restart_and_equals_fresh(model, request, tmp_path):
    folder = request.getfixturevalue(model)
    first = Engine.load(folder, provider="cpu", threads=1)
    caches = first.conversation_caches(snapshot_folder=tmp_path / "kv", min_tokens=16)
    messages = [*conversation(4), Message("user", "And the tide?")]
    _, answer, stats = chat(first, messages, caches=caches)
    assert stats.reused_tokens == 0
    caches.close()  # the app quits: the cache goes to disk
    first.close()
    assert list((tmp_path / "kv").rglob("*.npz"))

    restarted = Engine.load(folder, provider="cpu", threads=1)
    caches = restarted.conversation_caches(snapshot_folder=tmp_path / "kv", min_tokens=16)
    messages += [Message("assistant", answer), Message("user", "Thank you.")]
    tokens, _, stats = chat(restarted, messages, caches=caches)
    assert stats.reused_tokens >= stats.prompt_tokens // 2  # no re-read of the history
    fresh = Engine.load(folder, provider="cpu", threads=1)
    assert tokens == chat(fresh, messages, conversation_id=None, reuse=False)[0]


def test_snapshot_of_other_model_files_or_corrupt_data_is_ignored(plain_model_dir, tmp_path):
    changed = tmp_path / "model"
    shutil.copytree(plain_model_dir, changed)
    engine = Engine.load(changed, provider="cpu", threads=1)
    caches = engine.conversation_caches(snapshot_folder=tmp_path / "kv", min_tokens=16)
    messages = [*conversation(3), Message("user", "Any news?")]
    chat(engine, messages, caches=caches)
    caches.close()
    control = Engine.load(changed, provider="cpu", threads=1)
    caches = control.conversation_caches(snapshot_folder=tmp_path / "kv", min_tokens=16)
    assert chat(control, messages, caches=caches)[2].reused_tokens > 0  # usable as is
    caches.close()

    # The model's weights changed (a re-download): the old snapshot must not be used.
    os.utime(changed / "onnx" / "model.onnx", ns=(1, 1))
    other = Engine.load(changed, provider="cpu", threads=1)
    caches = other.conversation_caches(snapshot_folder=tmp_path / "kv", min_tokens=16)
    _, _, stats = chat(other, messages, caches=caches)
    assert stats.reused_tokens == 0
    caches.close()  # writes a valid snapshot for the changed files

    # Same model, corrupt snapshot: ignored and removed, the chat still answers correctly.
    for meta in (tmp_path / "kv").rglob("*.json"):
        data = json.loads(meta.read_text())
        data["tokens"] = data["tokens"][:-3]
        meta.write_text(json.dumps(data))
    again = Engine.load(changed, provider="cpu", threads=1)
    caches = again.conversation_caches(snapshot_folder=tmp_path / "kv", min_tokens=16)
    tokens, _, stats = chat(again, messages, caches=caches)
    assert stats.reused_tokens == 0
    assert not list(caches.snapshots.folder.glob("*.npz"))  # the bad one was removed
    fresh = Engine.load(changed, provider="cpu", threads=1)
    assert tokens == chat(fresh, messages, conversation_id=None, reuse=False)[0]


def test_short_chats_are_not_written(plain_model_dir, tmp_path):
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    caches = engine.conversation_caches(snapshot_folder=tmp_path / "kv")  # minimum: 256 tokens
    chat(engine, [Message("user", "hi")], caches=caches)
    caches.close()
    assert not list((tmp_path / "kv").rglob("*.npz"))
