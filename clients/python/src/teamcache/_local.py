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

import copy
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from ._local_feed import FeedFollowing, _Feed
from ._local_outbox import OutboxConflict, OutboxSending
from ._local_reports import HitReporting, _Report
from ._local_store import Copies, Queued, Record, instant
from ._settings import in_background
from .models import Entry, Lookup, WriteResult

if TYPE_CHECKING:
    from ._client import TeamCache
    from ._settings import _Settings

logger = logging.getLogger("teamcache.local")



def _in_background(work: Callable[..., None], *args: Any) -> None:
    """Runs a tier thread's work as background work (``in_background``): a thread that inherits
    its starter's context (free-threaded Python does) may have been started inside a caller's
    write, whose short deadline must not become every long poll's."""
    with in_background():
        work(*args)

class LocalTier(FeedFollowing, HitReporting, OutboxSending):
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
        if feed_wait <= 0:
            # 0 would make every long poll an empty page at once, asked again in a tight loop.
            raise ValueError("feed_wait must be above 0")
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

    def _attach(self, settings: _Settings, timeout: float, lent: httpx.Client | None = None,
                unlent: bool = False) -> None:
        from ._client import TeamCache
        if self._client is not None:
            # Given to a second client: both share its copies; the first's connection follows.
            # Only for the same service and token: the copies are what that token may read, and
            # queued writes are sent with it, so another token would read and write through it.
            first = self._client._settings
            if (first.base_url, first.token) != (settings.base_url, settings.token):
                raise ValueError("a LocalTier serves one service and one token: give a client with "
                                         "another URL or token a LocalTier of its own")
            return
        http = self._http_client or lent
        if http is None and unlent:
            logger.warning("the local tier connects to %s without the async client's http_client (its CA, proxy, "
                           "transport): pass LocalTier(http_client=httpx.Client(...)) to use them", settings.base_url)
        self._client = TeamCache(settings.base_url, settings.token, timeout=timeout, max_retries=0,
                                 circuit_breaker=False, http_client=http)
        # Built from the client's URL with its user and password already dropped: a 401 still says so.
        self._client._settings.url_problem = settings.url_problem
        # A client's own http_client is lent, not given: the client closes it, not the tier
        # (a second client sharing the tier may close it while the first still uses it).
        self._owns_http = lent is None or self._http_client is not None
        self._worker = threading.Thread(target=_in_background, args=(self._work,), name="teamcache-local-tier",
                                        daemon=True)
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
        """Why ``namespace`` is not live (None: it is, or nothing to say, or the namespace is
        not followed): what an app logs when its tier stops answering locally. The follower's
        last failure, until its next page: ``TransportError: …`` (the client's message, which
        never holds the token), ``ProblemError: 401 …``, a lost cursor, or another error's
        class alone; a call the service has kept waiting past its time (after a failure,
        both); or that no follower runs."""
        feed = self._feeds.get(namespace)
        if feed is None or self.live(namespace):
            return None
        late = self._late(feed)
        error = feed.last_error
        if error is not None:
            return f"{error}; since then {late}" if late is not None else error
        if self._stop.is_set():
            return "the tier is closed: no follower runs"
        if feed.thread is None:
            return "no follower runs: the tier has no client"
        return late

    # Reads

    def _follow(self, namespace: str) -> _Feed:
        feed = self._feeds.get(namespace)
        if feed is None:
            with self._lock:
                feed = self._feeds.get(namespace)
                if feed is None:
                    feed = self._feeds[namespace] = _Feed()
                    if not self._stop.is_set() and self._client is not None:
                        feed.thread = threading.Thread(target=_in_background, args=(self._follow_feed, namespace, feed),
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
            # A key written twice while offline waits once, as its last write, over the version
            # the first was made over (else the second would meet the first as "theirs"); so the
            # bounds count the others, not the write this one replaces.
            earlier = next((item for item in self._outbox if (item.namespace, item.key) == (namespace, key)), None)
            others = [item for item in self._outbox if item is not earlier]
            # Not for a namespace not known to be keepable (an encrypted one's plaintext would
            # wait in the file).
            if feed.allowed is not True or self._stop.is_set() or len(others) >= self.outbox_max \
                    or sum(item.size for item in others) + size > self.outbox_max_bytes:
                return None
            if earlier is not None:
                base = earlier.base_etag
            else:
                current = self._copies.get(namespace, key)
                base = current.etag if current is not None else None
            # The new row and the earlier one's removal in one transaction (`Copies.queue`).
            item = self._copies.queue(Queued(0, namespace, kind, key, payload, base, time.time(), size), earlier)
            if earlier is not None:
                self._outbox.remove(earlier)
            self._outbox.append(item)
            self.counts["queued"] += 1
            # Read back by this client while offline (never as the service's own version).
            self._copies.put(namespace, key, record)
        return WriteResult(created=False, key=key, namespace=namespace, queued=True)

    # Reports (`_local_reports`) and the outbox (`_local_outbox`), every `report_interval`; the
    # feed's followers are in `_local_feed`.

    def _work(self) -> None:
        while not self._stop.wait(self.report_interval):
            try:
                self._report()
                self._send_outbox()
            except Exception:  # noqa: BLE001 - the next round tries again
                if self._stop.is_set():
                    return
                logger.debug("local tier report or outbox round failed", exc_info=True)

    def flush(self) -> None:
        """Reports local hits and sends the outbox now (the background does it every
        ``report_interval``)."""
        self._report()
        self._send_outbox()

    # Warming

    def warm(self, namespace: str, *, top: int | None = None, tag: str | None = None,
             caller: TeamCache | None = None) -> int:
        """Fills the tier with the namespace's ``top`` most-hit entries, or those tagged
        ``tag``, read without counting a lookup (the entry browser's routes: read scope).
        Bodies over 64 KiB are left to the first read. Returns how many copies it holds now.
        ``caller``: the client whose call this is; the keys are asked through it (its breaker
        and deadlines), so a sick cache fails the call at once."""
        client = self._client
        if client is None or (top is None) == (tag is None):
            raise ValueError("warm needs top= or tag= (and a client)")
        self._follow(namespace)
        # The keys first: a cache that is down or refuses the token fails this at once, rather
        # than after the wait for a follower that cannot become live (7 s at the default).
        asking = caller or client
        keys = [entry.key for entry in asking.stats(namespace, top=top).top] if top is not None \
            else tagged_keys(asking.entries_page, namespace, tag or "")
        return self.warm_keys(namespace, keys, asking.inspect_entry)

    def warm_keys(self, namespace: str, keys: list[str],
                  inspect: Callable[[str, str], Mapping[str, Any] | None]) -> int:
        """Keeps copies of ``keys``, each read through ``inspect`` (the caller's client's
        ``inspect_entry``: its breaker and deadlines), once the namespace's follower has synced;
        how many it kept."""
        self.wait_synced(namespace)
        kept = 0
        for key in keys:
            since = self.mark()
            if self.keep_inspected(namespace, key, inspect(namespace, key), since):
                kept += 1
        return kept

    def wait_synced(self, namespace: str) -> None:
        """Until the namespace's follower has synced (at most ``feed_wait`` + 5 s): copies are
        kept only once it knows whether the namespace may be kept, and where it follows from
        (so no change after a copy was read is missed)."""
        feed = self._follow(namespace)
        deadline = time.monotonic() + self.feed_wait + 5
        while feed.synced_at is None and time.monotonic() < deadline and not self._stop.is_set():
            time.sleep(0.02)

    def keep_inspected(self, namespace: str, key: str, document: Mapping[str, Any] | None, since: int) -> bool:
        """Keeps the copy an entry browser's document describes (``warm``); whether it could."""
        record = _inspected(document) if document is not None else None
        if record is None:
            return False
        self.keep(namespace, key, record, since)
        return True


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


def tagged_keys(entries_page: Callable[..., dict[str, Any]], namespace: str, tag: str) -> list[str]:
    """The keys tagged ``tag`` (up to 10,000), page by page through ``entries_page``."""
    keys: list[str] = []
    after: str | None = None
    while len(keys) < 10_000:
        page = entries_page(namespace, tag=tag, after=after)
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
                  updated_at=instant(document.get("updated_at")) or now)


__all__ = ["LocalTier", "OutboxConflict"]
