"""The client against a real server: every route, problems as exceptions, retries, the keys."""

from __future__ import annotations

import asyncio
import gzip
import http.server
import json
import pathlib
import threading
import time

import httpx
import pytest

from teamcache import (
    AsyncTeamCache,
    DescriptorError,
    Entry,
    EntryMiss,
    NamespaceSettings,
    ProblemError,
    TeamCache,
    TransportError,
    descriptor_key,
)
from teamcache._json import loads

from .conftest import eventually, free_port

VECTORS = json.loads((pathlib.Path(__file__).parent / "vectors" / "descriptor_keys.json").read_text())["vectors"]


@pytest.fixture
def cache(server, token):
    with TeamCache(server.url, token) as client:
        yield client


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["key"][:12])
def test_descriptor_keys_match_the_shared_vectors(vector):
    assert descriptor_key(loads(vector["descriptor"])) == vector["key"]


def test_the_readme_worked_example_byte_for_byte():
    descriptor = {"model": "gpt-4o-mini", "prompt": "  Summarise: the cat sat.\r\n",
                  "params": {"temperature": loads("0.20"), "max_tokens": 64}, "version": "v3"}
    assert descriptor_key(descriptor) == "b180f665da9a11fdd29fde3316ed9813f26936c6747a9497493906194df7b02e"


def test_the_server_derives_the_same_keys(cache, namespace):
    for vector in VECTORS:
        descriptor = loads(vector["descriptor"])
        assert cache.lookup(namespace, descriptor).key == vector["key"]


def test_bad_descriptors_are_refused_before_any_request(cache, namespace):
    for bad in [{"prompt": "p"}, {"model": "m"}, {"model": "m", "prompt": "p", "messages": [{}]},
                {"model": "m", "messages": []}, {"model": "m", "prompt": "p", "params": [1]}]:
        with pytest.raises(DescriptorError):
            cache.lookup(namespace, bad)


def test_raw_entries_round_trip(cache, namespace):
    body = b'{"a":1}' * 300
    written = cache.put(namespace, "a/b c", body, content_type="application/json", ttl=600, tags=["t1"])
    assert written.created and written.key == "a/b c" and written.encoding == "gzip"
    entry = cache.get(namespace, "a/b c")
    assert isinstance(entry, Entry) and entry.body == body and entry.content_type == "application/json"
    assert entry.cache_status.startswith("teamcache; hit; ttl=")
    assert cache.get(namespace, "a/b c", if_none_match=entry.etag).not_modified
    assert cache.head(namespace, "a/b c").etag == entry.etag
    assert not cache.put(namespace, "a/b c", body, content_type="application/json").created
    with pytest.raises(ProblemError) as refused:
        cache.put(namespace, "a/b c", b"x", create_only=True)
    assert refused.value.status == 412 and refused.value.problem["status"] == 412
    assert cache.put(namespace, "a/b c", b"new", if_match=entry.etag, tags=["t1"]).created is False
    with pytest.raises(ProblemError) as stale_tag:
        cache.put(namespace, "a/b c", b"newer", if_match=entry.etag)
    assert stale_tag.value.status == 412
    assert cache.evict(namespace, tag="t1") == 1
    assert cache.delete(namespace, "absent") is False
    assert cache.get(namespace, "absent") is None
    assert cache.get(namespace, "absent", only_if_cached=True) is None


def test_gzip_bodies_are_sent_as_they_are(cache, namespace):
    cache.put(namespace, "z", gzip.compress(b"hello gzip" * 50), content_type="text/plain", content_encoding="gzip")
    assert cache.get(namespace, "z").body == b"hello gzip" * 50


def test_descriptor_lookup_upsert_and_stats(cache, namespace):
    descriptor = {"model": "m", "prompt": "What is 2+2?", "params": {"temperature": 0}}
    miss = cache.lookup(namespace, descriptor)
    assert not miss.hit and miss.key == descriptor_key(descriptor)
    written = cache.upsert(namespace, descriptor, "4", metadata={"input_tokens": 7, "output_tokens": 1}, ttl=600,
                           tags=["math"])
    assert written.created and written.key == miss.key
    hit = cache.lookup(namespace, descriptor)
    assert hit.hit and hit.response == "4" and hit.metadata["input_tokens"] == 7 and not hit.stale
    assert not cache.lookup(namespace, descriptor, refresh=True).hit
    stats = eventually(lambda: (lambda s: s if s.lookups.hit == 1 else None)(cache.stats(namespace)))
    assert stats and stats.tokens_saved.input == 7 and stats.lookups.miss >= 1 and stats.entries >= 1
    assert stats.top and stats.top[0].hit_count == 1 and stats.document["top"][0]["hit_count"] == 1
    everything = cache.global_stats()
    assert everything.entries >= stats.entries and {entry.namespace for entry in everything.top} >= {namespace}
    assert cache.evict(namespace, tag="math") == 1
    assert not cache.lookup(namespace, descriptor).hit


