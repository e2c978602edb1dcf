"""Remote engines that must not leak (issue 23, finding 6): plain http:// to another machine
needs consent; a user name and password in the address go to the secret store and show
nowhere (the sources file, the engine's name and provider line, the reply's stats, error
sentences); an older sources file is moved over on load; redirects are followed only within
the server's origin, so a 307/308 never re-POSTs a chat to another server."""

from __future__ import annotations

import base64
import json
import stat
import sys

import pytest

from app.engine.types import GenerationSettings, Message
from app.paths import data_root
from app.remote.engine import RemoteEngine
from app.remote.errors import RemoteError
from app.remote.listing import check_connection
from app.remote.sources import REMOTE_SERVICE as SERVICE
from app.remote.sources import SOURCES_NAME, SourceStore

SECRET = "Hunter2-Sekrit"
LOGIN = ("alice", SECRET)
HELLO = [Message("user", "say hello")]


def with_login(url: str) -> str:
    return url.replace("http://", f"http://alice:{SECRET}@")


def basic() -> str:
    return "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()


def chat(engine: RemoteEngine):
    chunks = list(engine.chat(HELLO, GenerationSettings()))
    return chunks, "".join(c.text for c in chunks)


def sources_text() -> str:
    return (data_root() / SOURCES_NAME).read_text(encoding="utf-8")


def test_plain_http_to_another_machine_needs_consent(memory_keyring):
    store = SourceStore()
    for url in ("http://192.0.2.1:8000/v1", "192.0.2.1:8000", "http://gpu.example.org/v1"):
        with pytest.raises(RemoteError) as caught:
            store.add("Far", url, "sk-1")
        assert caught.value.kind == "cleartext"
        assert "unencrypted" in str(caught.value) and "https://" in str(caught.value)
    assert store.list() == [] and memory_keyring.secrets == {}
    agreed = store.add("Far", "http://192.0.2.1:8000/v1", "sk-1", cleartext_ok=True)
    assert agreed.base_url == "http://192.0.2.1:8000"
    for url in ("https://gpu.example.org/v1", "http://127.0.0.1:8000", "http://[::1]:8000",
                "http://localhost:8000/v1", "http://app.localhost:8000/v1"):
        store.add("Fine", url)  # encrypted, or never leaves this machine
    assert len(store.list()) == 6


def test_a_login_in_the_address_goes_to_the_keyring_and_shows_nowhere(make_stub,
                                                                       memory_keyring):
    stub = make_stub(login=LOGIN)
    store = SourceStore()
    source = store.add("", with_login(stub.url))
    assert SECRET not in source.base_url and "alice" not in source.base_url
    assert SECRET not in source.name and SECRET.lower() not in source.id
    assert source.base_url == stub.url.removesuffix("/v1")
    assert memory_keyring.secrets == {(SERVICE, f"{source.id}:login"): json.dumps(list(LOGIN))}
    assert SECRET not in sources_text() and "alice" not in sources_text()
    if sys.platform != "win32":
        assert stat.S_IMODE((data_root() / SOURCES_NAME).stat().st_mode) == 0o600

    engine = RemoteEngine.load(source.target("stub-model"))
    chunks, text = chat(engine)
    assert text == "Hello, world!"
    assert {r.headers["authorization"] for r in stub.requests} == {basic()}
    shown = json.dumps([engine.spec.name, engine.provider_report.reasons,
                        engine.provider_report.summary(), engine.client.base_url,
                        chunks[-1].stats.as_dict()])
    assert SECRET not in shown and "alice" not in shown
    engine.close()

    with pytest.raises(RemoteError) as caught:  # a sentence naming the address
        RemoteEngine.load(source.target("no-such-model"))
    assert stub.url.removesuffix("/v1") in str(caught.value) and SECRET not in str(caught.value)
    with pytest.raises(RemoteError) as caught:
        store.add("Both", with_login(stub.url), "sk-1")
    assert "either the API key or the user name" in str(caught.value)
    assert SECRET not in str(caught.value)

    assert store.remove(source.id) and memory_keyring.secrets == {}


