"""A cache must never make a call slower, costlier or less reliable than no cache: each entry
point against a TeamCache that never answers, one that is killed and comes back, one that
refuses the token, and a cache that raises whatever it raises."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import socket
import threading
import time

import openai
import pytest
from openai.types.chat import ChatCompletion

from teamcache import (
    AsyncTeamCache,
    CircuitBreaker,
    ConfigurationError,
    Lease,
    TeamCache,
    TokenCounts,
)
from teamcache.openai import async_http_client, http_client

from .conftest import HUNG, eventually, free_port
from .fake_upstream import Upstream
from .stand_in import StandIn

MESSAGES = [{"role": "user", "content": "Say hello"}]


class Frozen:
    """A TCP server that accepts connections and never answers (a frozen TeamCache)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.held.append(connection)

    def close(self) -> None:
        self.sock.close()
        for connection in self.held:
            connection.close()


class Switch:
    """A TCP proxy to the real server that can be turned off (refusing) and on again: a
    TeamCache killed and restarted."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.listener: socket.socket | None = None
        self.open: list[socket.socket] = []
        self.on()

    def on(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def off(self) -> None:
        """Refuses new connections and cuts the open ones (a killed process)."""
        if self.listener is not None:
            # shutdown first: a close alone does not wake the thread blocked in accept().
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
            self.listener = None
        for end in self.open:
            try:
                end.shutdown(socket.SHUT_RDWR)
                end.close()
            except OSError:
                pass
        self.open = []

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def upstream():
    fake = Upstream()
    yield fake
    fake.close()


@pytest.fixture
def frozen():
    server = Frozen()
    yield server
    server.close()


def timed(call):
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def test_a_frozen_cache_costs_one_call_the_short_deadline_then_nothing(frozen, namespace):
    cache = TeamCache(frozen.url, "tc_x", lookup_timeout=0.3, circuit_breaker=CircuitBreaker(cooldown=30))
    calls = []
    descriptor = {"model": "m", "prompt": "p"}
    answer, first = timed(lambda: cache.cached(namespace, descriptor, lambda: calls.append(1) or "a"))
    assert answer == "a" and first < 1.0, f"the first call paid {first:.2f} s"
    for _ in range(5):
        answer, later = timed(lambda: cache.cached(namespace, {"model": "m", "prompt": "p"}, lambda: "b"))
        assert answer == "b" and later < 0.05, f"a call with the breaker open paid {later:.3f} s"
    health = cache.cache_health
    assert health.state == "open" and health.skipped >= 5 and "timed out" in (health.last_error or "")


def test_the_openai_transport_marks_calls_that_bypass_a_frozen_cache(frozen, upstream, namespace):
    cache = TeamCache(frozen.url, "tc_x", lookup_timeout=0.3, circuit_breaker=CircuitBreaker(cooldown=30))
    client = openai.OpenAI(base_url=upstream.url, api_key="sk-test", max_retries=0,
                           http_client=http_client(namespace, cache))
    first, paid = timed(lambda: client.chat.completions.with_raw_response.create(model="gpt-x", messages=MESSAGES))
    assert paid < 1.0 and first.headers["x-teamcache"] == "bypass; reason=timeout"
    second, paid = timed(lambda: client.chat.completions.with_raw_response.create(model="gpt-x", messages=MESSAGES))
    assert paid < 0.2 and second.headers["x-teamcache"] == "bypass; reason=breaker-open"
    assert second.parse().choices[0].message.content == "Hello there" and upstream.count() == 2
    transport = client._client._transport  # noqa: SLF001 - the transport's public health
    assert transport.health.state == "open" and transport.bypassed == 2


def test_a_waiting_lookup_is_not_held_by_a_frozen_cache(frozen, namespace):
    """The filler of a burst waits for nothing; a frozen cache must not cost the wait (30 s)."""
    cache = TeamCache(frozen.url, "tc_x", lookup_timeout=0.3)
    answer, paid = timed(lambda: cache.cached(namespace, {"model": "m", "prompt": "w"}, lambda: "x", wait=30))
    assert answer == "x" and paid < 1.0


def test_a_killed_and_restarted_cache_is_used_again_after_a_probe(server, token, namespace):
    switch = Switch(int(server.url.rsplit(":", 1)[1]))
    cache = TeamCache(switch.url, token, backoff=0.01, circuit_breaker=CircuitBreaker(cooldown=0.5))
    descriptor = {"model": "m", "prompt": "comes back"}
    assert cache.cached(namespace, descriptor, lambda: "stored") == "stored"
    switch.off()
    answers = [cache.cached(namespace, descriptor, lambda: "uncached") for _ in range(3)]
    assert answers == ["uncached"] * 3 and cache.cache_health.state == "open"
    switch.on()
    assert eventually(lambda: cache.cached(namespace, descriptor, lambda: "uncached") == "stored", timeout=5)
    assert cache.cache_health.state == "closed"
    switch.off()


def test_a_refused_token_says_what_is_wrong_and_strict_raises(server, namespace, caplog, upstream):
    wrong = TeamCache(server.url, "tc_" + "1" * 64)
    assert wrong.cached(namespace, {"model": "m", "prompt": "t"}, lambda: "paid") == "paid"
    health = wrong.cache_health
    assert health.misconfiguration and "refused" in health.misconfiguration
    assert any("misconfigured" in record.getMessage() for record in caplog.records)
    client = openai.OpenAI(base_url=upstream.url, api_key="sk-test", max_retries=0,
                           http_client=http_client(namespace, TeamCache(server.url, "tc_" + "2" * 64)))
    raw = client.chat.completions.with_raw_response.create(model="gpt-x", messages=MESSAGES)
    assert raw.headers["x-teamcache"] == "bypass; reason=unauthorized"
    strict = TeamCache(server.url, "tc_" + "3" * 64, strict=True)
    with pytest.raises(ConfigurationError) as refused:
        strict.cached(namespace, {"model": "m", "prompt": "t"}, lambda: "paid")
    assert refused.value.reason == "unauthorized"


@dataclasses.dataclass
class Answer:
    text: str
    score: float


class Raising(TeamCache):
    """A cache whose every call raises `error`."""

    def __init__(self, error: BaseException) -> None:
        super().__init__("http://127.0.0.1:9", "t")
        self.error = error

    def _run(self, call):  # type: ignore[override]
        raise self.error


@pytest.mark.parametrize("error", [RuntimeError("loop closed"), ValueError("bad"), KeyError("k"),
                                   ConnectionResetError(), TimeoutError(), OSError("disk")])
def test_langchain_never_fails_the_model_call_whatever_the_cache_raises(error):
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from teamcache.langchain import TeamCacheLLMCache

    cache = TeamCacheLLMCache(namespace="lc", cache=Raising(error))
    model = FakeListChatModel(responses=["fine"], cache=cache)
    assert model.invoke("hello").content == "fine"
    assert cache.cache_failures >= 1


def test_langchain_async_survives_a_second_event_loop(server, token, namespace):
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from teamcache.langchain import TeamCacheLLMCache

    cache = TeamCacheLLMCache(namespace=namespace, base_url=server.url, token=token)
    model = FakeListChatModel(responses=["one", "two", "three"], cache=cache)
    assert asyncio.run(model.ainvoke("same prompt")).content == "one"
    # A second loop: the first loop's client (and its connections) are closed with it.
    assert asyncio.run(model.ainvoke("same prompt")).content == "one"
    assert cache.cache_failures == 0


def test_cached_stores_pydantic_models_and_dataclasses(server, token, namespace):
    cache = TeamCache(server.url, token)
    calls = []

    @cache.cached(namespace, descriptor=lambda p: {"model": "gpt-x", "prompt": p})
    def complete(prompt: str) -> ChatCompletion:
        calls.append(prompt)
        return ChatCompletion.model_validate({
            "id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-x",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": prompt}}]})

    first, second = complete("hi"), complete("hi")
    assert isinstance(second, ChatCompletion) and second == first and calls == ["hi"]

    @cache.cached(namespace, descriptor=lambda p: {"model": "dc", "prompt": p})
    def answer(prompt: str) -> Answer:
        calls.append(prompt)
        return Answer(prompt, 0.5)

    assert answer("q") == answer("q") == Answer("q", 0.5) and calls == ["hi", "q"]
    # Without a declared type, a stored model is not decoded from the shared cache's word: called.
    untyped = cache.cached(namespace, {"model": "gpt-x", "prompt": "hi"}, lambda: "called")
    assert untyped == "called"


def test_async_cached_fails_open_against_a_frozen_cache(frozen, namespace):
    async def run() -> tuple[str, float]:
        cache = AsyncTeamCache(frozen.url, "t", lookup_timeout=0.3)

        async def call() -> str:
            return "a"
        started = time.monotonic()
        answer = await cache.cached(namespace, {"model": "m", "prompt": "p"}, call)
        await cache.aclose()
        return answer, time.monotonic() - started

    answer, paid = asyncio.run(run())
    assert answer == "a" and paid < 1.0


def test_streamed_calls_without_usage_still_count_tokens_saved(upstream, server, token, namespace):
    cache = TeamCache(server.url, token)
    client = openai.OpenAI(base_url=upstream.url, api_key="sk-test", max_retries=0,
                           http_client=http_client(namespace, cache))

    def stream() -> list:
        return list(client.chat.completions.create(model="gpt-x", messages=MESSAGES, stream=True))

    first, second = stream(), stream()
    # The upstream was asked for usage; the caller, who did not ask, sees no usage-only chunk.
    assert upstream.calls[0]["body"]["stream_options"] == {"include_usage": True}
    assert all(chunk.choices for chunk in first) and all(chunk.choices for chunk in second)
    assert "".join(c.choices[0].delta.content or "" for c in second) == "Hello there" and upstream.count() == 1
    assert eventually(lambda: cache.stats(namespace).tokens_saved == TokenCounts(input=11, output=7))


#: How a TeamCache can be sick: refusing connections, never answering, refusing the token, or
#: named by a name whose lookup hangs (its resolver unreachable; the ``resolver`` fixture).
SICKNESSES = ["refused", "frozen", "unauthorized", "hung resolver"]


def sick_url(sickness: str, frozen: Frozen, server) -> str:
    return {"refused": f"http://127.0.0.1:{free_port()}", "frozen": frozen.url, "unauthorized": server.url,
            "hung resolver": f"http://{HUNG}:9"}[sickness]


@pytest.mark.parametrize("sickness", SICKNESSES)
def test_langchain_goes_on_at_once_whatever_the_cache(sickness, frozen, server, resolver):
    """The LangChain cache against a real sick TeamCache, not a raising stand-in: refusing
    connections, never answering, refusing the token or named by a name whose lookup hangs, the
    model is called and answers, sync and async, within the lookup deadline."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from teamcache.langchain import TeamCacheLLMCache

    url = sick_url(sickness, frozen, server)
    cache = TeamCacheLLMCache(namespace="lc-sick", cache=TeamCache(url, "tc_" + "4" * 64, lookup_timeout=0.3,
                                                                   circuit_breaker=CircuitBreaker(cooldown=30)))
    model = FakeListChatModel(responses=["fine", "again"], cache=cache)
    answer, paid = timed(lambda: model.invoke("hello"))
    assert answer.content == "fine"
    assert paid < 1.0, f"the model call paid {paid:.2f} s for a sick cache"
    answer, paid = timed(lambda: asyncio.run(model.ainvoke("hello again")))
    assert answer.content == "again"
    assert paid < 1.0, f"the async model call paid {paid:.2f} s for a sick cache"


