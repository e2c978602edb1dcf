"""A client that goes away stops its generation; the server stops gracefully."""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
import pytest

from tests.bounds import AT_ONCE_S

HELLO = [{"role": "user", "content": "hello there"}]


def wait_for_record(served, count=1, timeout=10.0):
    deadline = time.monotonic() + timeout
    while len(served.api.admission.records) < count:
        assert time.monotonic() < deadline, "the request never finished on the engine"
        time.sleep(0.01)
    return list(served.api.admission.records)


def test_disconnect_mid_stream_cancels_the_generation(serve, long_model_dir):
    served = serve(long_model_dir)
    client = served.client()
    stream = client.chat.completions.create(model=served.model.id, messages=HELLO,
                                            max_tokens=4000, temperature=0, stream=True)
    received = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received += 1
        if received == 3:
            break
    stream.close()
    record = wait_for_record(served)[0]
    assert record.status == "cancelled" and record.finish_reason == "cancelled"
    # uncancelled, this prompt runs to all 4000 tokens (see long_model_dir)
    assert 3 <= record.completion_tokens < 4000
    assert served.api.admission.active == 0
    after = client.chat.completions.create(model=served.model.id, messages=HELLO,
                                           max_tokens=5, temperature=0)
    assert after.usage.completion_tokens == 5  # the engine is free again


def test_the_uncancelled_reply_really_runs_long(serve, long_model_dir):
    served = serve(long_model_dir)
    reply = served.client().chat.completions.create(
        model=served.model.id, messages=HELLO, max_tokens=4000, temperature=0)
    assert reply.usage.completion_tokens == 4000 and reply.choices[0].finish_reason == "length"


def test_disconnect_while_queued_skips_the_job(server):
    gate = server.block_engine()
    body = {"model": server.model.id, "messages": HELLO, "max_tokens": 8}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{server.url}/chat/completions", json=body, timeout=0.3)
    time.sleep(0.2)  # the server notices the closed connection
    gate.set()
    record = wait_for_record(server)[0]
    assert record.status == "cancelled" and record.completion_tokens == 0
    assert record.finish_reason is None  # the engine never ran it


def test_stop_is_graceful_and_prompt_with_a_stream_open(serve, long_model_dir):
    served = serve(long_model_dir)
    stream = served.client().chat.completions.create(
        model=served.model.id, messages=HELLO, max_tokens=4000, temperature=0, stream=True)
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    started = time.perf_counter()
    assert served.runner.stop()
    assert time.perf_counter() - started < AT_ONCE_S
    records = wait_for_record(served)
    assert records[0].completion_tokens < 4000
    ended = threading.Event()

    def drain():
        try:
            for _ in stream:
                pass
        except Exception:
            pass
        ended.set()

    threading.Thread(target=drain, daemon=True).start()
    assert ended.wait(5)
