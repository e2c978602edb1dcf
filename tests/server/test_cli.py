"""``hearth serve`` from the command line."""

from __future__ import annotations

import threading

import openai

from app.cli import build_parser, main
from app.server.cli import run_serve


def test_serve_command_serves_until_stopped(gqa_model_dir, capsys):
    args = build_parser().parse_args(["serve", str(gqa_model_dir), "--port", "0", "--queue",
                                      "2", "--api-key", "k"])
    ready, stop, addresses = threading.Event(), threading.Event(), []
    codes = []

    def on_ready(address):
        addresses.append(address)
        ready.set()

    thread = threading.Thread(target=lambda: codes.append(run_serve(args, on_ready=on_ready,
                                                                    stop=stop)))
    thread.start()
    try:
        assert ready.wait(30)
        address = addresses[0]
        assert address.host == "127.0.0.1" and address.port > 0
        client = openai.OpenAI(base_url=address.base_url, api_key="k", max_retries=0)
        reply = client.chat.completions.create(
            model=gqa_model_dir.name, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        assert reply.usage.completion_tokens == 3
    finally:
        stop.set()
        thread.join(10)
    assert codes == [0]
    out = capsys.readouterr().out
    assert address.base_url in out and "API key required" in out


def test_serve_refuses_a_network_address_without_a_key(gqa_model_dir, capsys):
    code = main(["serve", str(gqa_model_dir), "--host", "0.0.0.0", "--port", "0"])
    assert code == 2
    err = capsys.readouterr().err
    assert "without an API key" in err and "--api-key" in err


def test_serve_says_when_the_port_is_taken(gqa_model_dir, capsys, serve):
    served = serve(gqa_model_dir)
    code = main(["serve", str(gqa_model_dir), "--port", str(served.address.port)])
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{served.address.port}" in capsys.readouterr().err