def test_test_connection_sends_the_login_and_never_says_it(make_stub):
    stub = make_stub(login=LOGIN)
    test = check_connection(with_login(stub.url), None)
    assert test.ok and "1 model (stub-model)" in test.message and SECRET not in test.message
    assert stub.requests[-1].headers["authorization"] == basic()
    wrong = check_connection(with_login(stub.url).replace(SECRET, f"{SECRET}-wrong"), None)
    assert wrong.kind == "auth" and "HTTP 401" in wrong.message
    assert SECRET not in wrong.message and "alice" not in wrong.message
    refused = check_connection(f"http://alice:{SECRET}@127.0.0.1:9/v1", None)
    assert refused.kind == "refused" and SECRET not in refused.message


def test_an_older_sources_file_with_a_password_in_an_address_is_moved_on_load(
        make_stub, memory_keyring):
    stub = make_stub(login=LOGIN)
    netloc = stub.url.split("://")[1].removesuffix("/v1")
    old_id = f"alice-{SECRET.lower()}-127-0-0-1-{stub.server.server_port}"
    path = data_root() / SOURCES_NAME
    path.write_text(json.dumps({"version": 1, "sources": [
        {"id": old_id, "name": f"alice:{SECRET}@{netloc}", "base_url": with_login(stub.url),
         "key_place": "keyring", "models": []},
        {"id": "other", "name": "Other", "base_url": "https://example.org", "key_place": None,
         "models": []}]}), encoding="utf-8")
    path.chmod(0o644)
    memory_keyring.set_password(SERVICE, old_id, "sk-old")

    (moved, other) = SourceStore().list()
    assert SECRET not in sources_text() and "alice" not in sources_text()
    if sys.platform != "win32":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (moved.name, moved.base_url) == (netloc, f"http://{netloc}")
    assert SECRET.lower() not in moved.id and moved.login_place == "keyring"
    assert other.id == "other" and other.login_place is None
    assert memory_keyring.secrets == {(SERVICE, moved.id): "sk-old",
                                      (SERVICE, f"{moved.id}:login"): json.dumps(list(LOGIN))}
    assert SourceStore().list() == [moved, other]  # moved once; read back the same

    engine = RemoteEngine.load(moved.target("stub-model"))
    _, text = chat(engine)
    engine.close()
    assert text == "Hello, world!"  # the login still works (Basic, as the address said)
    assert stub.requests[-1].headers["authorization"] == basic()


@pytest.mark.parametrize("status", [307, 308])
def test_a_redirect_to_another_server_is_refused_and_sends_it_nothing(make_stub, status):
    other = make_stub(api_key="sk-1")
    stub = make_stub(api_key="sk-1")
    stub.config.redirect = ("/v1/chat", f"http://127.0.0.1:{other.server.server_port}/v1/chat",
                            status)
    engine = RemoteEngine.load(SourceStore().add("Stub", stub.url, "sk-1").target("stub-model"))
    with pytest.raises(RemoteError) as caught:
        chat(engine)
    engine.close()
    assert caught.value.kind == "redirect"
    message = str(caught.value)
    assert f"127.0.0.1:{other.server.server_port}" in message
    assert "only within the same server" in message and "nothing was sent there" in message
    assert other.requests == []  # neither the chat nor the key reached the other server
    assert [r.path for r in stub.requests] == ["/v1/models", "/v1/chat/completions"]


def test_a_models_listing_redirected_elsewhere_is_refused_too(make_stub):
    other = make_stub()
    stub = make_stub(redirect=("/v1", f"http://127.0.0.1:{other.server.server_port}/v1", 302))
    test = check_connection(stub.url, "sk-1")
    assert not test.ok and test.kind == "redirect" and other.requests == []


def test_a_redirect_within_the_server_is_followed(make_stub):
    stub = make_stub(api_key="sk-1", redirect=("/old/v1", "/v1", 307))
    source = SourceStore().add("Moved", stub.url.replace("/v1", "/old/v1"), "sk-1")
    engine = RemoteEngine.load(source.target("stub-model"))
    _, text = chat(engine)
    engine.close()
    assert text == "Hello, world!"
    chats = [r for r in stub.requests if r.method == "POST"]
    assert [r.path for r in chats] == ["/old/v1/chat/completions", "/v1/chat/completions"]
    assert chats[0].body == chats[1].body  # a 307 keeps the body, on the same server
    assert chats[1].headers["authorization"] == "Bearer sk-1"
