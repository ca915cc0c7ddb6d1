"""``LocalTier``: a cache-first tier inside the client. A fresh local copy answers with no
network call; otherwise the service is asked conditionally (the copy's ETag: an unchanged
answer costs a ``304`` / ``not_modified``, not the body) and the answer refreshes the copy.

Coherence: one thread per namespace held follows its change feed (``/changes?wait=``) and
drops a copy as soon as a change to its key arrives from any replica and any writer (the
copy's own version is kept); this client's own writes update the tier at once; a ``410``
clears the namespace. A namespace answers from memory without asking only while its
follower is caught up and heard from within ``feed_wait × 1.5`` seconds (at least
``feed_wait + 1``): a follower that is behind (``more``), failing or silent makes every read revalidate instead.

Offline (the service unreachable, or the breaker open): a copy is served within the
caller's ``max_stale`` or the entry's stale-while-revalidate window, marked stale; writes
wait in a bounded outbox (persistent with a file) and are sent when the service answers
again: the last write wins, as on the server, and a write that met a newer or an unseen
version is reported in ``conflicts`` (and to ``on_conflict``), never dropped silently.

Local hits are reported to the service in batches (``POST …/hits``), so its stats count
them as hits, marked local. An encrypted namespace's answers are kept only with
``keep_encrypted=True`` (in memory, and in the file when there is one: plaintext)."""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import httpx

from ._local_store import Copies, Queued, Record
from .errors import ProblemError, TeamCacheError, TransportError
from .models import Entry, Lookup, WriteResult

if TYPE_CHECKING:
    from ._client import TeamCache

logger = logging.getLogger("teamcache.local")

#: Bytes of keys remembered as changed (for fills that raced a change), and of reported hits
#: held while the service cannot take them.
_CHANGED_KEYS = 10_000
_PENDING_HIT_KEYS = 10_000
#: Answers that say "later", not "never": a queued write waits for the next round.
_RETRIED_STATUSES = frozenset({401, 403, 408, 425, 429})
#: The service's bounds on one hit report.
_MAX_REPORTED = 1_000_000


@dataclass(frozen=True)
class _Report:
    """Local hits numbered for one report: ``seq`` is kept when it is sent again."""
    namespace: str
    seq: int
    counts: dict[tuple[str, str | None], int]


@dataclass(frozen=True)
class OutboxConflict:
    """A queued write that met a version of its key it had not seen, or that the service
    refused. ``outcome``: ``overwrote`` (ours was later: sent, replacing theirs),
    ``superseded`` (theirs was later: ours was not sent) or ``refused (STATUS)`` (a 4xx that
    sending again cannot mend: not sent)."""

    namespace: str
    key: str
    outcome: str
    written_at: float


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