@pytest.mark.parametrize("sickness", SICKNESSES)
@pytest.mark.parametrize("endpoint", ["completions", "responses"])
def test_newly_cached_endpoints_go_on_at_once_whatever_the_cache(sickness, endpoint, frozen, server, upstream,
                                                                 namespace, resolver):
    """`completions` (cached since the gateway's shared mapping) and `responses` with numbers as
    written: with TeamCache refusing connections, never answering, refusing the token or named
    by a name whose lookup hangs, the call is made and answered, within the lookup deadline."""
    url = sick_url(sickness, frozen, server)
    cache = TeamCache(url, "tc_" + "4" * 64, lookup_timeout=0.3, circuit_breaker=CircuitBreaker(cooldown=30))
    client = openai.OpenAI(base_url=upstream.url, api_key="sk-test", max_retries=0,
                           http_client=http_client(namespace, cache))
    if endpoint == "completions":
        raw, paid = timed(lambda: client.completions.with_raw_response.create(model="gpt-x", prompt="hi",
                                                                             temperature=0.70))
        assert raw.parse().choices[0].text == "Hello"
    else:
        raw, paid = timed(lambda: client.responses.with_raw_response.create(model="gpt-x", input="hi",
                                                                           temperature=0.70))
        assert raw.parse().output_text == "Hello from responses"
    assert paid < 1.0, f"the call paid {paid:.2f} s for a sick cache"
    assert raw.headers["x-teamcache"].startswith("bypass; reason=")
    assert upstream.count() == 1


