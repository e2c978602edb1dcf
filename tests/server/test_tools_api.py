"""Tools, response_format, /health, routes without /v1 and CORS for the openai SDK, through
the official openai client against a real server on loopback."""

from __future__ import annotations

import json

import httpx2 as httpx
import jsonschema
import pydantic
import pytest

from tests.engine.test_constrained import SCHEMA, TOOLS
from tests.fixtures.tool_template import with_tool_template

ASK = [{"role": "user", "content": "weather in Oslo?"}]


@pytest.fixture(scope="module")
def tool_model_dir(tmp_path_factory):
    from tests.fixtures.tiny_models import build_gqa_model

    model = build_gqa_model(tmp_path_factory.mktemp("tool_model"), context_length=2048)
    return with_tool_template(model, tmp_path_factory.mktemp("tools") / "tool-model")


@pytest.fixture
def tool_server(serve, tool_model_dir):
    return serve(tool_model_dir, cors_origins=("app://my-editor", "http://localhost:3000"))


def params(name):
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


@pytest.mark.parametrize("seed", range(3))
def test_required_tool_call_comes_back_as_tool_calls(tool_server, seed):
    reply = tool_server.client().chat.completions.create(
        model=tool_server.model.id, messages=ASK, tools=TOOLS, tool_choice="required",
        temperature=1, seed=seed, max_tokens=150)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert call.type == "function" and call.id
        jsonschema.validate(json.loads(call.function.arguments), params(call.function.name))


def test_named_tool_call_streams_as_tool_call_deltas(tool_server):
    stream = tool_server.client().chat.completions.create(
        model=tool_server.model.id, messages=ASK, tools=TOOLS, temperature=1, seed=4,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False, max_tokens=150, stream=True)
    chunks = [c for c in stream if c.choices]
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    assert [d.function.name for d in deltas] == ["get_weather"]
    assert deltas[0].index == 0 and deltas[0].id
    jsonschema.validate(json.loads(deltas[0].function.arguments), params("get_weather"))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_the_tool_result_round_trip(tool_server):
    client = tool_server.client()
    first = client.chat.completions.create(
        model=tool_server.model.id, messages=ASK, tools=TOOLS, tool_choice="required",
        parallel_tool_calls=False, temperature=0, max_tokens=150)
    call = first.choices[0].message.tool_calls[0]
    history = [*ASK, first.choices[0].message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": '{"temp": 21}'}]
    second = client.chat.completions.create(
        model=tool_server.model.id, messages=history, tools=TOOLS, tool_choice="none",
        temperature=0, max_tokens=10)
    assert second.choices[0].finish_reason in ("stop", "length")
    assert second.choices[0].message.tool_calls is None
    # the replayed call and its result were rendered: the prompt grew by them
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + 10


def test_tools_on_a_model_without_a_call_format_is_a_400(server):
    with pytest.raises(Exception, match="no tool-call format"):
        server.client().chat.completions.create(model=server.model.id, messages=ASK,
                                                tools=TOOLS, max_tokens=5)


@pytest.mark.parametrize("seed", range(3))
def test_response_format_json_schema_and_json_object(server, seed):
    client = server.client()
    reply = client.chat.completions.create(
        model=server.model.id, messages=ASK, temperature=1, seed=seed, max_tokens=150,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "strict": True, "schema": SCHEMA}})
    jsonschema.validate(json.loads(reply.choices[0].message.content), SCHEMA)
    reply = client.chat.completions.create(
        model=server.model.id, messages=ASK, temperature=1, seed=seed, max_tokens=150,
        response_format={"type": "json_object"})
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


class Person(pydantic.BaseModel):
    name: str
    age: int
    ok: bool


def test_the_sdk_parse_helper_gets_a_pydantic_object(server):
    client = server.client()
    parse = getattr(getattr(client, "beta", None), "chat", None)
    parse = parse.completions.parse if parse is not None else client.chat.completions.parse
    reply = parse(model=server.model.id, messages=ASK, temperature=1, seed=1, max_tokens=150,
                  response_format=Person)
    assert isinstance(reply.choices[0].message.parsed, Person)


def test_health_and_the_routes_without_v1(server):
    base = server.url.removesuffix("/v1")
    assert httpx.get(f"{base}/health").json()["status"] == "ok"
    assert httpx.get(f"{base}/models").json()["data"][0]["id"] == server.model.id
    reply = httpx.post(f"{base}/chat/completions", json={
        "model": server.model.id, "messages": ASK, "max_tokens": 3, "temperature": 0})
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("origin", ["app://my-editor", "http://localhost:3000"])
def test_cors_preflight_accepts_the_sdk_headers(tool_server, origin):
    reply = httpx.options(f"{tool_server.url}/chat/completions", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers":
            "authorization, content-type, x-stainless-os, x-stainless-retry-count"})
    assert reply.status_code == 200
    assert reply.headers["access-control-allow-origin"] == origin
    assert "x-stainless-retry-count" in reply.headers["access-control-allow-headers"]
    other = httpx.options(f"{tool_server.url}/chat/completions", headers={
        "Origin": "app://someone-else", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "x-stainless-os"})
    assert other.status_code == 400
