"""The clients look the service's name up under their connect timeout: a resolver that hangs
(unreachable, say) must not hold a call longer than an unreachable cache would, nor (async)
the threads of the application's event loop.
The system's resolver is replaced for one name only (``socket.getaddrinfo``, what httpx's own
connect calls too); every other name resolves as it does."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import sys
import threading
import time

import pytest

from teamcache import AsyncTeamCache, TeamCache, TransportError, _resolve

from .conftest import DELAYED, HUNG, MISSING, SLOW, TWO_ADDRESSES


def test_a_hung_resolver_costs_a_call_its_connect_timeout_not_the_resolvers(resolver, namespace):
    client = TeamCache(f"http://{HUNG}:9", "a-token", timeout=0.5, max_retries=0)
    try:
        started = time.monotonic()
        with pytest.raises(TransportError):
            client.get(namespace, "k")
        assert time.monotonic() - started < 2.0, "the lookup was not bounded by the connect timeout"
        started = time.monotonic()
        assert client.cached(namespace, {"model": "m", "prompt": "hung resolver"}, lambda: "paid") == "paid"
        assert time.monotonic() - started < 2.0
    finally:
        client.close()


def test_callers_of_a_hung_name_share_one_lookup(resolver, namespace):
    client = TeamCache(f"http://{HUNG}:9", "a-token", timeout=0.5, max_retries=0, circuit_breaker=False)
    took: list[float] = []

    def call() -> None:
        started = time.monotonic()
        try:
            client.get(namespace, "k")
        except TransportError:
            took.append(time.monotonic() - started)

    try:
        callers = [threading.Thread(target=call) for _ in range(8)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(10)
        assert len(took) == 8 and max(took) < 2.0, took
        # Eight callers, one lookup thread held by the hung resolver (not one each).
        assert resolver == [HUNG], resolver
    finally:
        client.close()


def test_a_name_not_found_fails_at_once(resolver, namespace):
    client = TeamCache(f"http://{MISSING}:9", "a-token", timeout=5, max_retries=0)
    try:
        started = time.monotonic()
        with pytest.raises(TransportError) as failed:
            client.get(namespace, "k")
        assert time.monotonic() - started < 1.0
        assert "not found" in repr(failed.value.__cause__) or "not found" in str(failed.value), failed.value
    finally:
        client.close()


def test_a_name_that_resolves_reaches_the_service(resolver, server, token, namespace):
    # localhost may name ::1 first, where the service does not listen: the next address serves.
    client = TeamCache(f"http://localhost:{server.port}", token)
    try:
        client.put(namespace, "named", b"by name", content_type="text/plain")
        assert client.get(namespace, "named").body == b"by name"
    finally:
        client.close()


def test_a_lookup_that_never_returns_is_not_waited_for_past_its_age(resolver, monkeypatch, namespace):
    from teamcache import _resolve
    client = TeamCache(f"http://{HUNG}:9", "a-token", timeout=0.2, max_retries=0, circuit_breaker=False)
    try:
        monkeypatch.setattr(_resolve.Resolver, "stale_after", 60.0)
        for _ in range(2):
            with pytest.raises(TransportError):
                client.get(namespace, "k")
        assert resolver == [HUNG], resolver  # the second call waited for the first's lookup
        monkeypatch.setattr(_resolve.Resolver, "stale_after", 0.0)
        with pytest.raises(TransportError):
            client.get(namespace, "k")
        # That lookup still hangs; a call after its age asked the resolver again.
        assert resolver == [HUNG, HUNG], resolver
    finally:
        client.close()


def test_an_answer_slower_than_the_deadline_serves_the_next_call(resolver, server, token, namespace):
    client = TeamCache(f"http://{SLOW}:{server.port}", token, timeout=0.5, lookup_timeout=0.3, max_retries=0,
                       circuit_breaker=False)
    try:
        with pytest.raises(TransportError):
            client.get(namespace, "slow")  # the lookup outlives the call's deadline
        time.sleep(1.0)
        client.put(namespace, "slow", b"kept", content_type="text/plain")  # its answer, kept, serves this one
        assert client.get(namespace, "slow").body == b"kept"
        assert resolver == [SLOW], resolver
    finally:
        client.close()


def test_a_name_no_resolver_can_encode_fails_open(resolver, namespace):
    client = TeamCache(f"http://{'a' * 64}.teamcache.test:9", "a-token", timeout=3, lookup_timeout=3, max_retries=0)
    try:
        started = time.monotonic()
        with pytest.raises(TransportError):
            client.get(namespace, "k")  # told at once, not at the deadline
        assert time.monotonic() - started < 1.0
        assert client.cached(namespace, {"model": "m", "prompt": "long label"}, lambda: "paid") == "paid"
    finally:
        client.close()


def test_a_proxy_from_the_environment_is_still_used(resolver, monkeypatch, namespace):
    """HTTP_PROXY: the request goes to the proxy (which looks the name up), not to the name."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    listener = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{listener.getsockname()[1]}")
    received: list[bytes] = []

    def proxy() -> None:
        connection, _ = listener.accept()
        with connection:
            received.append(connection.recv(4096))

    serving = threading.Thread(target=proxy, daemon=True)
    serving.start()
    client = TeamCache(f"http://{HUNG}:9", "a-token", timeout=1, max_retries=0)
    try:
        with pytest.raises(TransportError):
            client.get(namespace, "k")  # the proxy closes without an answer
        serving.join(5)
        assert received and f"http://{HUNG}:9/".encode() in received[0], received
        assert resolver == [], "the client looked the name up itself instead of asking the proxy"
    finally:
        client.close()
        listener.close()



