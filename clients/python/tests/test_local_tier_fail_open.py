"""A client with a local tier against a sick cache (issue #31): one that refuses connections,
one that never answers, one that refuses the token. Every entry point fails fast or goes on with
the model call, closing does not wait on the service, and the tier's follower names the cause."""

from __future__ import annotations

import time

import pytest

from teamcache import LocalTier, TeamCache, TeamCacheError

from .conftest import eventually, free_port
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
                     lambda: cache.put(namespace, "k", b"v"), lambda: cache.upsert(namespace, descriptor, "a")):
            started = time.monotonic()
            with pytest.raises(TeamCacheError):
                call()
            assert time.monotonic() - started < 1.0
        assert tier.outbox == 0  # the namespace was never known to be keepable: nothing waits
        # The follower names the cause: no connection, no answer in time, or the token refused.
        expected = {"refused": ("TransportError: ", "ConnectError"), "frozen": ("TransportError: ", "ReadTimeout"),
                    "unauthorized": ("ProblemError: 401", "")}[kind]

        def named() -> bool:
            said = tier.follower_error(namespace) or ""
            return said.startswith(expected[0]) and expected[1] in said
        assert eventually(named, timeout=10), tier.follower_error(namespace)
        assert not tier.live(namespace)
    finally:
        started = time.monotonic()
        cache.close()
        assert time.monotonic() - started < 2.0
        if frozen is not None:
            frozen.close()


def test_a_follower_kept_waiting_says_which_call(namespace):
    """A follower the service keeps waiting past what its long poll takes says so, naming the
    call, before the call's own timeout (60 s here): a tier that stops answering locally
    because the service answers its feed late is told apart from one whose calls fail."""
    frozen = Frozen()
    tier = LocalTier(feed_wait=2)
    cache = TeamCache(frozen.url, "t", local_tier=tier, timeout=60)
    try:
        tier._follow(namespace)
        time.sleep(0.5)
        assert tier.follower_error(namespace) is None, "a call within its long poll's time is not late"

        def late() -> bool:
            return (tier.follower_error(namespace) or "").startswith("the follower's stats call has had no answer for")
        assert eventually(late, timeout=20), tier.follower_error(namespace)
        assert not tier.live(namespace)
    finally:
        started = time.monotonic()
        cache.close()
        assert time.monotonic() - started < 2.0
        frozen.close()