class LocalTier:
    """A bounded local tier for one client (see the module's documentation).

    ``path``: a SQLite file that keeps copies, feed cursors and the outbox across restarts
    (None: memory only). ``max_bytes`` bounds memory and the file alike; a copy over an eighth
    of it is not kept. ``feed_wait``: each long poll's wait (a silent feed stops local answers
    after ``feed_wait × 1.5`` seconds, at least ``feed_wait + 1``). ``report_interval``: how
    often local hits are reported
    and the outbox retried. ``outbox_max`` writes (and 16 MiB) at most wait in the outbox.
    ``http_client``: the ``httpx.Client`` the tier follows and reports over (with the base URL
    and token in it, as a client's own; closed with the tier). Without it, the tier uses the
    ``http_client`` its ``TeamCache`` was given (a custom CA, proxy or transport), else one of
    its own. An ``AsyncTeamCache`` given an ``httpx.AsyncClient`` cannot lend it to the tier's
    thread: pass the tier its own, or it connects plainly (and logs that once)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, max_bytes: int = 64 * 2**20, *,
                 keep_encrypted: bool = False, feed_wait: float = 10.0, report_interval: float = 2.0,
                 outbox_max: int = 1000, offline_ttl: int = 3600,
                 on_conflict: Callable[[OutboxConflict], None] | None = None,
                 http_client: httpx.Client | None = None):
        if max_bytes < 64 * 1024:
            raise ValueError("max_bytes must be at least 64 KiB")
        self.max_bytes = max_bytes
        self.keep_encrypted = keep_encrypted
        self.feed_wait = feed_wait
        #: How long a follower's silence is trusted: its long poll's wait and a grace for a
        #: busy service to answer it (half the wait, at least a second).
        self._trusted = feed_wait + max(1.0, feed_wait / 2)
        self.report_interval = report_interval
        self.outbox_max = outbox_max
        self.outbox_max_bytes = 16 * 2**20
        self.offline_ttl = offline_ttl
        self.on_conflict = on_conflict
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        self._copies = Copies(path, max_bytes)
        self._http_client = http_client
        self._feeds: dict[str, _Feed] = {}
        #: Changes applied, in order; a key's last change, for fills that raced it.
        self._applied = 0
        self._changed: OrderedDict[tuple[str, str], tuple[int, str | None]] = OrderedDict()
        self._forgotten = 0
        #: Local hits not reported yet, by namespace, then (key, ETag answered from).
        self._hits: dict[str, dict[tuple[str, str | None], int]] = {}
        #: Numbered reports not answered yet, oldest first: each is sent again as it was (same
        #: number) until answered, so a lost answer never counts its hits twice.
        self._reporter = secrets.token_hex(8)
        self._seq = 0
        self._unsent: deque[_Report] = deque()
        self._reporting = threading.Lock()
        self._numbered = True
        self._outbox: deque[Queued] = deque(self._copies.load_outbox())
        self.conflicts: deque[OutboxConflict] = deque(maxlen=1000)
        #: What the tier did: local answers, revalidations, copies dropped by the feed, …
        self.counts: dict[str, int] = {name: 0 for name in (
            "local_hits", "offline_hits", "revalidated", "dropped", "cleared", "reported", "queued", "sent",
            "unreported")}
        self._client: TeamCache | None = None
        self._owns_http = True
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None

    # Attaching to a client: the tier's own connection (a breaker of its own, no retries: it
    # runs in the background and tries again on its own schedule).

    def _attach(self, base_url: str, token: str | None, timeout: float, lent: httpx.Client | None = None,
                unlent: bool = False) -> None:
        from ._client import TeamCache, shown_url
        if self._client is not None:
            # Given to a second client: both share its copies; the first's connection follows.
            return
        http = self._http_client or lent
        if http is None and unlent:
            logger.warning("the local tier connects to %s without the async client's http_client (its CA, proxy, "
                           "transport): pass LocalTier(http_client=httpx.Client(...)) to use them",
                           shown_url(base_url))
        self._client = TeamCache(base_url, token, timeout=timeout, max_retries=0, circuit_breaker=False,
                                 http_client=http)
        # A client's own http_client is lent, not given: the client closes it, not the tier
        # (a second client sharing the tier may close it while the first still uses it).
        self._owns_http = lent is None or self._http_client is not None
        self._worker = threading.Thread(target=self._work, name="teamcache-local-tier", daemon=True)
        self._worker.start()

    def close(self) -> None:
        """Stops following, reports what it can, closes the file. (The client closes it.)"""
        if self._stop.is_set():
            return
        self._stop.set()
        # The last report gets a second at most: a frozen service must not hold up the app's
        # shutdown (what it could not take is lost, as a crash would lose it).
        last = threading.Thread(target=self._last_report, name="teamcache-last-report", daemon=True)
        last.start()
        last.join(timeout=1.0)
        if self._client is not None and self._owns_http:
            self._client.close()
        with self._lock:
            self._copies.close()

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._copies.bytes

    @property
    def outbox(self) -> int:
        with self._lock:
            return len(self._outbox)

    def live(self, namespace: str) -> bool:
        """Whether ``namespace``'s copies may answer without asking: its follower is caught
        up and was heard from within ``feed_wait × 1.5`` seconds (at least ``feed_wait + 1``)."""
        feed = self._feeds.get(namespace)
        synced = feed.synced_at if feed is not None else None
        return synced is not None and time.monotonic() - synced < self._trusted

    def follower_error(self, namespace: str) -> str | None:
        """Why ``namespace`` is not live, when its follower's last call failed (None: it did
        not, or the namespace is not followed): what an app logs when its tier stops answering
        locally: ``TransportError: …`` (the client's message, which never holds the token),
        ``ProblemError: 401 …``, a lost cursor, or another error's class alone."""
        feed = self._feeds.get(namespace)
        return feed.last_error if feed is not None else None

    # Reads

    def _follow(self, namespace: str) -> _Feed:
        feed = self._feeds.get(namespace)
        if feed is None:
            with self._lock:
                feed = self._feeds.get(namespace)
                if feed is None:
                    feed = self._feeds[namespace] = _Feed()
                    if not self._stop.is_set() and self._client is not None:
                        feed.thread = threading.Thread(target=self._follow_feed, args=(namespace, feed),
                                                       name=f"teamcache-feed-{namespace}", daemon=True)
                        feed.thread.start()
        return feed

    def local(self, namespace: str, key: str, kind: str) -> Record | None:
        """The copy of ``key``, whatever its freshness (starts following the namespace)."""
        self._follow(namespace)
        with self._lock:
            if self._stop.is_set():
                return None
            record = self._copies.get(namespace, key)
        return record if record is not None and record.kind == kind else None

    def answer(self, namespace: str, key: str, kind: str) -> Record | None:
        """A copy that answers without asking: fresh, and the namespace followed live. (The
        hot path: one lock, a dictionary probe, the hit counted for the next report.)"""
        feed = self._feeds.get(namespace) or self._follow(namespace)
        synced = feed.synced_at
        if synced is None or time.monotonic() - synced >= self._trusted:
            return None
        with self._lock:
            if self._stop.is_set():
                return None
            record = self._copies.get(namespace, key)
            if record is None or record.kind != kind or not record.fresh(time.time()):
                return None
            self.counts["local_hits"] += 1
            hits = self._hits.get(namespace)
            pending = (key, record.etag)
            if hits is not None and pending in hits:
                hits[pending] += 1
            else:
                self._restore_hits(namespace, {pending: 1})
        return record

    def offline(self, namespace: str, key: str, kind: str, max_stale: int | None) -> Record | None:
        """A copy to answer with while the service cannot be reached."""
        record = self.local(namespace, key, kind)
        if record is None or not record.servable(time.time(), max_stale):
            return None
        with self._lock:
            self.counts["offline_hits"] += 1
        return record

    def mark(self) -> int:
        """Where the changes are now: a fill that starts here is kept only if no change to its
        key with another version was applied since (else a slow answer would overwrite a
        newer change with an older copy)."""
        with self._lock:
            return self._applied

    def keep(self, namespace: str, key: str, record: Record, since: int) -> None:
        """Keeps what the service answered (unless a change raced it, or the namespace's
        answers may not be kept)."""
        feed = self._follow(namespace)
        with self._lock:
            if feed.allowed is not True or since < feed.floor or self._stop.is_set() \
                    or self._raced(namespace, key, record.etag, since):
                return
            self._copies.put(namespace, key, record)

    def _raced(self, namespace: str, key: str, etag: str | None, since: int) -> bool:
        """Whether a fill may hold an older version than the feed's last word on its key: a
        change applied since the fill started, or a change applied before it at all whose
        version the fill does not carry (a read standby that lags the feed answers an older
        version after the change was applied: kept, it would be served fresh for its TTL)."""
        if since < self._forgotten:
            return True
        changed = self._changed.get((namespace, key))
        return changed is not None and changed[1] != etag

    def revalidated(self, namespace: str, key: str, ttl: int, etag: str | None) -> Record | None:
        """Renews the copy of version ``etag`` (not one another fill kept meanwhile)."""
        with self._lock:
            self.counts["revalidated"] += 1
            current = self._copies.get(namespace, key)
            if current is None or current.etag != etag:
                return None
            return self._copies.extend(namespace, key, ttl)

    def forget(self, namespace: str, key: str) -> None:
        """This client deleted ``key`` (or the service holds nothing fresh): the copy goes,
        and a fill still in flight from before is refused."""
        with self._lock:
            self._note_change(namespace, key, None)
            self._copies.drop(namespace, key)

    def _note_change(self, namespace: str, key: str, etag: str | None) -> None:
        self._applied += 1
        self._changed[(namespace, key)] = (self._applied, etag)
        self._changed.move_to_end((namespace, key))
        while len(self._changed) > _CHANGED_KEYS:
            _, (forgotten, _) = self._changed.popitem(last=False)
            self._forgotten = max(self._forgotten, forgotten)

    @staticmethod
    def lookup_record(answer: Lookup) -> Record | None:
        if not answer.hit or answer.response is None or answer.ttl is None:
            return None
        now = time.time()
        return Record(kind="lookup", etag=answer.etag, body=answer.response.encode(), content_type="text/plain",
                      metadata=copy.deepcopy(answer.metadata), expires_at=now + answer.ttl,
                      updated_at=now - (answer.age or 0), swr=answer.stale_while_revalidate)

    @staticmethod
    def entry_record(entry: Entry) -> Record | None:
        ttl = _status_ttl(entry.cache_status)
        if ttl is None or entry.etag is None:
            return None
        now = time.time()
        return Record(kind="raw", etag=entry.etag, body=entry.body, content_type=entry.content_type, metadata=None,
                      expires_at=now + ttl, updated_at=now - entry.age)

    # Writes

    def wrote(self, namespace: str, key: str, record: Record) -> None:
        """This client's own committed write: the tier holds it at once, and a fill of an older
        version still in flight is refused."""
        with self._lock:
            self._note_change(namespace, key, record.etag)
            since = self._applied
        self.keep(namespace, key, record, since)

    def queue(self, namespace: str, kind: str, key: str, payload: dict[str, Any], record: Record) -> WriteResult | None:
        """Keeps a write for later (None when the outbox is full: the caller raises)."""
        size = len(str(payload))
        feed = self._follow(namespace)
        with self._lock:
            # Not for a namespace not known to be keepable (an encrypted one's plaintext would
            # wait in the file).
            if feed.allowed is not True or self._stop.is_set() or len(self._outbox) >= self.outbox_max \
                    or sum(item.size for item in self._outbox) + size > self.outbox_max_bytes:
                return None
            # A key written twice while offline waits once, as its last write, over the version
            # the first was made over (else the second would meet the first as "theirs").
            earlier = next((item for item in self._outbox if (item.namespace, item.key) == (namespace, key)), None)
            if earlier is not None:
                self._outbox.remove(earlier)
                self._copies.unqueue(earlier)
                base = earlier.base_etag
            else:
                current = self._copies.get(namespace, key)
                base = current.etag if current is not None else None
            item = self._copies.queue(Queued(0, namespace, kind, key, payload, base, time.time(), size))
            self._outbox.append(item)
            self.counts["queued"] += 1
            # Read back by this client while offline (never as the service's own version).
            self._copies.put(namespace, key, record)
        return WriteResult(created=False, key=key, namespace=namespace, queued=True)

    # The feed

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
                if feed.allowed is None:
                    encrypted = client.stats(namespace, top=0).document.get("encrypted") is True
                    feed.allowed = self.keep_encrypted or not encrypted
                    feed.checked_at = time.monotonic()
                    if not feed.allowed:
                        logger.warning("namespace %s is encrypted: its answers are not kept locally "
                                       "(LocalTier(keep_encrypted=True) keeps them)", namespace)
                        with self._lock:
                            self._copies.drop_namespace(namespace)
                if cursor is None:
                    cursor = self._start(namespace, feed)
                asked = time.monotonic()
                page = client.changes(namespace, since=cursor, wait=self.feed_wait, limit=1000)
                with self._lock:
                    for change in page.changes:
                        self._apply(namespace, change.key, change.kind, change.etag, change.expires_at)
                    self._copies.save_cursor(namespace, page.next)
                cursor = page.next
                # Behind (more to read): not live until caught up.
                feed.synced_at = None if page.more else time.monotonic()
                feed.last_error = None
                pause = 0.2
                if not page.changes and not page.more and time.monotonic() - asked < self.feed_wait / 2:
                    # An empty page at once (the server could not hold the request: its waiter
                    # room full, or a proxy): asked again after a rest, never in a tight loop.
                    self._stop.wait(min(1.0, self.feed_wait / 4))
                if time.monotonic() - feed.checked_at > 60:
                    feed.allowed = None  # a namespace may be encrypted since: asked again

            except ProblemError as error:
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
                feed.synced_at = None
                # The client's messages name statuses and causes, never the token (one a header
                # cannot carry is not sent; see `_Settings.unreachable`).
                self._failed(feed, f"{type(error).__name__}: {error}")
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)
            except Exception as error:  # noqa: BLE001 - a closed client mid-request, or a bug: never kill the app
                feed.synced_at = None
                if self._stop.is_set():
                    return
                # Anything else (a caller's transport, a bug): its class only, whatever its text holds.
                self._failed(feed, type(error).__name__)
                logger.exception("the local tier's feed follower of %s failed; it starts again", namespace)
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)

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
        head = self._client.changes(namespace, since="now").next
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
        expires = _instant(expires_at)
        if kind != "put" or record.etag != etag or expires is None or abs(expires - record.expires_at) > 2:
            self._copies.drop(namespace, key)
            self.counts["dropped"] += 1

    # Reports and the outbox, every `report_interval`

    def _work(self) -> None:
        while not self._stop.wait(self.report_interval):
            try:
                self._report()
                self._send_outbox()
            except Exception:  # noqa: BLE001 - the next round tries again
                if self._stop.is_set():
                    return
                logger.debug("local tier report or outbox round failed", exc_info=True)

    def _report(self) -> None:
        # One reporter at a time (the background, ``flush`` and ``close``): numbers go out in order.
        with self._reporting:
            self._number_pending()
            client = self._client
            failed: set[str] = set()
            for report in list(self._unsent):
                if report.namespace in failed:
                    continue  # its earlier report waits: a later number would overtake it
                try:
                    if client is None:
                        raise TransportError("no client")
                    self._send_report(client, report)
                    with self._lock:
                        self.counts["reported"] += sum(report.counts.values())
                except ProblemError as error:
                    if _later(error.status):
                        failed.add(report.namespace)
                        continue
                    logger.warning("local hits of %s refused (%s): not reported", report.namespace, error.status)
                    with self._lock:
                        self.counts["unreported"] += sum(report.counts.values())
                except TeamCacheError:
                    failed.add(report.namespace)
                    continue
                self._unsent.remove(report)

    def _send_report(self, client: TeamCache, report: _Report) -> None:
        if self._numbered:
            try:
                client.report_hits(report.namespace, report.counts, reporter=self._reporter, seq=report.seq)
                return
            except ProblemError as error:
                if error.status != 422:
                    raise
                # A service from before numbered reports refuses the members: it is sent
                # unnumbered from now on (as before, a lost answer may then count twice).
                logger.warning("the service does not take numbered hit reports: reporting unnumbered")
                self._numbered = False
        client.report_hits(report.namespace, report.counts)

    def _number_pending(self) -> None:
        """Turns the hits counted since the last round into numbered reports (within one
        report's bounds each), dropping what exceeds the tier's bound on waiting keys."""
        with self._lock:
            taken, self._hits = self._hits, {}
        waiting = sum(len(report.counts) for report in self._unsent)
        for namespace, counts in taken.items():
            items = [(key, min(count, _MAX_REPORTED)) for key, count in counts.items()]
            for start, end in _chunks([count for _, count in items]):
                chunk = dict(items[start:end])
                if waiting + len(chunk) > _PENDING_HIT_KEYS:
                    with self._lock:
                        self.counts["unreported"] += sum(chunk.values())
                    continue
                self._seq += 1
                self._unsent.append(_Report(namespace, self._seq, chunk))
                waiting += len(chunk)

    def _last_report(self) -> None:
        with contextlib.suppress(TeamCacheError):
            self._report()

    def _restore_hits(self, namespace: str, counts: Mapping[tuple[str, str | None], int]) -> None:
        held = self._hits.setdefault(namespace, {})
        for key, count in counts.items():
            if key in held or sum(len(keys) for keys in self._hits.values()) < _PENDING_HIT_KEYS:
                held[key] = held.get(key, 0) + count
            else:
                self.counts["unreported"] += count

    def flush(self) -> None:
        """Reports local hits and sends the outbox now (the background does it every
        ``report_interval``)."""
        self._report()
        self._send_outbox()

    def _send_outbox(self) -> None:
        # One sender at a time (the background and ``flush``): two would send the same write.
        with self._sending:
            client = self._client
            while client is not None and not self._stop.is_set():
                with self._lock:
                    if not self._outbox:
                        return
                    item = self._outbox[0]
                try:
                    record = _send(client, item, self._conflict)
                except ProblemError as error:
                    if _later(error.status):
                        return  # overloaded, rate limited or refusing the token: sent again later
                    logger.warning("a write queued offline to %s was refused (%s %s): dropped", item.namespace,
                                   error.status, error.title)
                    self._conflict(item, f"refused ({error.status})")
                    record = None
                with self._lock:
                    if self._outbox and self._outbox[0] is item:
                        self._outbox.popleft()
                    self._copies.unqueue(item)
                    self.counts["sent"] += 1
                    if record is None:
                        self._copies.drop(item.namespace, item.key)
                if record is not None:
                    self.wrote(item.namespace, item.key, record)

    def _conflict(self, item: Queued, outcome: str) -> None:
        conflict = OutboxConflict(item.namespace, item.key, outcome, item.written_at)
        self.conflicts.append(conflict)
        logger.warning("a write queued offline to %s met a version it had not seen: %s", item.namespace, outcome)
        if self.on_conflict is not None:
            try:
                self.on_conflict(conflict)
            except Exception:  # noqa: BLE001 - the caller's hook must not stop the outbox
                logger.exception("on_conflict raised")

    # Warming

    def warm(self, namespace: str, *, top: int | None = None, tag: str | None = None) -> int:
        """Fills the tier with the namespace's ``top`` most-hit entries, or those tagged
        ``tag``, read without counting a lookup (the entry browser's routes: read scope).
        Bodies over 64 KiB are left to the first read. Returns how many copies it holds now."""
        client = self._client
        if client is None or (top is None) == (tag is None):
            raise ValueError("warm needs top= or tag= (and a client)")
        feed = self._follow(namespace)
        deadline = time.monotonic() + self.feed_wait + 5
        # Kept only once the follower knows whether the namespace may be kept, and where it
        # follows from (so no change after the copies were read is missed).
        while feed.synced_at is None and time.monotonic() < deadline and not self._stop.is_set():
            time.sleep(0.02)
        keys = [entry.key for entry in client.stats(namespace, top=top).top] if top is not None \
            else _tagged(client, namespace, tag or "")
        kept = 0
        for key in keys:
            since = self.mark()
            document = client.inspect_entry(namespace, key)
            record = _inspected(document) if document is not None else None
            if record is not None:
                self.keep(namespace, key, record, since)
                kept += 1
        return kept