@pytest.mark.parametrize("sickness", SICKNESSES)
def test_the_async_transport_goes_on_for_completions_whatever_the_cache(sickness, frozen, server, upstream,
                                                                        namespace, resolver):
    url = sick_url(sickness, frozen, server)

    async def call():
        cache = AsyncTeamCache(url, "tc_" + "5" * 64, lookup_timeout=0.3,
                               circuit_breaker=CircuitBreaker(cooldown=30))
        client = openai.AsyncOpenAI(base_url=upstream.url, api_key="sk-test", max_retries=0,
                                    http_client=async_http_client(namespace, cache))
        started = time.monotonic()
        raw = await client.completions.with_raw_response.create(model="gpt-x", prompt="hi")
        return raw, time.monotonic() - started

    raw, paid = asyncio.run(call())
    assert raw.parse().choices[0].text == "Hello" and paid < 1.0
    assert raw.headers["x-teamcache"].startswith("bypass; reason=")


def _writes_sick(kind: str) -> StandIn:
    """A cache whose lookups answer at once (a miss) and whose writes stall 5 s (its primary
    stuck while a standby answers reads), or are refused 503 with Retry-After: 1."""
    def answer(_method: str, path: str) -> tuple[int, dict[str, str], bytes]:
        if path.endswith("/lookup"):
            return 200, {}, b'{"hit":false}'
        if kind == "503":
            return 503, {"Retry-After": "1"}, b'{"title":"busy","status":503}'
        return 200, {}, b'{"key":"k","etag":"e","created":true}'
    return StandIn(answer, delay=lambda _method, path: 5.0 if kind == "stall" and not path.endswith("/lookup") else 0)


