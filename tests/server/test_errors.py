"""Errors in OpenAI's shape and status codes, and the server's safety defaults."""

from __future__ import annotations

import json
import threading

import httpx2 as httpx
import openai
import pytest

from app.server.config import ServerConfig
from app.server.errors import ServerConfigError

HELLO = [{"role": "user", "content": "hello there"}]


def post(server, body, path="/chat/completions", **kwargs):
    return httpx.post(f"{server.url}{path}", content=body,
                      headers={"Content-Type": "application/json", **kwargs.pop("headers", {})},
                      **kwargs)


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_unknown_model_is_404(server):
    with pytest.raises(openai.NotFoundError) as caught:
        server.client().chat.completions.create(model="gpt-4o", messages=HELLO)
    assert caught.value.status_code == 404
    assert caught.value.body["code"] == "model_not_found"
    assert caught.value.body["param"] == "model"
    with pytest.raises(openai.NotFoundError):
        server.client().models.retrieve("gpt-4o")


def test_api_key_is_required_when_set(serve, gqa_model_dir):
    served = serve(gqa_model_dir, api_key="s3cret")
    with pytest.raises(openai.AuthenticationError) as caught:
        served.client("wrong").chat.completions.create(model=served.model.id, messages=HELLO)
    assert caught.value.status_code == 401
    assert caught.value.body["code"] == "invalid_api_key"
    assert httpx.get(f"{served.url}/models").status_code == 401
    reply = served.client("s3cret").chat.completions.create(
        model=served.model.id, messages=HELLO, max_tokens=3)
    assert reply.usage.completion_tokens == 3


def test_over_long_prompt_is_context_length_exceeded(server):
    client = server.client()
    long_text = " ".join(f"word{i}" for i in range(600))  # the tiny model holds 512 tokens
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=server.model.id,
                                       messages=[{"role": "user", "content": long_text}])
    assert caught.value.body["code"] == "context_length_exceeded"
    assert caught.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=server.model.id, messages=HELLO, max_tokens=600)
    assert caught.value.body["code"] == "context_length_exceeded"
    assert caught.value.body["param"] == "max_tokens"
    assert "512" in caught.value.body["message"]


@pytest.mark.parametrize(("body", "param"), [
    ('{"model": "m", "messages": "hello"}', "messages"),
    ('{"model": "m", "messages": []}', "messages"),
    ('{"model": "m", "messages": [{"role": "robot", "content": "x"}]}', "messages[0].role"),
    ('{"model": "m", "messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
    ('{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}',
     "messages[0].content[0]"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
     "temperature"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
     "max_tokens"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 99}', "n"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": 3}',
     "logprobs"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}',
     "top_logprobs"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": [1]}', "stop"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
     "stream"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]}', "tools[0]"),
    ('{"messages": [{"role": "user", "content": "x"}]}', "model"),
])
def test_wrong_fields_are_400_naming_the_field(server, body, param):
    response = post(server, body)
    assert response.status_code == 400
    error = error_of(response)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("body", ["{not json", "[1, 2]", "\xff\xfe"])
def test_malformed_body_is_400(server, body):
    response = post(server, body.encode("latin-1"))
    assert response.status_code == 400
    assert error_of(response)["message"]


def test_body_and_message_limits(serve, gqa_model_dir):
    served = serve(gqa_model_dir, max_body_bytes=4096, max_messages=3)
    response = post(served, '{"model": "m", "messages": [], "pad": "' + "x" * 5000 + '"}')
    assert response.status_code == 413
    many = ",".join(['{"role": "user", "content": "x"}'] * 4)
    response = post(served, f'{{"model": "{served.model.id}", "messages": [{many}]}}')
    assert response.status_code == 400 and error_of(response)["param"] == "messages"


def test_unknown_route_is_404_in_openai_shape(server):
    response = httpx.get(f"{server.url}/no-such-route")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_queue_full_is_429_with_retry_after(serve, gqa_model_dir):
    served = serve(gqa_model_dir, queue=1)  # one running + one waiting
    gate = served.block_engine()
    results = []

    def ask():
        reply = served.client().chat.completions.create(
            model=served.model.id, messages=HELLO, max_tokens=4)
        results.append(reply.usage.completion_tokens)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = threading.Event()
    while served.api.admission.active < 2 and not deadline.wait(0.01):
        pass
    with pytest.raises(openai.RateLimitError) as caught:
        served.client().chat.completions.create(model=served.model.id, messages=HELLO)
    assert caught.value.status_code == 429
    assert int(caught.value.response.headers["Retry-After"]) >= 1
    assert caught.value.body["code"] == "rate_limit_exceeded"
    gate.set()
    for t in threads:
        t.join(30)
    assert results == [4, 4]  # the admitted ones were served, in turn


def test_draining_server_answers_503_with_retry_after(server):
    server.api.admission.drain()
    with pytest.raises(openai.InternalServerError) as caught:
        server.client().chat.completions.create(model=server.model.id, messages=HELLO)
    assert caught.value.status_code == 503
    assert caught.value.response.headers["Retry-After"]


def test_cors_is_off_unless_origins_are_named(serve, server, gqa_model_dir):
    preflight = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"}
    plain = httpx.options(f"{server.url}/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in plain.headers
    served = serve(gqa_model_dir, cors_origins=("http://localhost:3000",))
    allowed = httpx.options(f"{served.url}/chat/completions", headers=preflight)
    assert allowed.headers["access-control-allow-origin"] == "http://localhost:3000"
    other = httpx.options(f"{served.url}/chat/completions",
                          headers={**preflight, "Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in other.headers


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::"])
def test_non_loopback_host_needs_an_api_key(host):
    with pytest.raises(ServerConfigError, match="without an API key"):
        ServerConfig(host=host).validate()
    assert ServerConfig(host=host, api_key="k").validate().host == host
    assert ServerConfig(host="localhost").validate().api_key is None


def test_cors_wildcard_is_refused():
    with pytest.raises(ServerConfigError, match="origin"):
        ServerConfig(cors_origins=("*",)).validate()


@pytest.mark.parametrize("body", [
    '{"model": "m", "messages": [], "seed": ' + "9" * 5000 + "}",
    "[" * 100_000 + "]" * 100_000,
    '{"model": "m", "messages": [], "metadata": ' + '{"a": ' * 900 + "1" + "}" * 900 + "}",
])
def test_huge_numbers_and_deep_nesting_are_400_not_500(server, body):
    response = post(server, body)
    assert response.status_code == 400, response.text[:200]
    assert error_of(response)["type"] == "invalid_request_error"


@pytest.mark.parametrize("field", ["echo", "best_of", "suffix"])
def test_echo_and_best_of_true_are_refused(server, field):
    body = json.dumps({"model": server.model.id, "prompt": "hi", "max_tokens": 2, field: True})
    response = post(server, body, path="/completions")
    assert response.status_code == 400
    assert error_of(response)["param"] == field