def _later(status: int) -> bool:
    """An answer that says "later", not "never": the write or report waits for the next round."""
    return status in _RETRIED_STATUSES or status >= 500


def _chunks(counts: list[int]) -> list[tuple[int, int]]:
    """Ranges of ``counts`` each within one report's bounds: 1000 keys, a million hits."""
    ranges, start, total = [], 0, 0
    for index, count in enumerate(counts):
        if index - start == 1000 or total + count > _MAX_REPORTED:
            ranges.append((start, index))
            start, total = index, 0
        total += count
    if start < len(counts):
        ranges.append((start, len(counts)))
    return ranges


def _status_ttl(status: str | None) -> int | None:
    """``ttl=N`` of ``Cache-Status: teamcache; hit; ttl=N``."""
    for part in (status or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == "ttl":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _tagged(client: TeamCache, namespace: str, tag: str) -> list[str]:
    keys: list[str] = []
    after: str | None = None
    while len(keys) < 10_000:
        page = client.entries_page(namespace, tag=tag, after=after)
        keys += [entry["key"] for entry in page.get("entries", []) if isinstance(entry.get("key"), str)]
        after = page.get("next")
        if not after:
            break
    return keys


def _inspected(document: Mapping[str, Any]) -> Record | None:
    body, ttl, etag = document.get("body") or {}, document.get("ttl"), document.get("etag")
    if body.get("kind") != "text" or body.get("truncated") or not isinstance(ttl, int) or not isinstance(etag, str):
        return None
    now = time.time()
    metadata = document.get("metadata")
    return Record(kind="lookup" if document.get("model") else "raw", etag=etag, body=str(body.get("text")).encode(),
                  content_type=str(document.get("content_type") or "application/octet-stream"),
                  metadata=metadata if isinstance(metadata, dict) else None, expires_at=now + ttl,
                  updated_at=_instant(document.get("updated_at")) or now)


def _instant(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _send(client: TeamCache, item: Queued, conflict: Callable[[Queued, str], None]) -> Record | None:
    """Sends one queued write: as it was made when the key still holds the version it was
    made over; otherwise the later write wins. The copy to keep, or None (ours lost, or the
    service refused it: dropped, logged)."""
    payload = dict(item.payload)
    if item.kind == "put":
        return _send_put(client, item, payload, conflict)
    return _send_upsert(client, item, payload, conflict)


def _send_put(client: TeamCache, item: Queued, payload: dict[str, Any],
              conflict: Callable[[Queued, str], None]) -> Record | None:
    body = payload.pop("body").encode("latin-1")
    try:
        if item.base_etag is None:
            result = client.put(item.namespace, item.key, body, create_only=True, **payload)
        else:
            result = client.put(item.namespace, item.key, body, if_match=item.base_etag, **payload)
    except ProblemError as error:
        if error.status != 412:
            raise
        head = client.head(item.namespace, item.key)
        theirs = _modified(head.headers.get("last-modified")) if isinstance(head, Entry) else None
        if theirs is not None and theirs > item.written_at:
            conflict(item, "superseded")
            return None
        conflict(item, "overwrote")
        result = client.put(item.namespace, item.key, body, **payload)
    return _written(result, "raw", body, payload.get("content_type") or "application/octet-stream", None)


def _send_upsert(client: TeamCache, item: Queued, payload: dict[str, Any],
                 conflict: Callable[[Queued, str], None]) -> Record | None:
    descriptor, response = payload.pop("descriptor"), payload.pop("response")
    current = client.lookup(item.namespace, descriptor, max_stale=2**31 - 1)
    if current.hit and current.etag != item.base_etag:
        theirs = time.time() - (current.age or 0)
        if theirs > item.written_at:
            conflict(item, "superseded")
            return None
        conflict(item, "overwrote")
    result = client.upsert(item.namespace, descriptor, response, **payload)
    return _written(result, "lookup", response.encode(), "text/plain", payload.get("metadata"))


def _modified(text: str | None) -> float | None:
    try:
        return parsedate_to_datetime(text).timestamp() if text else None
    except (TypeError, ValueError):
        return None


def _written(result: WriteResult, kind: str, body: bytes, content_type: str,
             metadata: dict[str, Any] | None) -> Record | None:
    """The copy of a committed write (None when its expiry is not known)."""
    expires = _instant(result.expires_at)
    if expires is None or result.etag is None:
        return None
    now = time.time()
    return Record(kind=kind, etag=result.etag, body=body, content_type=content_type, metadata=copy.deepcopy(metadata),
                  expires_at=expires, updated_at=now)


__all__ = ["LocalTier", "OutboxConflict"]
