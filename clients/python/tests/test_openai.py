"""The real ``openai`` SDK through the TeamCache transport, against a fake upstream that counts
its calls, and a real TeamCache server."""

from __future__ import annotations

import contextlib
import json
import threading

import httpx
import openai
import pytest

from teamcache import AsyncTeamCache, TeamCache, TokenCounts
from teamcache.openai import async_http_client, http_client, plan

from .conftest import eventually
from .fake_upstream import Upstream

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Say hello"}]


@pytest.fixture
def upstream():
    fake = Upstream()
    yield fake
    fake.close()


@pytest.fixture
def cache(server, token):
    with TeamCache(server.url, token) as client:
        yield client


def sdk(upstream, cache, namespace, **options):
    return openai.OpenAI(base_url=upstream.url, api_key="sk-test", max_retries=0,
                         http_client=http_client(namespace, cache, **options))


def test_the_second_call_is_served_from_teamcache(upstream, cache, namespace):
    client = sdk(upstream, cache, namespace)
    first = client.chat.completions.with_raw_response.create(model="gpt-x", messages=MESSAGES, temperature=0)
    second = client.chat.completions.with_raw_response.create(model="gpt-x", messages=MESSAGES, temperature=0)
    assert upstream.count("/chat/completions") == 1
    assert first.headers["x-teamcache"] == "miss" and second.headers["x-teamcache"] == "hit"
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content == "Hello there"
    # Every parameter that changes the answer is in the key; the user and metadata are not.
    client.chat.completions.create(model="gpt-x", messages=MESSAGES, temperature=1)
    client.chat.completions.create(model="gpt-x", messages=MESSAGES, temperature=0, user="u1", store=False)
    assert upstream.count("/chat/completions") == 2
    # tokens_saved is the usage of the replayed answers (two so far).
    assert eventually(lambda: cache.stats(namespace).tokens_saved == TokenCounts(input=22, output=14))


def test_credentials_and_base_urls_do_not_split_entries(upstream, cache, namespace):
    sdk(upstream, cache, namespace).chat.completions.create(model="gpt-x", messages=MESSAGES)
    other = openai.OpenAI(base_url=upstream.url + "/../v1", api_key="sk-another", organization="org-2",
                          max_retries=0, http_client=http_client(namespace, cache))
    raw = other.chat.completions.with_raw_response.create(model="gpt-x", messages=MESSAGES)
    assert raw.headers["x-teamcache"] == "hit" and upstream.count() == 1


def test_a_streamed_miss_arrives_incrementally_and_replays_identically(upstream, cache, namespace):
    client = sdk(upstream, cache, namespace)
    gated = [{"role": "user", "content": "gate the stream"}]
    stream = client.chat.completions.create(model="gpt-x", messages=gated, stream=True)
    chunks = iter(stream)
    first = next(chunks)
    # The upstream is still holding the rest back: the first chunk arrived before it finished.
    assert first.choices[0].delta.content == "Hel" and not upstream.gate.is_set()
    upstream.gate.set()
    words = [first.choices[0].delta.content] + [chunk.choices[0].delta.content for chunk in chunks]
    assert words == ["Hel", "lo", " there"]
    replay = client.chat.completions.with_raw_response.create(model="gpt-x", messages=gated, stream=True)
    assert replay.headers["x-teamcache"] == "hit" and replay.headers["content-type"].startswith("text/event-stream")
    assert [chunk.choices[0].delta.content for chunk in replay.parse()] == words
    assert upstream.count() == 1
    # A non-streamed call has an entry of its own.
    assert client.chat.completions.create(model="gpt-x", messages=gated).choices[0].message.content == "Hello there"
    assert upstream.count() == 2


def test_a_stream_cut_short_is_not_stored(upstream, cache, namespace):
    client = sdk(upstream, cache, namespace)
    cut = [{"role": "user", "content": "cut me off"}]
    assert len(list(client.chat.completions.create(model="gpt-x", messages=cut, stream=True))) == 1
    list(client.chat.completions.create(model="gpt-x", messages=cut, stream=True))
    assert upstream.count() == 2, "the truncated stream was not replayed"
    # A stream the caller abandons half way is not stored either.
    upstream.gate.set()
    stream = client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "half"}],
                                            stream=True)
    next(iter(stream))
    stream.close()
    list(client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "half"}], stream=True))
    assert upstream.count() == 4


