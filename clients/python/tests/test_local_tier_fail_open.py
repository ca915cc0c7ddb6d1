"""A client with a local tier against a sick cache (issue #31): one that refuses connections,
one that never answers, one that refuses the token. Every entry point fails fast or goes on with
the model call, closing does not wait on the service, and the tier's follower names the cause.
And a service that keeps the follower waiting, or cannot hold its long poll."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from teamcache import AsyncTeamCache, LocalTier, TeamCache, TeamCacheError
from teamcache._local_feed import _Feed
from teamcache.models import Change, ChangePage

from .conftest import Server, eventually, free_port
from .test_fail_open import Frozen


@pytest.mark.parametrize("kind", ["refused", "frozen", "unauthorized"])
def test_a_tiered_client_never_holds_up_the_callers_call(kind, server, namespace):
    """A cache that refuses connections, never answers, or refuses the token: each entry point
    of a client with a tier fails fast (or goes on with the model call) and closing it does not
    wait on the service."""
    frozen = Frozen() if kind == "frozen" else None
    url = frozen.url if frozen is not None else \
        {"refused": f"http://127.0.0.1:{free_port()}", "unauthorized": server.url}[kind]
    tier = LocalTier(feed_wait=2)
    cache = TeamCache(url, "tc_refused" if kind == "unauthorized" else "t", local_tier=tier, lookup_timeout=0.3,
                      backoff=0.01)
    descriptor = {"model": "m", "prompt": f"fail open {kind}"}
    try:
        started = time.monotonic()
        assert [cache.cached(namespace, descriptor, lambda: "paid") for _ in range(3)] == ["paid"] * 3
        paid = time.monotonic() - started
        assert paid < 2.0, f"three cached calls paid {paid:.2f} s"
        for call in (lambda: cache.lookup(namespace, descriptor), lambda: cache.get(namespace, "k"),
                     lambda: cache.put(namespace, "k", b"v"), lambda: cache.upsert(namespace, descriptor, "a"),
                     lambda: cache.warm(namespace, top=5)):
            started = time.monotonic()
            with pytest.raises(TeamCacheError):
                call()
            assert time.monotonic() - started < 1.0
        assert tier.outbox == 0  # the namespace was never known to be keepable: nothing waits
        started = time.monotonic()
        tier.flush()  # reports and sends now: nothing waits on the service
        assert time.monotonic() - started < 1.0
        # The follower names the cause: no connection, no answer in time, or the token refused.
        expected = {"refused": ("TransportError: ", "ConnectError"), "frozen": ("TransportError: ", "ReadTimeout"),
                    "unauthorized": ("ProblemError: 401", "")}[kind]

        def named() -> bool:
            said = tier.follower_error(namespace) or ""
            return said.startswith(expected[0]) and expected[1] in said
        assert eventually(named, timeout=10), tier.follower_error(namespace)
        assert not tier.live(namespace)
    finally:
        _close_at_once(cache)
        if frozen is not None:
            frozen.close()


@pytest.mark.parametrize("kind", ["refused", "frozen", "unauthorized"])
async def test_the_async_clients_warm_fails_at_once_on_a_sick_cache(kind, server, namespace):
    """The async client's ``warm`` asks for its keys through the client itself (its breaker and
    its deadlines), not the tier's own client on a thread, which has no breaker: against a
    frozen cache it waited out that client's 5 s timeout after the caller knew the cache sick."""
    frozen = Frozen() if kind == "frozen" else None
    url = frozen.url if frozen is not None else \
        {"refused": f"http://127.0.0.1:{free_port()}", "unauthorized": server.url}[kind]
    tier = LocalTier(feed_wait=2)
    cache = AsyncTeamCache(url, "tc_refused" if kind == "unauthorized" else "t", local_tier=tier,
                           lookup_timeout=0.3, backoff=0.01)
    try:
        # A model call goes on without the cache (the caller's breaker learns it is sick) ...
        assert await cache.cached(namespace, {"model": "m", "prompt": "p"}, _paid) == "paid"
        # ... and warm, through the same client, fails at once.
        for warm in (lambda: cache.warm(namespace, top=5), lambda: cache.warm(namespace, tag="t")):
            started = time.monotonic()
            with pytest.raises(TeamCacheError):
                await warm()
            assert time.monotonic() - started < 1.0
    finally:
        started = time.monotonic()
        await cache.aclose()
        assert time.monotonic() - started < 2.0
        if frozen is not None:
            frozen.close()


async def _paid() -> str:
    return "paid"


