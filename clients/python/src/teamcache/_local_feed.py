"""The local tier's change-feed followers: one thread per namespace held follows its feed
(``/changes?wait=``), drops a copy as soon as a change to its key arrives, and notes the
changes applied, so a fill that raced a change is refused (see ``_local``)."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._local_store import Copies, instant
from .errors import ProblemError, TeamCacheError

if TYPE_CHECKING:
    from ._client import TeamCache

logger = logging.getLogger("teamcache.local")


#: Keys remembered as changed (for fills that raced a change).
_CHANGED_KEYS = 10_000


#: Changes applied under one hold of the tier's lock (see ``_follow_feed``).
_APPLIED_AT_ONCE = 32


@dataclass
class _Feed:
    """One followed namespace."""

    thread: threading.Thread | None = None
    #: Monotonic time of the last page that left the follower caught up (None: never, or lost).
    synced_at: float | None = None
    #: None until the namespace's stats said whether it is encrypted.
    allowed: bool | None = None
    #: Fills that started before this mark are not kept: they may predate the cursor the
    #: follower started from, and a change between the two would never reach them.
    floor: int = 2**62
    #: When ``allowed`` was last asked (monotonic).
    checked_at: float = 0.0
    #: Why the follower's last call failed (None: it did not); cleared by the next page.
    last_error: str | None = None
    #: The follower's call in flight and when it began (monotonic; None: none in flight).
    asking: tuple[str, float] | None = None


class FeedFollowing:
    """``LocalTier``'s feed followers and its record of applied changes (a mixin: the state is
    the tier's, made in its ``__init__``)."""

    _client: TeamCache | None
    _stop: threading.Event
    _lock: threading.Lock
    _copies: Copies
    keep_encrypted: bool
    feed_wait: float
    counts: dict[str, int]
    #: Changes applied, in order; a key's last change, for fills that raced it.
    _applied: int
    _changed: OrderedDict[tuple[str, str], tuple[int, str | None]]
    _forgotten: int

    def _note_change(self, namespace: str, key: str, etag: str | None) -> None:
        """A change to ``key`` (to version ``etag``; None: gone) was applied: from the feed, or
        this client's own write or delete. Under the tier's lock."""
        self._applied += 1
        self._changed[(namespace, key)] = (self._applied, etag)
        self._changed.move_to_end((namespace, key))
        while len(self._changed) > _CHANGED_KEYS:
            _, (forgotten, _) = self._changed.popitem(last=False)
            self._forgotten = max(self._forgotten, forgotten)

    def _failed(self, feed: _Feed, why: str) -> None:
        """Notes why ``feed``'s follower is not live, unless the tier is closing (its calls are
        ended then: not a failure to report)."""
        if not self._stop.is_set():
            feed.last_error = why

    def _follow_feed(self, namespace: str, feed: _Feed) -> None:
        client = self._client
        assert client is not None
        pause = 0.2
        cursor: str | None = None
        while not self._stop.is_set():
            try:
                self._check_encryption(namespace, feed, client)
                if cursor is None:
                    cursor = self._start(namespace, feed)
                asked = time.monotonic()
                # Not live (just started, behind, or after a failure): asked without a wait, so a
                # quiet namespace is live after one round trip instead of one long poll (10 s at
                # the default, which held every `warm` and every first local answer that long).
                waits = feed.synced_at is not None
                feed.asking = ("long poll" if waits else "catching-up call", asked)
                page = client.changes(namespace, since=cursor, wait=self.feed_wait if waits else None, limit=1000)
                feed.asking = None
                # A few changes at a time: the lock is the one every local answer takes (on an
                # asyncio client, on its event loop), so a page of 1000 must not hold it whole.
                # Applying a change twice (a crash before the cursor is saved) drops nothing more.
                for start in range(0, len(page.changes), _APPLIED_AT_ONCE):
                    with self._lock:
                        for change in page.changes[start:start + _APPLIED_AT_ONCE]:
                            self._apply(namespace, change.key, change.kind, change.etag, change.expires_at)
                with self._lock:
                    self._copies.save_cursor(namespace, page.next)
                cursor = page.next
                # Behind (more to read): not live until caught up.
                feed.synced_at = None if page.more else time.monotonic()
                feed.last_error = None
                pause = 0.2
                if waits and not page.changes and not page.more and time.monotonic() - asked < self.feed_wait / 2:
                    # An empty page at once (the server could not hold the request: its waiter
                    # room full, or a proxy): asked again after a rest, never in a tight loop.
                    self._stop.wait(min(1.0, self.feed_wait / 4))
                elif not waits and not page.changes and page.more:
                    # Behind with nothing to read yet (the service is numbering a backlog): a
                    # call without a wait comes back at once, so rest as a long poll would have
                    # been held (the service looks again every 0.2 s).
                    self._stop.wait(0.2)

            except ProblemError as error:
                feed.asking = None
                feed.synced_at = None
                if error.status == 410:
                    self._failed(feed, "the feed no longer holds the cursor (410): copies dropped")
                    logger.warning("the change feed of %s lost its place (410): its local copies are cleared",
                                   namespace)
                    with self._lock:
                        self._copies.drop_namespace(namespace)
                        self.counts["cleared"] += 1
                    cursor = None
                    continue
                self._failed(feed, f"ProblemError: {error}")
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)
            except TeamCacheError as error:
                feed.asking = None
                feed.synced_at = None
                # The client's messages name statuses and causes, never the token (one a header
                # cannot carry is not sent; see `_Settings.unreachable`).
                self._failed(feed, f"{type(error).__name__}: {error}")
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)
            except Exception as error:  # noqa: BLE001 - a closed client mid-request, or a bug: never kill the app
                feed.asking = None
                feed.synced_at = None
                if self._stop.is_set():
                    return
                # Anything else (a caller's transport, a bug): its class only, whatever its text holds.
                self._failed(feed, type(error).__name__)
                logger.exception("the local tier's feed follower of %s failed; it starts again", namespace)
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)

    def _check_encryption(self, namespace: str, feed: _Feed, client: TeamCache) -> None:
        """Whether the namespace is encrypted (its answers are then not kept, unless
        ``keep_encrypted``): asked first, then again every minute, the answer held meanwhile (a
        namespace may be encrypted since; cleared while asking, it refused the client's own
        writes' copies and, had the service gone down then, every offline write). The first
        answer is needed before anything is kept, so its failure is the follower's; a later one
        that fails is tried again in 10 s and never holds up the feed."""
        if feed.allowed is not None and time.monotonic() - feed.checked_at <= 60:
            return
        feed.asking = ("stats call", time.monotonic())
        try:
            encrypted = client.stats(namespace, top=0).document.get("encrypted") is True
        except TeamCacheError:
            if feed.allowed is None:
                raise
            feed.asking = None
            feed.checked_at = time.monotonic() - 50
            return
        feed.asking = None
        feed.allowed = self.keep_encrypted or not encrypted
        feed.checked_at = time.monotonic()
        if not feed.allowed:
            logger.warning("namespace %s is encrypted: its answers are not kept locally "
                           "(LocalTier(keep_encrypted=True) keeps them)", namespace)
            with self._lock:
                self._copies.drop_namespace(namespace)

    def _late(self, feed: _Feed) -> str | None:
        """The follower's call in flight, when it has waited past its time: a long poll its wait
        and a second more, any other call a second (half the wait, when that is longer). Shorter
        than the calls' own timeouts (the client's ``timeout``, plus the wait for a long poll),
        so a service slow to answer shows here before the call fails."""
        asking = feed.asking
        if asking is None:
            return None
        call, since = asking
        waited = time.monotonic() - since
        due = self.feed_wait + 1 if call == "long poll" else max(1.0, self.feed_wait / 2)
        if waited <= due:
            return None
        wait = f" (it waits {self.feed_wait:g} s)" if call == "long poll" else ""
        return f"the follower's {call} has had no answer for {int(waited)} s{wait}"

    def _start(self, namespace: str, feed: _Feed) -> str:
        """The cursor to follow from: the one kept with the copies, else the feed's head (and
        then copies kept without a cursor cannot be trusted: dropped). Fills from here on are
        kept (the first reads of a namespace, made before, are not)."""
        with self._lock:
            kept = self._copies.cursor(namespace)
            if kept is not None:
                # Replaying from the kept cursor brings every change since: a fill made
                # meanwhile is dropped by its change, or refused as raced (`_raced`).
                feed.floor = 0
                return kept
        assert self._client is not None
        feed.asking = ("call for the feed's head", time.monotonic())
        head = self._client.changes(namespace, since="now").next
        feed.asking = None
        with self._lock:
            self._copies.drop_namespace(namespace)
            self._copies.save_cursor(namespace, head)
            # Marked after the head came: a fill that starts from here on reads the entry after
            # the head was taken, so every later change to it is numbered past the head. One
            # that started before could have read a version changed before the head: refused.
            self._applied += 1
            feed.floor = self._applied
        return head

    def _apply(self, namespace: str, key: str | None, kind: str, etag: str | None, expires_at: str | None) -> None:
        if key is None:
            return
        self._note_change(namespace, key, etag if kind == "put" else None)
        record = self._copies.peek(namespace, key)
        if record is None:
            return
        # The same body written again with another TTL is a change too: the copy stays only
        # when its expiry agrees with the change's (within the clocks' and rounding's 2 s).
        expires = instant(expires_at)
        if kind != "put" or record.etag != etag or expires is None or abs(expires - record.expires_at) > 2:
            self._copies.drop(namespace, key)
            self.counts["dropped"] += 1