def test_an_upstream_error_is_not_cached(upstream, cache, namespace):
    client = sdk(upstream, cache, namespace)
    failing = [{"role": "user", "content": "please fail"}]
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="gpt-x", messages=failing)
    assert upstream.count() == 2


def test_an_answer_or_stream_reporting_a_failure_is_not_cached(upstream, cache, namespace):
    """A 200 whose document is an error, a stream with an error event before its [DONE], and a
    202 are passed on as they came and never replayed."""
    client = sdk(upstream, cache, namespace)
    broken = [{"role": "user", "content": "broken200 please"}]
    for _ in range(2):
        client.chat.completions.with_raw_response.create(model="gpt-x", messages=broken)
    assert upstream.count() == 2
    for _ in range(2):
        # Whether the SDK raises on the event is its business: the stream is not stored either way.
        with contextlib.suppress(openai.APIError):
            list(client.chat.completions.create(model="gpt-x", messages=broken, stream=True))
    assert upstream.count() == 4
    for _ in range(2):
        assert client.chat.completions.with_raw_response.create(
            model="gpt-x", messages=[{"role": "user", "content": "accepted202"}]).status_code == 202
    assert upstream.count() == 6


def test_a_query_string_is_part_of_the_key_and_a_beta_header_passes_through(upstream, cache, namespace):
    """Azure's api-version (or any extra_query) can change the answer where the body does not
    show it: each version has its own entry. A beta-feature header is passed through uncached."""
    client = sdk(upstream, cache, namespace)
    asked = [{"role": "user", "content": "versions"}]
    for version in ("1", "2", "1", "2"):
        reply = client.chat.completions.with_raw_response.create(model="gpt-x", messages=asked,
                                                                  extra_query={"api-version": version})
        assert reply.status_code == 200
    assert upstream.count() == 2, "one call for each version, then hits"
    beta = [{"role": "user", "content": "beta"}]
    for _ in range(2):
        reply = client.chat.completions.with_raw_response.create(model="gpt-x", messages=beta,
                                                                  extra_headers={"OpenAI-Beta": "assistants=v2"})
        assert "x-teamcache" not in reply.headers or reply.headers["x-teamcache"] != "hit"
    assert upstream.count() == 4


def test_an_answer_compressed_although_identity_was_asked_reads_once(upstream, cache, namespace):
    client = sdk(upstream, cache, namespace)
    asked = [{"role": "user", "content": "gzipped please"}]
    first = client.chat.completions.create(model="gpt-x", messages=asked)
    second = client.chat.completions.with_raw_response.create(model="gpt-x", messages=asked)
    assert first.choices[0].message.content == "Hello there"
    assert second.headers["x-teamcache"] == "hit" and second.parse().choices[0].message.content == "Hello there"
    assert upstream.count() == 1


def test_only_a_refusal_of_the_usage_member_is_sent_again(upstream, cache, namespace):
    """The transport asks a streamed chat for its usage; an upstream that refuses that member gets
    the caller's request as sent (and the stream is stored). Any other 400 is the caller's answer:
    the request is not sent a second time."""
    client = sdk(upstream, cache, namespace)
    no_usage = [{"role": "user", "content": "nousage please"}]
    assert len(list(client.chat.completions.create(model="gpt-x", messages=no_usage, stream=True))) >= 1
    assert upstream.count() == 2, "refused, then sent as the caller sent it"
    list(client.chat.completions.create(model="gpt-x", messages=no_usage, stream=True))
    assert upstream.count() == 2, "stored, and replayed"
    with pytest.raises(openai.BadRequestError):
        list(client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "badrequest"}],
                                            stream=True))
    assert upstream.count() == 3


def test_twenty_concurrent_identical_calls_make_one_upstream_call(upstream, cache, namespace):
    client = sdk(upstream, cache, namespace)
    slow = [{"role": "user", "content": "slow question"}]
    answers, errors = [], []

    def ask():
        try:
            answers.append(client.chat.completions.create(model="gpt-x", messages=slow).choices[0].message.content)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and answers == ["Hello there"] * 20
    assert upstream.count() == 1