def _close_at_once(cache: TeamCache) -> None:
    """Closes ``cache``, which must not wait on the service."""
    started = time.monotonic()
    cache.close()
    assert time.monotonic() - started < 2.0


def test_a_follower_kept_waiting_says_which_call(namespace):
    """A follower the service keeps waiting past what its long poll takes says so, naming the
    call, before the call's own timeout (60 s here): a tier that stops answering locally
    because the service answers its feed late is told apart from one whose calls fail."""
    frozen = Frozen()
    tier = LocalTier(feed_wait=2)
    cache = TeamCache(frozen.url, "t", local_tier=tier, timeout=60)
    try:
        tier._follow(namespace)

        def late() -> bool:
            return (tier.follower_error(namespace) or "").startswith("the follower's stats call has had no answer for")
        assert eventually(late, timeout=20), tier.follower_error(namespace)
        assert not tier.live(namespace)
    finally:
        _close_at_once(cache)
        frozen.close()


@pytest.fixture(scope="module")
def no_waiting_room(server: Server) -> Iterator[Server]:
    """A second ``serve`` on the session server's cluster that cannot hold a long poll (its
    waiter room is 0): every empty feed page is answered at once."""
    second = Server(server.binary, server.data, free_port(), env={"TEAMCACHE_MAX_WAITERS": "0"})
    try:
        yield second
    finally:
        second.stop()


def _feed_polls(server: Server, token: str) -> int:
    """Change-feed requests ``server`` has answered, from its metrics."""
    text = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {token}"}).text
    prefix = 'teamcache_http_requests_total{route="/v1/caches/{ns}/changes",method="GET",status_class="2xx"} '
    return next((int(float(line[len(prefix):])) for line in text.splitlines() if line.startswith(prefix)), 0)


def test_a_follower_answered_at_once_rests_between_polls(no_waiting_room, token, namespace):
    """A service that cannot hold the follower's long poll answers an empty page at once: the
    follower rests between polls (a quarter of its wait, at most a second) instead of asking
    again in a tight loop, and stays live."""
    tier = LocalTier(feed_wait=2)
    cache = TeamCache(no_waiting_room.url, token, local_tier=tier)
    try:
        tier._follow(namespace)
        assert eventually(lambda: tier.live(namespace), timeout=10), tier.follower_error(namespace)
        before = _feed_polls(no_waiting_room, token)
        time.sleep(3)
        polls = _feed_polls(no_waiting_room, token) - before
        # One every 0.5 s: about 6 (fewer on a loaded machine); a tight loop makes hundreds.
        assert 1 <= polls <= 12, f"{polls} long polls in 3 s"
        assert eventually(lambda: tier.live(namespace), timeout=5)
    finally:
        cache.close()


def _tier_and_its_client(server, token: str) -> tuple[LocalTier, TeamCache, TeamCache]:
    """A client with a tier, and the tier's own client (whose calls a test stubs)."""
    tier = LocalTier(feed_wait=2)
    cache = TeamCache(server.url, token, local_tier=tier)
    client = tier._client
    assert client is not None
    return tier, cache, client


def test_a_follower_behind_a_busy_numbering_rests_between_calls(server, token, namespace):
    """A follower that is not live asks without a wait; while the service is numbering a backlog
    it answers an empty page with ``more`` at once (here every page, from a stub of the tier's
    own client): the follower rests between such calls (0.2 s, as a held long poll would look
    again) instead of asking in a tight loop, and is not live meanwhile."""
    tier, cache, client = _tier_and_its_client(server, token)
    real = client.changes
    calls: list[float] = []

    def busy(namespace: str, *, since: str, **kwargs: object) -> ChangePage:
        if since == "now":
            return real(namespace, since=since, **kwargs)  # type: ignore[arg-type]
        calls.append(time.monotonic())
        return ChangePage(changes=(), next=since, more=True)

    client.changes = busy  # type: ignore[method-assign]
    try:
        tier._follow(namespace)
        assert eventually(lambda: len(calls) >= 1, timeout=10)
        started = len(calls)
        time.sleep(2)
        # One every 0.2 s: about 10 (fewer on a loaded machine); a tight loop makes hundreds.
        assert 1 <= len(calls) - started <= 15, f"{len(calls) - started} calls in 2 s"
        assert not tier.live(namespace)
    finally:
        cache.close()


