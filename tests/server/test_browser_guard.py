"""No web page can use the server: cross-site form / text POSTs get 415 before anything is
queued, and a DNS-rebinding page (a foreign Host) gets 403 on a loopback bind."""

from __future__ import annotations

import json
import time

import httpx2 as httpx
import pytest

from app.server.config import ServerConfig, split_hosts
from app.server.errors import ServerConfigError
from app.server.guard import host_name
from tests.server.test_oversized_body import connect, read_all


def chat_body(server) -> str:
    return json.dumps({"model": server.model.id, "max_tokens": 2,
                       "messages": [{"role": "user", "content": "hello there"}]})


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize("content_type", [
    "text/plain",  # fetch(..., {mode: "no-cors", body: JSON.stringify(...)})
    "text/plain;charset=UTF-8",
    "application/x-www-form-urlencoded",  # <form method=post>
    "multipart/form-data; boundary=x",
    None,
])
@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_a_post_that_is_not_json_is_415_and_queues_nothing(server, content_type, path):
    headers = {"Origin": "http://evil.example"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    body = chat_body(server) if path == "/chat/completions" else json.dumps(
        {"model": server.model.id, "prompt": "hello", "max_tokens": 2})
    response = httpx.post(f"{server.url}{path}", content=body, headers=headers)
    assert response.status_code == 415
    assert error_of(response)["code"] == "unsupported_media_type"
    assert server.api.admission.served == 0
    assert list(server.api.admission.records) == []


def test_json_with_parameters_is_accepted(server):
    response = httpx.post(f"{server.url}/chat/completions", content=chat_body(server),
                          headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert response.status_code == 200, response.text
    assert server.api.admission.served == 1


def test_a_rebinding_page_gets_403(server):
    port = server.address.port
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}",
                 f"localhost.:{port}", f"localhost:{port}x", ""):
        headers = {"Host": host, "Origin": f"http://{host}"}
        models = httpx.get(f"{server.url}/models", headers=headers)
        assert models.status_code == 403, host
        assert error_of(models)["code"] == "host_not_allowed"
        assert server.model.id not in models.text
        chat = httpx.post(f"{server.url}/chat/completions", content=chat_body(server),
                          headers={**headers, "Content-Type": "application/json"})
        assert chat.status_code == 403, host
        assert "choices" not in chat.json()
    assert server.api.admission.served == 0


def test_a_rebinding_page_with_a_large_body_still_gets_the_403_sentence(server):
    """The guard reads out the body before it answers and closes (lingering.py): a client
    that pauses mid-body would otherwise meet a reset that loses the 403."""
    body = json.dumps({"model": server.model.id, "pad": "x" * 5_000_000}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: evil.example\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    for _ in range(3):
        with connect(server) as sock:
            sock.sendall(head.encode() + body[:4_500_000])
            time.sleep(0.5)
            sock.sendall(body[4_500_000:])  # without the read-out: reset, or broken pipe
            reply = read_all(sock)
        assert reply.startswith(b"HTTP/1.1 403 ") and b"host_not_allowed" in reply
        assert b"only answers requests addressed to this computer" in reply
    assert server.api.admission.served == 0


def test_this_machines_names_are_accepted_with_or_without_the_port(server):
    port = server.address.port
    for host in ("localhost", f"localhost:{port}", "LocalHost", "127.0.0.1",
                 f"127.0.0.1:{port}", "[::1]", f"[::1]:{port}"):
        models = httpx.get(f"{server.url}/models", headers={"Host": host})
        assert models.status_code == 200, host
        assert [m["id"] for m in models.json()["data"]] == [server.model.id]
    chat = httpx.post(f"{server.url}/chat/completions", content=chat_body(server),
                      headers={"Host": f"localhost:{port}", "Content-Type": "application/json"})
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["completion_tokens"] == 2


def test_an_added_name_is_accepted(serve, gqa_model_dir):
    served = serve(gqa_model_dir, allowed_hosts=split_hosts("hearth.test, box.lan"))
    port = served.address.port
    for host in (f"hearth.test:{port}", "box.lan"):
        models = httpx.get(f"{served.url}/models", headers={"Host": host})
        assert models.status_code == 200, host
    assert httpx.get(f"{served.url}/models",
                     headers={"Host": f"evil.example:{port}"}).status_code == 403


def test_the_openai_client_still_works(server):
    reply = server.client().chat.completions.create(
        model=server.model.id, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert reply.usage.completion_tokens == 3
    streamed = server.client().completions.create(model=server.model.id, prompt="hi",
                                                  max_tokens=3, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) != ""


def test_host_header_parsing():
    assert host_name("LOCALHOST:8080") == "localhost"
    assert host_name("[::1]:80") == "[::1]"
    assert host_name("[::1]") == "[::1]"
    assert host_name("[::1") is None
    assert host_name("localhost:") is None
    assert host_name("localhost:80:80") is None


def test_an_allowed_host_must_be_a_host_name():
    for bad in ("http://x.lan", "x.lan:80", "x.lan/path", "*"):
        with pytest.raises(ServerConfigError, match="allowed host"):
            ServerConfig(allowed_hosts=(bad,)).validate()
    assert ServerConfig(allowed_hosts=("My-Box.lan",)).validate()