def test_leases_release_and_single_flight(cache, namespace):
    descriptor = {"model": "m", "prompt": "lease me"}
    first = cache.lookup(namespace, descriptor, lease=30)
    assert first.lease is not None and first.lease.expires_in == 30
    assert first.lease.id not in repr(first), "a lease id is a secret: not in repr"
    second = cache.lookup(namespace, descriptor, lease=30, wait=0)
    assert second.pending and second.retry_after >= 1 and second.lease is None
    assert cache.release(namespace, first.key, first.lease) is True
    assert cache.release(namespace, first.key, first.lease) is False
    third = cache.lookup(namespace, descriptor, lease=30)
    assert third.lease is not None
    cache.upsert(namespace, descriptor, "filled", lease=third.lease)
    assert cache.lookup(namespace, descriptor).response == "filled"
    raw = cache.get_or_lease(namespace, "raw-key", lease=10)
    assert isinstance(raw, EntryMiss) and raw.lease is not None
    assert isinstance(cache.get_or_lease(namespace, "raw-key", lease=10, wait=0), EntryMiss)
    cache.put(namespace, "raw-key", b"v", lease=raw.lease)
    assert cache.get_or_lease(namespace, "raw-key").body == b"v"


def parked(server, token) -> float:
    """The service's ``teamcache_waiters`` gauge: requests parked for a fill."""
    text = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=5).text
    return next((float(line.split()[1]) for line in text.splitlines() if line.startswith("teamcache_waiters ")), 0.0)


def test_a_waiter_is_answered_by_the_fill(cache, namespace, server, token):
    descriptor = {"model": "m", "prompt": "wait for it"}
    lease = cache.lookup(namespace, descriptor, lease=30).lease
    answers = []
    waiting = parked(server, token)
    waiter = threading.Thread(target=lambda: answers.append(cache.lookup(namespace, descriptor, lease=30, wait=10)))
    waiter.start()
    # Filled once the waiter is parked (a fixed head start can be outrun on a loaded machine).
    assert eventually(lambda: parked(server, token) > waiting, timeout=10, every=0.05)
    cache.upsert(namespace, descriptor, "done", lease=lease)
    waiter.join(10)
    assert answers and answers[0].hit and answers[0].collapsed and answers[0].response == "done"


def test_a_watch_returns_on_change(cache, namespace):
    etag = cache.put(namespace, "w", b"1").etag
    changes = []
    watcher = threading.Thread(target=lambda: changes.append(cache.get(namespace, "w", if_none_match=etag, wait=10)))
    watcher.start()
    time.sleep(0.3)
    cache.put(namespace, "w", b"2")
    watcher.join(10)
    assert changes and changes[0].body == b"2"
    assert cache.get(namespace, "w", if_none_match=cache.get(namespace, "w").etag, wait=0.5).not_modified


def test_stale_while_revalidate(cache, namespace):
    descriptor = {"model": "m", "prompt": "swr"}
    cache.upsert(namespace, descriptor, "old", ttl=1, stale_while_revalidate=60)
    time.sleep(1.3)
    first = cache.lookup(namespace, descriptor)
    assert first.hit and first.stale and first.revalidate is not None
    assert cache.lookup(namespace, descriptor).revalidate is None
    cache.upsert(namespace, descriptor, "new", lease=first.revalidate)
    fresh = cache.lookup(namespace, descriptor)
    assert fresh.response == "new" and not fresh.stale


def test_settings_and_operations(cache, namespace):
    assert cache.set_settings(namespace, default_ttl=120).default_ttl == 120
    assert cache.settings(namespace) == NamespaceSettings(namespace=namespace, default_ttl=120, max_bytes=None)
    assert cache.health()["status"] == "ok"
    assert cache.ready()["status"] == "ready"
    assert "teamcache_lookups_total" in cache.metrics()
    cache.put(namespace, "k", b"v")
    assert cache.clear(namespace) >= 1