def test_the_responses_api_and_embeddings(upstream, cache, namespace):
    client = sdk(upstream, cache, namespace)
    for _ in range(2):
        response = client.responses.create(model="gpt-x", input="Say hello", instructions="be brief")
        assert response.output_text == "Hello from responses"
    deltas = []
    for _ in range(2):
        events = client.responses.create(model="gpt-x", input="Say hello", stream=True)
        deltas.append([event.delta for event in events if event.type == "response.output_text.delta"])
    assert deltas == [["Hel", "lo"], ["Hel", "lo"]]
    for _ in range(2):
        assert client.embeddings.create(model="emb", input="hello").data[0].embedding == [0.1, 0.2]
    assert upstream.count("/responses") == 2 and upstream.count("/embeddings") == 1


def test_a_dead_cache_calls_the_upstream(upstream):
    with TeamCache("http://127.0.0.1:9", "t", max_retries=0) as dead:
        client = openai.OpenAI(base_url=upstream.url, api_key="k", max_retries=0,
                               http_client=http_client("n", dead))
        for _ in range(2):
            assert client.chat.completions.create(model="gpt-x", messages=MESSAGES).choices[0].message.content
    assert upstream.count() == 2


def test_a_stale_answer_is_served_and_refreshed_in_the_background(upstream, cache, namespace):
    import time
    client = sdk(upstream, cache, namespace, ttl=1, stale_while_revalidate=60)
    client.chat.completions.create(model="gpt-x", messages=MESSAGES)
    time.sleep(1.3)
    stale = client.chat.completions.with_raw_response.create(model="gpt-x", messages=MESSAGES)
    assert stale.headers["x-teamcache"] == "hit; stale"
    assert eventually(lambda: upstream.count() == 2, timeout=10), "refreshed in the background"
    assert eventually(lambda: client.chat.completions.with_raw_response.create(
        model="gpt-x", messages=MESSAGES).headers["x-teamcache"] == "hit", timeout=10)
    assert upstream.count() == 2


def test_a_refresh_that_outlives_its_cache_client_ends_quietly(upstream, server, token, namespace):
    """The app closes its TeamCache client while a background refresh is still calling the
    model: the refresh's write fails open, instead of a RuntimeError out of its thread."""
    import time
    errors: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        cache = TeamCache(server.url, token)
        client = sdk(upstream, cache, namespace, ttl=1, stale_while_revalidate=60)
        slow = [{"role": "user", "content": "slow refresh after close"}]
        client.chat.completions.create(model="gpt-x", messages=slow)
        time.sleep(1.3)
        stale = client.chat.completions.with_raw_response.create(model="gpt-x", messages=slow)
        assert stale.headers["x-teamcache"] == "hit; stale"
        cache.close()  # the refresh is still waiting on the upstream (0.3 s)
        refreshing = [t for t in threading.enumerate() if t.name == "teamcache-refresh"]
        for thread in refreshing:
            thread.join(10)
        assert upstream.count() == 2 and errors == [], errors
    finally:
        threading.excepthook = previous


def test_no_cache_forces_a_fresh_call(upstream, cache, namespace):
    client = sdk(upstream, cache, namespace)
    client.chat.completions.create(model="gpt-x", messages=MESSAGES)
    client.chat.completions.create(model="gpt-x", messages=MESSAGES, extra_headers={"Cache-Control": "no-cache"})
    assert upstream.count() == 2


def test_the_key_leaves_out_what_does_not_change_the_answer():
    base = b'{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0'
    plain = plan("POST", "/v1/chat/completions", base + b"}")
    noisy = plan("POST", "/v1/chat/completions",
                 base + b',"user":"u","metadata":{"a":"b"},"store":true,"stream_options":{"include_usage":true}}')
    assert plain.key == noisy.key
    assert plan("POST", "/v1/chat/completions", base + b',"seed":1}').key != plain.key
    assert plan("POST", "/v1/chat/completions", base + b',"stream":true}').key != plain.key
    assert plan("GET", "/v1/models", b"") is None and plan("POST", "/v1/files", b"{}") is None
    assert plan("POST", "/v1/chat/completions", b"not json") is None


def test_openai_2_style_httpx_clients_are_supported(upstream, cache, namespace):
    # openai 3.x speaks httpx2; openai 1.x/2.x httpx: the transport is built for either.
    client = http_client(namespace, cache, http_module=httpx)
    assert isinstance(client, httpx.Client)
    request = {"model": "gpt-x", "messages": MESSAGES}
    for expected in ("miss", "hit"):
        response = client.post(upstream.url + "/chat/completions", json=request,
                                headers={"Authorization": "Bearer k"})
        assert response.status_code == 200 and response.headers["x-teamcache"] == expected
        assert response.json()["choices"][0]["message"]["content"] == "Hello there"