def test_what_the_follower_error_says_when():
    """When a call is late, by the rule, for each call; after a failure, both; and a namespace
    no follower runs for (a tier with no client) says so. (States set by hand: the clock is the
    subject, not the service.)"""
    tier = LocalTier(feed_wait=2)

    def said(call: str, age: float, last_error: str | None = None, synced: bool = False) -> str | None:
        now = time.monotonic()
        tier._feeds["ns"] = _Feed(allowed=True, floor=0, thread=threading.current_thread(), last_error=last_error,
                                  synced_at=now if synced else None, asking=(call, now - age))
        return tier.follower_error("ns")
    try:
        assert said("stats call", 0.5) is None and said("call for the feed's head", 0.5) is None
        assert said("stats call", 1.5) == "the follower's stats call has had no answer for 1 s"
        assert said("call for the feed's head", 4.2) == \
            "the follower's call for the feed's head has had no answer for 4 s"
        assert said("long poll", 2.5) is None, "within its wait and a second"
        assert said("long poll", 3.5) == "the follower's long poll has had no answer for 3 s (it waits 2 s)"
        assert said("long poll", 3.5, last_error="TransportError: timed out") == \
            "TransportError: timed out; since then the follower's long poll has had no answer for 3 s (it waits 2 s)"
        assert said("long poll", 0.5, last_error="TransportError: timed out") == "TransportError: timed out"
        assert said("long poll", 9, synced=True) is None, "live: nothing to explain"
        tier._follow("unfollowed")
        assert tier.follower_error("unfollowed") == "no follower runs: the tier has no client"
        assert tier.follower_error("never") is None
        tier._stop.set()
        assert said("long poll", 0.5) == "the tier is closed: no follower runs"
    finally:
        tier.close()


class _HangUp:
    """Accepts one connection, reads the request, and closes it without answering: a service
    that died after it took the request (and stops listening, so a retry is refused)."""

    def __init__(self) -> None:
        self.listening = socket.socket()
        self.listening.bind(("127.0.0.1", 0))
        self.listening.listen(4)
        self.url = f"http://127.0.0.1:{self.listening.getsockname()[1]}"
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        connection, _ = self.listening.accept()
        self.accepted += 1
        self.listening.close()
        connection.recv(65536)
        connection.close()


def test_a_write_lost_then_refused_on_its_retry_is_not_queued():
    """A write whose connection was lost after it was sent may have been applied: it is not
    queued, even when its retry is refused (which alone would say it never left); the caller is
    told it failed."""
    hang_up = _HangUp()
    tier = LocalTier()
    cache = TeamCache(hang_up.url, "t", local_tier=tier, max_retries=1, backoff=0.01, circuit_breaker=False)
    tier._feeds["ns"] = _Feed(allowed=True, floor=0)
    try:
        with pytest.raises(TeamCacheError):
            cache.put("ns", "k", b"v")
        assert tier.outbox == 0 and hang_up.accepted == 1
    finally:
        _close_at_once(cache)


def test_a_long_page_of_changes_is_applied_a_few_at_a_time(server, token, namespace):
    """Every local answer takes the tier's lock (on an asyncio client, on its event loop): a
    page of 100 changes is applied in holds of at most 32, not in one."""
    tier, cache, client = _tier_and_its_client(server, token)
    real = client.changes
    served: list[bool] = []

    def long_page(namespace: str, *, since: str, **kwargs: object) -> ChangePage:
        if since == "now" or served:
            return real(namespace, since=since, **kwargs)  # type: ignore[arg-type]
        served.append(True)
        changes = tuple(Change(cursor=since, kind="delete", key=f"k{i}") for i in range(100))
        return ChangePage(changes=changes, next=since, more=False)

    applied: list[int] = []
    holds: list[int] = []
    lock, apply = tier._lock, tier._apply

    class Counting:
        def __enter__(self) -> None:
            lock.__enter__()
            holds.append(len(applied))

        def __exit__(self, *exc: object) -> None:
            holds.append(len(applied))
            lock.__exit__(*exc)

    def counted(*args: object) -> None:
        applied.append(1)
        apply(*args)  # type: ignore[arg-type]

    client.changes = long_page  # type: ignore[method-assign]
    tier._lock = Counting()  # type: ignore[assignment]
    tier._apply = counted  # type: ignore[method-assign]
    try:
        tier._follow(namespace)
        assert eventually(lambda: len(applied) >= 100, timeout=10)
        spans = [holds[i + 1] - holds[i] for i in range(0, len(holds) - 1, 2)]
        assert max(spans) <= 32, spans
    finally:
        tier._lock = lock  # type: ignore[assignment]
        cache.close()
