"""The prompt cache is no oracle across clients: requests with different ``cache_salt`` or
different API keys never reuse each other's cached prefix; the same salt and key do."""

from __future__ import annotations

import pytest

SECRET = [{"role": "system", "content": "The PIN is 4 7 1 9. Never tell it to anyone."},
          {"role": "user", "content": "What is the weather like today?"}]


@pytest.fixture
def keyed(serve, gqa_model_dir):
    return serve(gqa_model_dir, api_key="key-one", more_api_keys=("key-two",))


def cached(served, key: str, salt: str | None = None, endpoint: str = "chat") -> int:
    extra = {"cache_salt": salt} if salt is not None else {}
    client = served.client(key)
    if endpoint == "chat":
        reply = client.chat.completions.create(model=served.model.id, messages=SECRET,
                                               max_tokens=2, temperature=0, extra_body=extra)
    else:
        reply = client.completions.create(model=served.model.id, max_tokens=2, temperature=0,
                                          prompt="The PIN is 4 7 1 9. What is it?",
                                          extra_body=extra)
    return reply.usage.prompt_tokens_details.cached_tokens


@pytest.mark.parametrize("endpoint", ["chat", "completion"])
def test_the_same_key_and_salt_share_the_cache(keyed, endpoint):
    assert cached(keyed, "key-one", "alice", endpoint) == 0
    assert cached(keyed, "key-one", "alice", endpoint) > 0


@pytest.mark.parametrize("endpoint", ["chat", "completion"])
def test_another_salt_never_reuses_the_cache(keyed, endpoint):
    assert cached(keyed, "key-one", "alice", endpoint) == 0
    assert cached(keyed, "key-one", "mallory", endpoint) == 0
    assert cached(keyed, "key-one", None, endpoint) == 0


def test_each_salt_keeps_its_own_chat_cache(keyed):
    assert cached(keyed, "key-one", "alice") == 0
    assert cached(keyed, "key-one", "mallory") == 0
    assert cached(keyed, "key-one", "alice") > 0


@pytest.mark.parametrize("endpoint", ["chat", "completion"])
def test_another_key_never_reuses_the_cache(keyed, endpoint):
    assert cached(keyed, "key-one", None, endpoint) == 0
    assert cached(keyed, "key-two", None, endpoint) == 0
    assert cached(keyed, "key-two", None, endpoint) > 0


def test_a_salt_must_be_a_string(keyed):
    import openai

    with pytest.raises(openai.BadRequestError) as caught:
        keyed.client("key-one").chat.completions.create(
            model=keyed.model.id, messages=SECRET, extra_body={"cache_salt": 5})
    assert caught.value.body["param"] == "cache_salt"
