"""The gateway with the real ``openai`` and ``anthropic`` SDKs, pointed at it by their base URL
(no TeamCache code in the app), against a real ``teamcache serve`` and a fake upstream: repeats
are hits, streams replay, every cached endpoint, the server-held key, and one entry shared
with the Python transport for the same request."""

from __future__ import annotations

import uuid

import anthropic
import openai
import pytest

from teamcache import TeamCache, TokenCounts
from teamcache.openai import http_client

from .conftest import SERVER_HELD_KEY, eventually
from .fake_upstream import Upstream


def unique(word: str) -> str:
    return f"{word} {uuid.uuid4().hex[:10]}"


def calls(upstream: Upstream, marker: str) -> list[dict]:
    with upstream.lock:
        return [call for call in upstream.calls if marker in (call.get("text") or "")]


def gateway(server, namespace: str, upstream: str = "fake") -> str:
    return f"{server.url}/v1/caches/{namespace}/gateway/{upstream}"


@pytest.fixture
def sdk(server, token, namespace):
    client = openai.OpenAI(base_url=gateway(server, namespace), api_key="sk-caller-python", max_retries=0,
                           default_headers={"TeamCache-Authorization": f"Bearer {token}"})
    yield client
    client.close()


def test_a_repeat_is_a_hit_and_the_callers_key_is_forwarded(sdk, gateway_upstream, server, token, namespace):
    prompt = unique("hello")
    messages = [{"role": "user", "content": prompt}]
    first = sdk.chat.completions.with_raw_response.create(model="gpt-x", messages=messages)
    second = sdk.chat.completions.with_raw_response.create(model="gpt-x", messages=messages)
    assert first.headers["x-teamcache"] == "miss" and second.headers["x-teamcache"] == "hit"
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content == "Hello there"
    [call] = calls(gateway_upstream, prompt)
    assert call["headers"]["authorization"] == "Bearer sk-caller-python"
    assert "teamcache-authorization" not in call["headers"]
    assert token not in str(call["headers"])
    with TeamCache(server.url, token) as cache:
        assert eventually(lambda: cache.stats(namespace).tokens_saved == TokenCounts(input=11, output=7))


def test_a_stream_is_relayed_and_replayed_without_the_usage_it_asked_for(sdk, gateway_upstream):
    prompt = unique("stream")
    messages = [{"role": "user", "content": prompt}]
    texts = []
    for _ in range(2):
        chunks = list(sdk.chat.completions.create(model="gpt-x", messages=messages, stream=True))
        assert all(chunk.choices for chunk in chunks), "the usage-only chunk the gateway asked for is not relayed"
        texts.append("".join(chunk.choices[0].delta.content or "" for chunk in chunks))
    assert texts == ["Hello there", "Hello there"]
    [call] = calls(gateway_upstream, prompt)
    assert call["body"]["stream_options"] == {"include_usage": True}
    # A caller that asks for usage gets it, from the upstream and from the replay alike.
    asked = unique("usage")
    for _ in range(2):
        chunks = list(sdk.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": asked}],
                                                  stream=True, stream_options={"include_usage": True}))
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
    assert len(calls(gateway_upstream, asked)) == 1


def test_responses_embeddings_and_completions_are_cached(sdk, gateway_upstream):
    prompt = unique("responses")
    for _ in range(2):
        assert sdk.responses.create(model="gpt-x", input=prompt).output_text == "Hello from responses"
    streamed = unique("responses stream")
    for _ in range(2):
        events = list(sdk.responses.create(model="gpt-x", input=streamed, stream=True))
        assert events[-1].type == "response.completed"
    embedded = unique("embeddings")
    for _ in range(2):
        assert sdk.embeddings.create(model="emb-x", input=embedded).data[0].embedding == [0.1, 0.2]
    completed = unique("completions")
    for _ in range(2):
        assert sdk.completions.create(model="gpt-x", prompt=completed).choices[0].text == "Hello"
    for marker in (prompt, streamed, embedded, completed):
        assert len(calls(gateway_upstream, marker)) == 1, marker