def test_problems_are_exceptions_with_the_document(server, namespace):
    with TeamCache(server.url, "tc_" + "1" * 64) as stranger, pytest.raises(ProblemError) as unknown:
        stranger.get(namespace, "k")
    assert unknown.value.status == 401 and unknown.value.problem["type"].endswith("unauthorized")
    with TeamCache(server.url, server.token(scopes="read", namespaces="other-*")) as narrow, \
            pytest.raises(ProblemError) as forbidden:
        narrow.put(namespace, "k", b"v")
    assert forbidden.value.status == 403
    with TeamCache(server.url, server.token()) as client:
        with pytest.raises(ProblemError) as bad:
            client.upsert(namespace, {"model": "m", "prompt": "p"}, "")
        assert bad.value.status == 422 and bad.value.detail


def test_a_stopped_server_is_a_transport_error_after_retries():
    """A write tries again after a backoff; a read on a caller's path (a GET without a wait)
    tries again at once, never after a sleep (here its first would be 1 s or more)."""
    port = free_port()
    started = time.monotonic()
    with TeamCache(f"http://127.0.0.1:{port}", "t", max_retries=2, backoff=0.2) as client, \
            pytest.raises(TransportError):
        client.put("n", "k", b"v")
    assert time.monotonic() - started >= 0.2, "it retried with backoff"
    started = time.monotonic()
    with TeamCache(f"http://127.0.0.1:{port}", "t", max_retries=2, backoff=2) as client, \
            pytest.raises(TransportError):
        client.get("n", "k")
    assert time.monotonic() - started < 0.9, "a read on a caller's path was slept on"


class _Flaky(http.server.BaseHTTPRequestHandler):
    """503 with Retry-After: 0 twice, then the answer."""

    attempts = 0

    def do_GET(self):
        type(self).attempts += 1
        if type(self).attempts < 3:
            self.send_response(503)
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "7")
        self.end_headers()
        self.wfile.write(b"finally")

    def log_message(self, *_):
        pass


class _Hangup(http.server.BaseHTTPRequestHandler):
    """Reads the request, then closes without answering (the answer is lost after sending)."""

    attempts = 0

    def do_POST(self):
        type(self).attempts += 1
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.close_connection = True
        self.connection.shutdown(2)

    def log_message(self, *_):
        pass


def test_a_lookup_that_may_be_granted_a_lease_is_not_resent():
    hangup = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hangup)
    threading.Thread(target=hangup.serve_forever, daemon=True).start()
    try:
        with TeamCache(f"http://127.0.0.1:{hangup.server_address[1]}", "t", backoff=0.01,
                       circuit_breaker=False) as client:
            with pytest.raises(TransportError):
                client.lookup("n", {"model": "m", "prompt": "p"}, lease=30)
            assert _Hangup.attempts == 1, "a lost answer may have granted a lease: not sent again"
            with pytest.raises(TransportError):
                client.lookup("n", {"model": "m", "prompt": "p"})
            assert _Hangup.attempts == 4, "a plain lookup is retried"
    finally:
        hangup.shutdown()


def test_secrets_stay_out_of_reprs(cache, namespace):
    descriptor = {"model": "m", "prompt": "secret lease"}
    granted = cache.lookup(namespace, descriptor, lease=30).lease
    cache.put(namespace, "swr", b"v", ttl=1, stale_while_revalidate=60)
    time.sleep(1.2)
    entry = cache.get(namespace, "swr")
    assert entry.revalidate is not None and entry.revalidate.id not in repr(entry)
    assert granted.id not in repr(granted) and "tc_" not in repr(cache.__dict__.get("_settings"))


def test_a_result_that_cannot_be_stored_is_still_returned(cache, namespace):
    descriptor = {"model": "m", "prompt": "unstorable"}
    assert cache.cached(namespace, descriptor, lambda: {1, 2}) == {1, 2}, "a set is not JSON, but was paid for"
    # Its lease was given back: the next caller is granted one at once.
    assert cache.lookup(namespace, descriptor, lease=5).lease is not None


def test_an_entry_that_cannot_be_decoded_is_a_miss(cache, namespace):
    descriptor = {"model": "m", "prompt": "corrupt"}
    cache.upsert(namespace, descriptor, "{not json", metadata={"codec": "json"})
    assert cache.cached(namespace, descriptor, lambda: {"fresh": True}) == {"fresh": True}


