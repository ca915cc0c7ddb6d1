"""The local tier and encrypted namespaces (issue #31): an encrypted namespace's answers are
kept only when told; the follower asks again every minute, holding its answer meanwhile, and a
recheck that fails never holds up the feed."""

from __future__ import annotations

import time

from teamcache import LocalTier, TeamCache, TransportError

from .conftest import eventually
from .test_local_tier import live


def test_an_encrypted_namespace_is_kept_only_when_told(server, token, namespace):
    tier = LocalTier(feed_wait=2)
    b = TeamCache(server.url, token, local_tier=tier)
    client = tier._client
    assert client is not None
    real = client.stats

    def encrypted(*args, **kwargs):
        stats = real(*args, **kwargs)
        return type(stats)(**{**stats.__dict__, "document": {**stats.document, "encrypted": True}})

    client.stats = encrypted  # type: ignore[method-assign]
    b.put(namespace, "secret", b"plaintext", ttl=300)
    assert eventually(lambda: tier._feeds[namespace].allowed is False, timeout=5)
    b.get(namespace, "secret")
    assert tier.local(namespace, "secret", "raw") is None and tier.bytes == 0
    b.close()


def test_the_encryption_recheck_holds_the_answer_meanwhile(server, token, namespace):
    """A minute on, the follower asks again whether the namespace is encrypted, holding the
    answer it had meanwhile: cleared while asking, it refused the client's own writes' copies
    and, had the service gone down then, every offline write."""
    tier = LocalTier(feed_wait=2)
    cache = TeamCache(server.url, token, local_tier=tier)
    client = tier._client
    assert client is not None
    real = client.stats
    seen: list[bool | None] = []

    def recording(*args, **kwargs):
        seen.append(tier._feeds[namespace].allowed)
        return real(*args, **kwargs)

    client.stats = recording  # type: ignore[method-assign]
    try:
        feed = tier._follow(namespace)
        assert eventually(lambda: tier.live(namespace), timeout=10), tier.follower_error(namespace)
        feed.checked_at -= 61
        assert eventually(lambda: len(seen) >= 2, timeout=10), seen
        assert seen[:2] == [None, True]
        assert feed.allowed is True
    finally:
        cache.close()


def test_an_encryption_recheck_that_fails_does_not_hold_up_the_feed(server, token, namespace):
    """A minute on, the recheck fails (the stats call refused here): the answer held stays, the
    feed goes on, and the recheck is tried again in 10 s, not at every turn."""
    tier = LocalTier(feed_wait=2)
    cache = TeamCache(server.url, token, local_tier=tier)
    client = tier._client
    assert client is not None
    calls: list[float] = []

    def failing(*args, **kwargs):
        calls.append(time.monotonic())
        raise TransportError("the stats call was refused")

    try:
        feed = tier._follow(namespace)
        assert live(tier, namespace), tier.follower_error(namespace)
        client.stats = failing  # type: ignore[method-assign]
        feed.checked_at -= 61
        assert eventually(lambda: len(calls) >= 1, timeout=10)
        synced = feed.synced_at or 0.0
        assert eventually(lambda: (feed.synced_at or 0.0) > synced, timeout=10), tier.follower_error(namespace)
        assert feed.allowed is True and feed.last_error is None
        assert len(calls) == 1, "asked again at every turn"
    finally:
        cache.close()
