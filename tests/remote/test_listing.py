"""Listing remote models and "Test connection": each failure says exactly what failed."""

from __future__ import annotations

import socket
import threading

import pytest

from app.network import NetworkLog, install_guard, set_offline, uninstall_guard
from app.remote.client import OpenAIClient
from app.remote.errors import RemoteError
from app.remote.listing import check_connection, list_all
from app.remote.models import fetch_models
from app.remote.sources import SourceStore


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_connection_ok_lists_the_models(make_stub):
    stub = make_stub(models=["a", "b"])
    result = check_connection(stub.url, None)
    assert result.ok and result.models == ("a", "b")
    assert result.message.endswith(": 2 models (a, b).")


def test_connection_401_says_the_key_was_refused(make_stub):
    stub = make_stub(api_key="right")
    result = check_connection(stub.url, "wrong")
    assert (result.ok, result.kind) == (False, "auth")
    assert "refused the API key (HTTP 401)" in result.message
    assert "Invalid API key" in result.message
    assert check_connection(stub.url, "right").ok


def test_connection_without_models_endpoint_asks_for_a_typed_id(make_stub):
    result = check_connection(make_stub(models=None).url, None)
    assert (result.ok, result.kind) == (True, "no_models")
    assert "no /v1/models (HTTP 404)" in result.message and "type the model id" in result.message


def test_connection_refused():
    port = free_port()
    result = check_connection(f"http://127.0.0.1:{port}/v1", None)
    assert (result.ok, result.kind) == (False, "refused")
    assert f"nothing is listening on 127.0.0.1 port {port}" in result.message


def test_connection_tls_failure_against_a_plain_http_server(stub):
    result = check_connection(stub.url.replace("http://", "https://"), None)
    assert (result.ok, result.kind) == (False, "tls")
    assert "secure (TLS) connection" in result.message


def test_connection_dns_failure(monkeypatch):
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):
        if str(host).endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)  # no query leaves the machine
    result = check_connection("http://gpu-box.invalid:8000/v1", None)
    assert (result.ok, result.kind) == (False, "dns")
    assert "the host name gpu-box.invalid was not found (DNS lookup failed)" in result.message


def test_a_server_that_never_answers_times_out():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection (the kernel does) but never answers
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    client = OpenAIClient(f"http://127.0.0.1:{listener.getsockname()[1]}")
    try:
        with pytest.raises(RemoteError) as caught:
            fetch_models(client, timeout_s=0.3)
        assert caught.value.kind == "timeout"
        assert "did not answer within 0.3 s (timeout)" in str(caught.value)
    finally:
        client.close()
        for sock in held:
            sock.close()
        listener.close()


def test_a_bad_address_is_a_sentence_not_a_request():
    result = check_connection("ftp://example.org", None)
    assert (result.ok, result.kind) == (False, "url")
    assert "is not an address Hearth can use" in result.message


def test_listing_all_sources_keeps_each_ones_error_or_note(make_stub, memory_keyring):
    good = make_stub(models=["m1", "m2"], max_model_len=8192)
    bare = make_stub(models=None)
    store = SourceStore()
    store.add("Good", good.url)
    store.add("Bare", bare.url, models=["typed-model"])
    store.add("Gone", f"http://127.0.0.1:{free_port()}")
    listings = {listing.source.name: listing for listing in list_all(store)}
    assert [m.model_id for m in listings["Good"].models] == ["m1", "m2"]
    assert listings["Good"].models[0].context_length == 8192
    assert listings["Good"].models[0].target == "remote:good/m1"
    assert listings["Good"].models[0].label == "m1 · Good (remote)"
    assert [m.model_id for m in listings["Bare"].models] == ["typed-model"]
    assert listings["Bare"].models[0].typed and "has no /v1/models" in listings["Bare"].note
    assert listings["Gone"].models == () and "refused the connection" in listings["Gone"].error


def test_offline_the_connection_test_says_so():
    uninstall_guard()
    install_guard(NetworkLog(capacity=10), offline=False)
    set_offline(True)
    try:
        result = check_connection("http://192.0.2.10:8000/v1", None)
    finally:
        set_offline(False)
        uninstall_guard()
    assert (result.ok, result.kind) == (False, "offline")
    assert "offline mode is on" in result.message