async def test_async_calls_to_a_hung_name_leave_the_loops_executor_free(resolver, namespace):
    """asyncio's own lookup runs on the loop's default executor and keeps a worker past its
    deadline: eight calls would hold all four of this loop's workers for the resolver's 20 s."""
    loop = asyncio.get_running_loop()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=4)
    loop.set_default_executor(executor)
    try:
        async with AsyncTeamCache(f"http://{HUNG}:9", "a-token", timeout=0.5, max_retries=0,
                                  circuit_breaker=False) as client:
            async def call() -> float:
                started = time.monotonic()
                with pytest.raises(TransportError):
                    await client.get(namespace, "k")
                return time.monotonic() - started

            took = await asyncio.gather(*(call() for _ in range(8)))
            assert max(took) < 2.0, took
            assert await asyncio.wait_for(loop.run_in_executor(None, lambda: "free"), 1.0) == "free"
            assert resolver == [HUNG], resolver  # one lookup for the eight calls
            hung = _resolve._resolver._lookups[(HUNG, 9)]
            assert hung.wakers == set(), "callers that gave up are still kept by the hung lookup"
            started = time.monotonic()
            assert await client.cached(namespace, {"model": "m", "prompt": "hung"}, _paid) == "paid"
            assert time.monotonic() - started < 2.0
    finally:
        executor.shutdown(wait=False)


async def _paid() -> str:
    return "paid"


async def test_async_a_name_not_found_fails_at_once(resolver, namespace):
    async with AsyncTeamCache(f"http://{MISSING}:9", "a-token", timeout=5, max_retries=0) as client:
        started = time.monotonic()
        with pytest.raises(TransportError) as failed:
            await client.get(namespace, "k")
        assert time.monotonic() - started < 1.0
        assert "not found" in repr(failed.value.__cause__) or "not found" in str(failed.value), failed.value


async def test_async_a_name_that_resolves_reaches_the_service(resolver, server, token, namespace):
    async with AsyncTeamCache(f"http://localhost:{server.port}", token) as client:
        await client.put(namespace, "named-async", b"by name", content_type="text/plain")
        assert (await client.get(namespace, "named-async")).body == b"by name"
    async with AsyncTeamCache(f"http://{SLOW}:{server.port}", token, timeout=0.5, lookup_timeout=0.3,
                              max_retries=0, circuit_breaker=False) as client:
        with pytest.raises(TransportError):
            await client.get(namespace, "named-async")  # the lookup outlives the call's deadline
        # Its answer comes on the lookup's own thread: waiting for it here holds nothing it needs.
        assert _resolve._resolver._lookups[(SLOW, server.port)].done.wait(5)
        assert (await client.get(namespace, "named-async")).body == b"by name"  # its answer, kept
        assert resolver == [SLOW], resolver


