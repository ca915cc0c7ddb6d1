"""Every route of both clients (each is bound by the typed route binders) against a TeamCache
that refuses connections, one that never answers, and one that refuses the token: each call
ends within its deadline with the client's error, and once the circuit breaker has opened,
every later call is skipped at once, without a request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from teamcache import AsyncTeamCache, CacheSkipped, CircuitBreaker, ProblemError, TeamCache, TeamCacheError

from .conftest import free_port
from .test_fail_open import Frozen

DESCRIPTOR = {"model": "m", "prompt": "p"}

#: Each public route, called as a user would call it (namespace "n").
ROUTES: list[tuple[str, Callable[[Any], Any]]] = [
    ("get", lambda c: c.get("n", "k")),
    ("get_or_lease", lambda c: c.get_or_lease("n", "k")),
    ("head", lambda c: c.head("n", "k")),
    ("put", lambda c: c.put("n", "k", b"v")),
    ("delete", lambda c: c.delete("n", "k")),
    ("lookup", lambda c: c.lookup("n", DESCRIPTOR)),
    ("upsert", lambda c: c.upsert("n", DESCRIPTOR, "answer")),
    ("release", lambda c: c.release("n", "k", "tcl_" + "0" * 64)),
    ("evict", lambda c: c.evict("n", tag="t")),
    ("clear", lambda c: c.clear("n")),
    ("stats", lambda c: c.stats("n")),
    ("global_stats", lambda c: c.global_stats()),
    ("settings", lambda c: c.settings("n")),
    ("set_settings", lambda c: c.set_settings("n", default_ttl=60)),
    ("export_page", lambda c: c.export_page("n")),
    ("changes", lambda c: c.changes("n")),
    ("import_lines", lambda c: c.import_lines("n", ['{"key":"k","body":"b"}'])),
    ("health", lambda c: c.health()),
    ("ready", lambda c: c.ready()),
    ("metrics", lambda c: c.metrics()),
]


def client_kwargs() -> dict[str, Any]:
    # Short deadlines and no sleeping retries: the bound below is the deadline, not patience.
    return {"timeout": 0.5, "lookup_timeout": 0.3, "max_retries": 1, "backoff": 0.01,
            "circuit_breaker": CircuitBreaker(cooldown=60)}


def sync_costs(url: str, token: str) -> tuple[float, float]:
    """The slowest first call across every route, and the slowest once the breaker is open."""
    cache = TeamCache(url, token, **client_kwargs())
    first = 0.0
    for _name, route in ROUTES:
        started = time.monotonic()
        with pytest.raises(TeamCacheError):
            route(cache)
        first = max(first, time.monotonic() - started)
    assert cache.cache_health.state == "open"
    skipped = 0.0
    for _name, route in ROUTES:
        started = time.monotonic()
        with pytest.raises(CacheSkipped):
            route(cache)
        skipped = max(skipped, time.monotonic() - started)
    cache.close()
    return first, skipped


async def async_costs(url: str, token: str) -> tuple[float, float]:
    cache = AsyncTeamCache(url, token, **client_kwargs())
    first = 0.0
    for _name, route in ROUTES:
        started = time.monotonic()
        with pytest.raises(TeamCacheError):
            await route(cache)
        first = max(first, time.monotonic() - started)
    assert cache.cache_health.state == "open"
    skipped = 0.0
    for _name, route in ROUTES:
        started = time.monotonic()
        with pytest.raises(CacheSkipped):
            await route(cache)
        skipped = max(skipped, time.monotonic() - started)
    await cache.aclose()
    return first, skipped


def test_every_route_fails_fast_against_a_refusing_cache():
    url = f"http://127.0.0.1:{free_port()}"
    first, skipped = sync_costs(url, "tc_x")
    assert first < 1.5 and skipped < 0.05, (first, skipped)
    first, skipped = asyncio.run(async_costs(url, "tc_x"))
    assert first < 1.5 and skipped < 0.05, (first, skipped)


def test_every_route_is_bounded_by_its_deadline_against_a_frozen_cache():
    frozen = Frozen()
    try:
        first, skipped = sync_costs(frozen.url, "tc_x")
        assert first < 1.5 and skipped < 0.05, (first, skipped)
        first, skipped = asyncio.run(async_costs(frozen.url, "tc_x"))
        assert first < 1.5 and skipped < 0.05, (first, skipped)
    finally:
        frozen.close()


async def refused_token_verdicts(call: Callable[[Callable[[Any], Any]], Any]) -> int:
    """Each route called (through ``call``) with a token the server does not know: a 401 at
    once, or a skip once the breaker has opened; the 401s counted."""
    refused = 0
    for name, route in ROUTES:
        started = time.monotonic()
        try:
            await call(route)
        except ProblemError as error:
            # /healthz and /readyz need no token; every other route answers 401.
            assert error.status == 401, name
            refused += 1
        except CacheSkipped:
            pass  # the breaker stopped after the first 401: no further request is made
        else:
            assert name in ("health", "ready"), f"{name} answered without a token"
        assert time.monotonic() - started < 1.0, name
    return refused


def test_every_route_against_a_refused_token_raises_and_then_skips(server):
    cache = TeamCache(server.url, "tc_" + "1" * 64, **client_kwargs())

    async def call(route: Callable[[Any], Any]) -> Any:
        return route(cache)

    assert asyncio.run(refused_token_verdicts(call)) >= 1 and cache.cache_health.misconfiguration
    cache.close()


def test_every_async_route_against_a_refused_token_raises_and_then_skips(server):
    async def run() -> None:
        cache = AsyncTeamCache(server.url, "tc_" + "1" * 64, **client_kwargs())

        async def call(route: Callable[[Any], Any]) -> Any:
            return await route(cache)

        assert await refused_token_verdicts(call) >= 1 and cache.cache_health.misconfiguration
        await cache.aclose()

    asyncio.run(run())


def test_check_answers_at_once_against_a_refusing_or_a_frozen_cache():
    """``check`` reports rather than raises: against a cache that refuses connections or never
    answers it says so within the client's deadline (the breaker skips the steps after the
    first failure), sync and async alike."""
    frozen = Frozen()
    try:
        for url in (f"http://127.0.0.1:{free_port()}", frozen.url):
            started = time.monotonic()
            result = TeamCache(url, "tc_x", **client_kwargs()).check("n")
            assert not result.reachable and not result.ok and len(result.problems) == 3, result
            assert time.monotonic() - started < 2.0, url
            started = time.monotonic()
            result = asyncio.run(AsyncTeamCache(url, "tc_x", **client_kwargs()).check("n"))
            assert not result.reachable and not result.ok and len(result.problems) == 3, result
            assert time.monotonic() - started < 2.0, url
    finally:
        frozen.close()