@pytest.mark.parametrize("kind", ["stall", "503"])
def test_a_cache_slow_to_write_costs_a_paid_call_at_most_the_write_deadline(kind):
    """The write after a paid call is on its caller's path: it gets the short write deadline
    (1 s by default) and no Retry-After or backoff sleeps, whatever the client's timeout."""
    sick = _writes_sick(kind)
    cache = TeamCache(sick.url, "tc_x", timeout=30, backoff=1, circuit_breaker=False)
    try:
        answer, took = timed(lambda: cache.cached("ns", {"model": "m", "prompt": "p"}, lambda: "paid"))
        assert answer == "paid" and took < 1.8, took
    finally:
        cache.close()
        sick.close()


@pytest.mark.parametrize("kind", ["stall", "503"])
def test_an_async_cache_slow_to_write_costs_a_paid_call_at_most_the_write_deadline(kind):
    sick = _writes_sick(kind)

    async def run() -> tuple[str, float]:
        cache = AsyncTeamCache(sick.url, "tc_x", timeout=30, backoff=1, circuit_breaker=False)
        try:
            started = time.monotonic()
            answer = await cache.cached("ns", {"model": "m", "prompt": "p"}, lambda: _paid())
            return answer, time.monotonic() - started
        finally:
            await cache.aclose()

    try:
        answer, took = asyncio.run(run())
        assert answer == "paid" and took < 1.8, took
    finally:
        sick.close()


async def _paid() -> str:
    return "paid"


def test_background_work_keeps_the_clients_timeout_inside_a_callers_write():
    """A refresh nobody waits for runs through the same fill as a caller's, which marks its
    write as on a caller's path: background work keeps the client's timeout and retries."""
    from teamcache import _operations as op
    from teamcache._settings import _Settings, in_background, on_callers_path
    settings = _Settings("http://127.0.0.1:1", None, 5.0, 2, 0.1, 5.0)
    write = op.release("ns", "k", Lease(id="x", expires_in=1))
    assert settings.timeout_for(write).read == 5.0
    with on_callers_path():
        assert settings.timeout_for(write).read == 1.0
    with in_background(), on_callers_path():
        assert settings.timeout_for(write).read == 5.0


def test_a_write_the_service_refuses_gives_its_lease_back(server, token, namespace):
    """A result whose metadata the service refuses (422), or one past the namespace's byte cap
    (507): the lease is let go at once, so the next caller is handed it instead of waiting for it
    to expire."""
    cache = TeamCache(server.url, token)
    descriptor = {"model": "m", "prompt": "refused write"}
    assert cache.cached(namespace, descriptor, lambda: "paid", usage=lambda _r: {"content_type": "json"}) == "paid"
    found = cache.lookup(namespace, descriptor, lease=30)
    assert not found.hit and found.lease is not None and not found.pending
    cache.set_settings(namespace, max_bytes=1000)
    large = {"model": "m", "prompt": "past the cap"}
    answer = base64.b64encode(os.urandom(6000)).decode()  # does not compress below the cap
    assert cache.cached(namespace, large, lambda: answer) == answer
    found = cache.lookup(namespace, large, lease=30)
    assert not found.hit and found.lease is not None and not found.pending
    cache.close()