async def test_async_openai(upstream, server, token, namespace):
    async with AsyncTeamCache(server.url, token) as cache:
        client = openai.AsyncOpenAI(base_url=upstream.url, api_key="k", max_retries=0,
                                    http_client=async_http_client(namespace, cache))
        for _ in range(2):
            answer = await client.chat.completions.create(model="gpt-x", messages=MESSAGES)
            assert answer.choices[0].message.content == "Hello there"
        upstream.gate.set()
        streams = []
        for _ in range(2):
            stream = await client.chat.completions.create(model="gpt-x", messages=MESSAGES, stream=True)
            streams.append([chunk.choices[0].delta.content async for chunk in stream])
        assert streams[0] == streams[1] == ["Hel", "lo", " there"]
        assert upstream.count() == 2


def test_a_query_goes_into_the_key_as_a_digest_never_as_text():
    """A query may carry a credential (an API gateway's subscription key): the key, and any
    queued write holding the descriptor, get its SHA-256, not the text."""
    from teamcache.openai import _plan_of
    body = b'{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}'
    secret = httpx.Request("POST", "https://llm.example/v1/chat/completions?api-version=1&key=SECRET", content=body)
    other = httpx.Request("POST", "https://llm.example/v1/chat/completions?api-version=2&key=SECRET", content=body)
    planned, again = _plan_of(secret, body), _plan_of(other, body)
    assert planned is not None and again is not None and planned.key != again.key
    assert "SECRET" not in json.dumps(planned.descriptor) and "url_query_sha256" in planned.descriptor["params"]


def test_failure_rules_take_any_json_without_raising():
    from teamcache._openai_stream import is_failure
    assert not is_failure({"type": ["error"]}) and not is_failure({"object": "response", "status": {"a": 1}})
    assert is_failure({"type": "error"}) and is_failure({"object": "response", "status": "failed"})
    assert is_failure({"error": "text"}) and not is_failure({"error": None}) and not is_failure([1])


def test_only_a_media_type_the_service_takes_is_recorded():
    from teamcache.openai import _storable_type
    assert _storable_type("application/json; charset=utf-8") and _storable_type("text/plain\tx")
    assert not _storable_type("json") and not _storable_type("") and not _storable_type("a/b\r\nX: y")
    assert not _storable_type("a/" + "b" * 300)


@pytest.mark.parametrize(("endpoint", "text", "storable"), [
    ("/chat/completions",
     'data: {"choices":[]}\n\ndata: {"error":{"message":"overloaded"}}\n\ndata: [DONE]\n\n', False),
    ("/chat/completions", 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n', False),
    ("/responses", 'event: response.failed\ndata: {"type":"response.failed","response":{}}\n\n', False),
    ("/responses", 'data: {"type":"response.incomplete","response":{"status":"incomplete"}}\n\n', True),
    ("/chat/completions", 'data: {"choices":[{"delta":{"content":"an error in the text"}}]}\n\ndata: [DONE]\n\n', True),
    ("/chat/completions", 'data: {"object":"error","message":"engine broke"}\n\ndata: [DONE]\n\n', False),
    ("/chat/completions", 'data: {"error":"engine broke"}\n\ndata: [DONE]\n\n', False),
    ("/chat/completions", 'data: {"object":"response","status":"cancelled"}\n\ndata: [DONE]\n\n', False),
    ("/chat/completions", 'data: {"object":"response","status":"queued"}\n\ndata: [DONE]\n\n', False),
    ("/chat/completions", 'data: {"choices":[],"usage":{},"error":null}\n\ndata: [DONE]\n\n', True),
    ("/chat/completions", 'data: {"type":["error"],"usage":{}}\n\ndata: [DONE]\n\n', True),
])
def test_stream_failure_rules_are_the_gateways(endpoint, text, storable):
    """The same streams as the gateway's `anErrorEventIsNotAnAnswer`, with the same verdicts."""
    from teamcache._openai_stream import stream_outcome
    assert stream_outcome(endpoint, text)[0] is storable