def test_anthropic_messages_streamed_and_not(server, token, namespace, gateway_upstream):
    client = anthropic.Anthropic(base_url=gateway(server, namespace, "fakeclaude"), api_key="sk-ant-caller",
                                 max_retries=0, default_headers={"TeamCache-Authorization": f"Bearer {token}"})
    prompt = unique("claude")
    messages = [{"role": "user", "content": prompt}]
    for _ in range(2):
        answer = client.messages.create(model="claude-x", max_tokens=64, system="be brief", messages=messages)
        assert answer.content[0].text == "Hello there" and answer.usage.output_tokens == 6
    streamed = unique("claude stream")
    for _ in range(2):
        with client.messages.stream(model="claude-x", max_tokens=64,
                                    messages=[{"role": "user", "content": streamed}]) as stream:
            assert "".join(stream.text_stream) == "Hello there"
            assert stream.get_final_message().usage.output_tokens == 6
    assert len(calls(gateway_upstream, prompt)) == 1 and len(calls(gateway_upstream, streamed)) == 1
    [call] = calls(gateway_upstream, streamed)
    # The SDK sends its key as x-api-key or (2.x) as a bearer token: forwarded as sent.
    sent = call["headers"].get("x-api-key") or call["headers"].get("authorization")
    assert sent in ("sk-ant-caller", "Bearer sk-ant-caller") and call["path"] == "/v1/messages"
    client.close()


def test_the_server_held_key_stands_in_for_the_token(server, namespace, gateway_upstream):
    # The app holds only its TeamCache token, given as the SDK's API key.
    token = server.token(scopes="read,write", namespaces=namespace)
    client = openai.OpenAI(base_url=gateway(server, namespace, "keyed"), api_key=token, max_retries=0)
    prompt = unique("keyed")
    assert client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": prompt}])
    [call] = calls(gateway_upstream, prompt)
    assert call["headers"]["authorization"] == f"Bearer {SERVER_HELD_KEY}"
    claude = anthropic.Anthropic(base_url=gateway(server, namespace, "keyedclaude"), api_key=token, max_retries=0)
    asked = unique("keyed claude")
    assert claude.messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": asked}])
    [call] = calls(gateway_upstream, asked)
    assert call["headers"]["x-api-key"] == SERVER_HELD_KEY and "authorization" not in call["headers"]
    # Where no key is held, the token is refused, never forwarded.
    bare = openai.OpenAI(base_url=gateway(server, namespace), api_key=token, max_retries=0)
    refused = unique("refused")
    with pytest.raises(openai.AuthenticationError):
        bare.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": refused}])
    assert calls(gateway_upstream, refused) == []


def test_the_gateway_and_the_transport_share_one_entry(sdk, server, token, namespace, gateway_upstream):
    prompt = unique("shared")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt}]
    with TeamCache(server.url, token) as cache:
        transported = openai.OpenAI(base_url=gateway_upstream.url, api_key="sk-direct", max_retries=0,
                                    http_client=http_client(namespace, cache))
        first = transported.chat.completions.with_raw_response.create(model="gpt-x", messages=messages,
                                                                      temperature=0)
        assert first.headers["x-teamcache"] == "miss"
    through = sdk.chat.completions.with_raw_response.create(model="gpt-x", messages=messages, temperature=0)
    assert through.headers["x-teamcache"] == "hit"
    assert len(calls(gateway_upstream, prompt)) == 1
    # And the other way: what the gateway stored, the transport replays (streamed too).
    for stream in (False, True):
        other = [{"role": "user", "content": unique("shared back")}]
        if stream:
            first_text = "".join(c.choices[0].delta.content or "" for c in
                                 sdk.chat.completions.create(model="gpt-x", messages=other, stream=True))
        else:
            first_text = sdk.chat.completions.create(model="gpt-x", messages=other).choices[0].message.content
        with TeamCache(server.url, token) as cache:
            transported = openai.OpenAI(base_url=gateway_upstream.url, api_key="sk-direct", max_retries=0,
                                        http_client=http_client(namespace, cache))
            if stream:
                replayed = "".join(c.choices[0].delta.content or "" for c in
                                   transported.chat.completions.create(model="gpt-x", messages=other, stream=True))
            else:
                raw = transported.chat.completions.with_raw_response.create(model="gpt-x", messages=other)
                assert raw.headers["x-teamcache"] == "hit"
                replayed = raw.parse().choices[0].message.content
        assert replayed == first_text == "Hello there"
        assert len(calls(gateway_upstream, other[0]["content"])) == 1