async def test_async_a_lookup_answered_within_the_deadline_wakes_its_waiters(resolver, server, token, namespace):
    """The answer comes from the lookup's thread while eight calls wait on the loop."""
    async with AsyncTeamCache(f"http://{DELAYED}:{server.port}", token, timeout=3, max_retries=0) as client:
        await client.put(namespace, "delayed", b"woken", content_type="text/plain")
    _resolve._resolver.forget()
    resolver.clear()
    async with AsyncTeamCache(f"http://{DELAYED}:{server.port}", token, timeout=3, max_retries=0) as client:
        started = time.monotonic()
        answers = await asyncio.gather(*(client.get(namespace, "delayed") for _ in range(8)))
        assert [answer.body for answer in answers] == [b"woken"] * 8
        assert time.monotonic() - started < 2.0
        assert resolver == [DELAYED], resolver


def test_a_resolver_that_does_not_return_takes_threads_ever_more_slowly(resolver, monkeypatch, namespace):
    """Each call outlives the lookup it found (older than ``stale_after``): the first two ask
    again; with two still running the third waits for the newest, until it is twice that old."""
    client = TeamCache(f"http://{HUNG}:9", "a-token", timeout=0.6, max_retries=0, circuit_breaker=False)
    try:
        monkeypatch.setattr(_resolve.Resolver, "stale_after", 0.4)
        for _ in range(3):
            with pytest.raises(TransportError):
                client.get(namespace, "k")
        assert resolver == [HUNG, HUNG], resolver
        time.sleep(0.3)  # the newest lookup is now 0.9 s old, past 2 × 0.4
        with pytest.raises(TransportError):
            client.get(namespace, "k")
        assert resolver == [HUNG, HUNG, HUNG], resolver
    finally:
        client.close()


#: Linux drops a connection's SYN while the listener's backlog is full (what these tests rely
#: on to stand for a route that goes nowhere); other systems may refuse it or not bind 127.0.0.2.
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="relies on Linux dropping SYNs past a full backlog")


@contextlib.contextmanager
def _dropping_connections(host: str, port: int):
    """A listener on HOST:PORT whose backlog is full: the kernel drops new connections' SYNs,
    as a route that goes nowhere does."""
    listener = socket.socket()
    listener.bind((host, port))
    listener.listen(0)
    held = []
    for _ in range(3):
        pending = socket.socket()
        pending.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            pending.connect((host, port))
        held.append(pending)
    try:
        yield
    finally:
        for pending in held:
            pending.close()
        listener.close()


@linux_only
def test_an_address_that_drops_connections_gives_way_to_the_next(resolver, server, token, namespace):
    with _dropping_connections("127.0.0.2", server.port):
        client = TeamCache(f"http://{TWO_ADDRESSES}:{server.port}", token, timeout=3, max_retries=0)
        try:
            started = time.monotonic()
            client.put(namespace, "second address", b"reached", content_type="text/plain")
            assert time.monotonic() - started < 1.5, "the first address took the whole connect timeout"
            assert client.get(namespace, "second address").body == b"reached"
        finally:
            client.close()


@linux_only
async def test_async_an_address_that_drops_connections_gives_way_to_the_next(resolver, server, token, namespace):
    with _dropping_connections("127.0.0.2", server.port):
        async with AsyncTeamCache(f"http://{TWO_ADDRESSES}:{server.port}", token, timeout=3, max_retries=0) as client:
            started = time.monotonic()
            await client.put(namespace, "second address async", b"reached", content_type="text/plain")
            assert time.monotonic() - started < 1.5, "the first address took the whole connect timeout"


@linux_only
def test_the_address_that_connected_is_tried_first(resolver, server, token, namespace):
    with _dropping_connections("127.0.0.2", server.port):
        client = TeamCache(f"http://{TWO_ADDRESSES}:{server.port}", token, timeout=3, max_retries=0)
        try:
            client.put(namespace, "preferred", b"reached", content_type="text/plain")
        finally:
            client.close()
        # The resolver answers 127.0.0.2 first; the next connection is offered 127.0.0.1 first.
        assert _resolve._resolver.addresses(TWO_ADDRESSES, server.port, None) == ["127.0.0.1", "127.0.0.2"]
        client = TeamCache(f"http://{TWO_ADDRESSES}:{server.port}", token, timeout=3, max_retries=0)
        try:
            assert client.get(namespace, "preferred").body == b"reached"
        finally:
            client.close()