def test_503_is_retried_honouring_retry_after():
    flaky = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=flaky.serve_forever, daemon=True).start()
    try:
        with TeamCache(f"http://127.0.0.1:{flaky.server_address[1]}", "t", backoff=5, circuit_breaker=False) as client:
            started = time.monotonic()
            # A watch (a GET with a wait) is retried; a plain GET is on the caller's path.
            assert client.get("n", "k", wait=1).body == b"finally"
            assert time.monotonic() - started < 2, "Retry-After: 0 wins over the 5 s backoff"
        assert _Flaky.attempts == 3
    finally:
        flaky.shutdown()


def test_cached_calls_once_and_serves_the_answer(cache, namespace):
    calls = []

    def model():
        calls.append(1)
        return "the answer"

    descriptor = {"model": "m", "prompt": "cached"}
    assert cache.cached(namespace, descriptor, model) == "the answer"
    assert cache.cached(namespace, descriptor, model) == "the answer"
    assert len(calls) == 1
    assert cache.cached(namespace, descriptor, model, refresh=True) == "the answer" and len(calls) == 2


def test_cached_as_a_decorator_with_json_results(cache, namespace):
    calls = []

    @cache.cached(namespace, descriptor=lambda city: {"model": "weather", "prompt": city},
                  usage=lambda result: {"input_tokens": 3, "output_tokens": 5})
    def forecast(city):
        calls.append(city)
        return {"city": city, "sky": "clear"}

    assert forecast("Paris") == {"city": "Paris", "sky": "clear"}
    assert forecast("Paris") == {"city": "Paris", "sky": "clear"}
    assert calls == ["Paris"]
    assert eventually(lambda: cache.stats(namespace).tokens_saved.output == 5)


def test_cached_makes_one_call_per_burst(cache, namespace):
    calls = []
    lock = threading.Lock()

    def model():
        with lock:
            calls.append(1)
        time.sleep(0.3)
        return "one"

    descriptor = {"model": "m", "prompt": "burst"}
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.cached(namespace, descriptor, model)))
               for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(calls) == 1 and results == ["one"] * 12


def test_a_failing_filler_releases_its_lease(cache, namespace):
    calls = []
    lock = threading.Lock()

    def model():
        with lock:
            calls.append(1)
            first = len(calls) == 1
        time.sleep(0.2)
        if first:
            raise RuntimeError("model down")
        return "second try"

    descriptor = {"model": "m", "prompt": "fails once"}
    results = []

    def run():
        try:
            results.append(cache.cached(namespace, descriptor, model))
        except RuntimeError:
            results.append(None)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(calls) == 2 and results.count(None) == 1 and results.count("second try") == 5


def test_a_dead_cache_never_fails_the_caller(caplog):
    with TeamCache(f"http://127.0.0.1:{free_port()}", "t", max_retries=0) as dead:
        for _ in range(3):
            assert dead.cached("n", {"model": "m", "prompt": "p"}, lambda: "called") == "called"
        assert dead.cache_failures >= 3
    assert sum("TeamCache unavailable" in record.message for record in caplog.records) == 1, "logged once"


def test_stale_on_error(cache, namespace):
    descriptor = {"model": "m", "prompt": "offline"}
    cache.upsert(namespace, descriptor, "old answer", ttl=1)
    time.sleep(1.3)

    def down():
        raise ConnectionError("model down")

    assert cache.cached(namespace, descriptor, down, stale_on_error=3600) == "old answer"
    with pytest.raises(ConnectionError):
        cache.cached(namespace, descriptor, down)


async def test_the_async_client(server, token, namespace):
    async with AsyncTeamCache(server.url, token) as cache:
        descriptor = {"model": "m", "prompt": "async"}
        assert not (await cache.lookup(namespace, descriptor)).hit
        await cache.upsert(namespace, descriptor, "yes")
        assert (await cache.lookup(namespace, descriptor)).response == "yes"
        calls = []

        async def model():
            calls.append(1)
            await asyncio.sleep(0.3)
            return "async one"

        burst = {"model": "m", "prompt": "async burst"}
        results = await asyncio.gather(*(cache.cached(namespace, burst, model) for _ in range(10)))
        assert len(calls) == 1 and results == ["async one"] * 10

        @cache.cached(namespace, descriptor=lambda q: {"model": "m", "prompt": q})
        async def ask(q):
            calls.append(q)
            return q.upper()

        assert await ask("hi") == "HI" and await ask("hi") == "HI" and calls.count("hi") == 1
        assert await cache.delete(namespace, "absent") is False
