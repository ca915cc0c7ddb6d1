"""The five calls a local tier answers or follows (``get``, ``lookup``, ``put``, ``upsert``,
``delete``), for the sync and the asyncio client: the tier's decision is shared (``_Plan``),
only the sending differs. Without a tier each call is the plain route."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import httpx

from ._local import LocalTier
from ._local_outbox import _written
from ._local_store import Record, window
from .errors import CacheSkipped, TransportError
from .keys import descriptor_key
from .models import Entry, EntryMiss, Lease, Lookup, WriteResult


def _text_key(key: str | bytes) -> str | None:
    """The tier keys copies by text; a key that is not UTF-8 passes it by."""
    if isinstance(key, str):
        return key
    try:
        return key.decode()
    except UnicodeDecodeError:
        return None


#: Keys of descriptors seen lately whose members are all hashable (a model and a prompt, the
#: common case): a local hit then costs a dictionary probe, not canonical JSON and a SHA-256.
_KEYS: dict[tuple[tuple[str, Any], ...], str] = {}


def _key_of(descriptor: Mapping[str, Any]) -> str:
    try:
        probe = tuple(sorted(descriptor.items()))
        known = _KEYS.get(probe)
    except TypeError:  # a member that is a list or a dict: derived each time
        return descriptor_key(descriptor)
    if known is None:
        known = descriptor_key(descriptor)
        if len(_KEYS) >= 4096:
            _KEYS.clear()
        _KEYS[probe] = known
    return known


def _local_lookup(key: str, record: Record, *, stale: bool) -> Lookup:
    """The answer a copy gives: made once a second per copy and shared (it is immutable; only
    its whole-second ``age`` and ``ttl`` change), since making a frozen dataclass costs more
    than the rest of a local hit. Its ``metadata`` is a copy of the tier's (a caller that
    changes it cannot change the tier's copy), shared by that second's callers: read it only."""
    now = time.time()
    made = record.answered(now, stale)
    if isinstance(made, Lookup):
        return made
    answer = Lookup(hit=True, key=key, response=record.text(), metadata=copy.deepcopy(record.metadata),
                    age=max(0, int(now - record.updated_at)), stale=stale, etag=record.etag,
                    ttl=math.floor(record.expires_at - now), stale_while_revalidate=record.swr, from_local=True)
    record.remember(now, stale, answer)
    return answer


def _local_entry(record: Record, *, stale: bool, from_local: bool = True) -> Entry:
    # Made afresh each time: an entry carries a mutable `headers` dictionary.
    return _entry_of(time.time(), record, from_local, stale)


def _entry_of(now: float, record: Record, from_local: bool, stale: bool) -> Entry:
    """``stale``: answered while the service could not be reached (``; stale`` in the status)."""
    ttl = math.floor(record.expires_at - now)
    status = f"teamcache; hit; ttl={ttl}" + ("; local" if from_local else "") + ("; stale" if stale else "")
    return Entry(body=record.body, content_type=record.content_type, etag=record.etag, cache_status=status,
                 age=max(0, int(now - record.updated_at)), headers={"cache-status": status}, from_local=from_local)


def _never_sent(error: TransportError) -> bool:
    """Whether a failed write certainly did not reach the service (refused, not connected, or
    not asked: the breaker is open). One that timed out is not queued: its outcome is unknown,
    and a frozen service may apply it when it resumes."""
    cause = error.__cause__
    return isinstance(error, CacheSkipped) or isinstance(cause, (httpx.ConnectError, httpx.ConnectTimeout))


def _queueable(payload: Mapping[str, Any]) -> bool:
    """A write kept in the outbox must read back as itself (a ``RawNumber`` would not), in
    JSON either client reads (no ``NaN``)."""
    try:
        json.dumps(payload, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


class _Plan:
    """One call's use of the tier: what answers locally, what to ask, what to keep."""

    def __init__(self, tier: LocalTier, namespace: str, key: str, kind: str):
        self.tier, self.namespace, self.key, self.kind = tier, namespace, key, kind
        self.held: Record | None = None
        self.since = 0

    def local(self) -> Record | None:
        answer = self.tier.answer(self.namespace, self.key, self.kind)
        if answer is None:
            self.held = self.tier.local(self.namespace, self.key, self.kind)
            self.since = self.tier.mark()
        return answer

    @property
    def etag(self) -> str | None:
        return self.held.etag if self.held is not None else None

    def offline(self, max_stale: int | None) -> Record | None:
        return self.tier.offline(self.namespace, self.key, self.kind, max_stale)

    @staticmethod
    def of_get(tier: LocalTier | None, namespace: str, key: str | bytes, no_cache: bool, wait: float | None,
               if_none_match: str | None) -> _Plan | None:
        """The plan of a raw GET, or None when the tier has no part in it (no tier, a key that
        is not text, a forced refresh, a wait or the caller's own condition)."""
        text = _text_key(key)
        if tier is None or text is None or no_cache or wait is not None or if_none_match is not None:
            return None
        return _Plan(tier, namespace, text, "raw")

    @staticmethod
    def of_lookup(tier: LocalTier | None, namespace: str, descriptor: Mapping[str, Any], refresh: bool,
                  if_none_match: str | None) -> _Plan | None:
        if tier is None or refresh or if_none_match is not None:
            return None
        return _Plan(tier, namespace, _key_of(descriptor), "lookup")

    def local_entry(self) -> Entry | None:
        local = self.local()
        return _local_entry(local, stale=False) if local is not None else None

    def local_lookup(self) -> Lookup | None:
        local = self.local()
        return _local_lookup(self.key, local, stale=False) if local is not None else None

    def offline_entry(self, max_stale: int | None, error: TransportError) -> Entry:
        """A copy while the service cannot be reached, marked stale; else the failure."""
        offline = self.offline(max_stale)
        if offline is None:
            raise error
        return _local_entry(offline, stale=True)

    def offline_lookup(self, max_stale: int | None, error: TransportError) -> Lookup:
        offline = self.offline(max_stale)
        if offline is None:
            raise error
        return _local_lookup(self.key, offline, stale=True)

    def looked_up(self, answer: Lookup) -> Lookup:
        if answer.hit and answer.not_modified and self.held is not None:
            self.tier.revalidated(self.namespace, self.key, answer.ttl or 0, self.held.etag)
            return dataclasses.replace(answer, response=self.held.body.decode(),
                                       metadata=copy.deepcopy(self.held.metadata), not_modified=False)
        self._refetched(LocalTier.lookup_record(answer), answer.hit)
        return answer

    def got(self, answer: Entry | EntryMiss | None) -> Entry | EntryMiss | None:
        if isinstance(answer, Entry) and answer.not_modified and self.held is not None:
            self.tier.revalidated(self.namespace, self.key, _ttl(answer), self.held.etag)
            return dataclasses.replace(_local_entry(self.held, stale=False, from_local=False), headers=answer.headers,
                                       cache_status=answer.cache_status, age=answer.age)
        self._refetched(LocalTier.entry_record(answer) if isinstance(answer, Entry) else None,
                        isinstance(answer, Entry))
        return answer

    def _refetched(self, record: Record | None, hit: bool) -> None:
        if record is not None:
            self.tier.keep(self.namespace, self.key, record, self.since)
        elif not hit and self.held is not None and self.held.fresh(time.time()):
            # The service holds nothing fresh where the copy thought it fresh: it goes.
            self.tier.forget(self.namespace, self.key)


def _ttl(entry: Entry) -> int:
    record = LocalTier.entry_record(entry)
    return int(record.expires_at - time.time()) if record is not None else 0


def _offline_record(tier: LocalTier, kind: str, body: bytes, content_type: str, metadata: dict[str, Any] | None,
                    ttl: int | None, swr: int | None) -> Record:
    now = time.time()
    return Record(kind=kind, etag=None, body=body, content_type=content_type, metadata=metadata,
                  expires_at=now + (ttl or tier.offline_ttl), updated_at=now, swr=window(swr))


class _Write:
    """One write's use of the tier, shared by both clients: the copy to hold once it is
    committed, and what waits in the outbox when it certainly did not reach the service."""

    def __init__(self, tier: LocalTier | None, namespace: str, key: str | None, kind: str, body: bytes,
                 content_type: str, metadata: dict[str, Any] | None, payload: dict[str, Any], queueable: bool):
        self.tier, self.namespace, self.key, self.kind = tier, namespace, key, kind
        self.body, self.content_type, self.metadata = body, content_type, metadata
        self.payload, self.queueable = payload, queueable and _queueable(payload)

    @staticmethod
    def of_put(tier: LocalTier | None, namespace: str, key: str | bytes, body: bytes | str, content_type: str | None,
               ttl: int | None, tags: Iterable[str], stale_while_revalidate: int | None,
               conditional: bool, content_encoding: str | None) -> _Write:
        data = body.encode() if isinstance(body, str) else bytes(body)
        kind = content_type or ("text/plain; charset=utf-8" if isinstance(body, str) else "application/octet-stream")
        payload = {"body": data.decode("latin-1"), "content_type": kind, "ttl": ttl, "tags": list(tags),
                   "stale_while_revalidate": stale_while_revalidate}
        # A pre-compressed body's copy would be the compressed bytes: such writes are the service's.
        key_text = _text_key(key) if content_encoding is None else None
        return _Write(tier, namespace, key_text, "raw", data, kind, None, payload, queueable=not conditional)

    @staticmethod
    def of_upsert(tier: LocalTier | None, namespace: str, descriptor: Mapping[str, Any], response: str,
                  metadata: Mapping[str, Any] | None, ttl: int | None, tags: Iterable[str],
                  stale_while_revalidate: int | None) -> _Write:
        kept = copy.deepcopy(dict(metadata)) if metadata is not None else None
        # A queued write is sent later, from this payload: a deep copy, or the caller's own lists
        # (a chat's history, appended to after each turn) would send it under another key.
        sent = copy.deepcopy(dict(descriptor)) if tier is not None else dict(descriptor)
        payload = {"descriptor": sent, "response": response, "metadata": kept, "ttl": ttl,
                   "tags": list(tags), "stale_while_revalidate": stale_while_revalidate}
        key = _key_of(descriptor) if tier is not None else None
        return _Write(tier, namespace, key, "lookup", response.encode(), "text/plain", kept, payload, queueable=True)

    def failed(self, error: TransportError) -> WriteResult:
        """Queued in the outbox (``queued``), or the failure when it may not wait."""
        tier = self.tier
        if tier is None or self.key is None or not self.queueable or not _never_sent(error):
            raise error
        record = _offline_record(tier, self.kind, self.body, self.content_type, self.metadata, self.payload["ttl"],
                                 self.payload["stale_while_revalidate"])
        queued = tier.queue(self.namespace, "put" if self.kind == "raw" else "upsert", self.key, self.payload, record)
        if queued is None:
            raise error
        return queued

    def committed(self, result: WriteResult) -> WriteResult:
        if self.tier is not None and self.key is not None:
            record = _written(result, self.kind, self.body, self.content_type, self.metadata,
                              self.payload["stale_while_revalidate"])
            if record is not None:
                self.tier.wrote(self.namespace, result.key if self.kind == "lookup" else self.key, record)
        return result


def _forget(tier: LocalTier | None, namespace: str, key: str | bytes) -> None:
    text = _text_key(key)
    if tier is not None and text is not None:
        tier.forget(namespace, text)


class LocalSyncMixin:
    """``TeamCache``'s calls through its local tier (the tier's part is in ``_Plan`` and
    ``_Write``; this only sends)."""

    _tier: LocalTier | None

    def _remote_get(self, *args: Any, **kwargs: Any) -> Any: ...  # bound by the client
    def _remote_lookup(self, *args: Any, **kwargs: Any) -> Any: ...
    def _remote_put(self, *args: Any, **kwargs: Any) -> Any: ...
    def _remote_upsert(self, *args: Any, **kwargs: Any) -> Any: ...
    def _remote_delete(self, *args: Any, **kwargs: Any) -> Any: ...

    def get(self, namespace: str, key: str | bytes, *, max_stale: int | None = None, no_cache: bool = False,
            only_if_cached: bool = False, if_none_match: str | None = None,
            wait: float | None = None) -> Entry | EntryMiss | None:
        """The entry (``Entry``), or None on a miss. ``wait`` with ``if_none_match``: a watch (an
        ``EntryMiss`` marked ``pending`` when another caller's fill did not come in the wait).
        With a local tier: a fresh copy answers (``from_local``); else the service is asked
        with the copy's ETag; offline, a copy within ``max_stale`` answers, marked stale."""
        plan = _Plan.of_get(self._tier, namespace, key, no_cache, wait, if_none_match)
        if plan is None:
            return self._remote_get(namespace, key, max_stale=max_stale, no_cache=no_cache,  # type: ignore[no-any-return]
                                    only_if_cached=only_if_cached, if_none_match=if_none_match, wait=wait)
        if (local := plan.local_entry()) is not None:
            return local
        try:
            answer = self._remote_get(namespace, key, max_stale=max_stale, only_if_cached=only_if_cached,
                                      if_none_match=plan.etag)
        except TransportError as error:
            return plan.offline_entry(max_stale, error)
        return plan.got(answer)

    def lookup(self, namespace: str, descriptor: Mapping[str, Any], *, max_stale: int | None = None,
               refresh: bool = False, lease: int | None = None, wait: float | None = None,
               if_none_match: str | None = None) -> Lookup:
        """A ``Lookup``: a hit with the stored answer, or a miss (with this caller's ``lease``,
        or ``pending``, when a lease was asked for). With a local tier, as ``get``."""
        plan = _Plan.of_lookup(self._tier, namespace, descriptor, refresh, if_none_match)
        if plan is None:
            return self._remote_lookup(namespace, descriptor, max_stale=max_stale,  # type: ignore[no-any-return]
                                       refresh=refresh, lease=lease, wait=wait, if_none_match=if_none_match)
        if (local := plan.local_lookup()) is not None:
            return local
        try:
            answer = self._remote_lookup(namespace, descriptor, max_stale=max_stale, lease=lease, wait=wait,
                                         if_none_match=plan.etag)
        except TransportError as error:
            return plan.offline_lookup(max_stale, error)
        return plan.looked_up(answer)

    def put(self, namespace: str, key: str | bytes, body: bytes | str, *, content_type: str | None = None,
            ttl: int | None = None, tags: Iterable[str] = (), create_only: bool = False, if_match: str | None = None,
            lease: Lease | str | None = None, stale_while_revalidate: int | None = None,
            content_encoding: str | None = None) -> WriteResult:
        """Stores ``body``; returns a ``WriteResult`` once it is committed. With a local tier:
        the tier holds it at once; while the service cannot be reached, an unconditional write
        waits in the outbox (``queued``)."""
        write = _Write.of_put(self._tier, namespace, key, body, content_type, ttl, tags, stale_while_revalidate,
                              create_only or if_match is not None, content_encoding)
        try:
            result = self._remote_put(namespace, key, body, content_type=content_type, ttl=ttl, tags=tags,
                                      create_only=create_only, if_match=if_match, lease=lease,
                                      stale_while_revalidate=stale_while_revalidate, content_encoding=content_encoding)
        except TransportError as error:
            return write.failed(error)
        return write.committed(result)

    def upsert(self, namespace: str, descriptor: Mapping[str, Any], response: str, *,
               metadata: Mapping[str, Any] | None = None, ttl: int | None = None, tags: Iterable[str] = (),
               lease: Lease | str | None = None, stale_while_revalidate: int | None = None) -> WriteResult:
        """Stores the model's answer to ``descriptor``; ``metadata`` may carry ``input_tokens``
        and ``output_tokens`` (what a hit saves). With a local tier, as ``put``."""
        write = _Write.of_upsert(self._tier, namespace, descriptor, response, metadata, ttl, tags,
                                 stale_while_revalidate)
        try:
            result = self._remote_upsert(namespace, descriptor, response, metadata=metadata, ttl=ttl, tags=tags,
                                         lease=lease, stale_while_revalidate=stale_while_revalidate)
        except TransportError as error:
            return write.failed(error)
        return write.committed(result)

    def delete(self, namespace: str, key: str | bytes) -> bool:
        """True when an entry was deleted, False when there was none (the tier's copy goes)."""
        deleted: bool = self._remote_delete(namespace, key)
        _forget(self._tier, namespace, key)
        return deleted

    def warm(self, namespace: str, *, top: int | None = None, tag: str | None = None) -> int:
        """Fills the local tier with the namespace's ``top`` most-hit entries or those tagged
        ``tag`` (no lookup counted); how many copies it kept."""
        if self._tier is None:
            raise ValueError("warm needs a client with a local_tier")
        return self._tier.warm(namespace, top=top, tag=tag, caller=self)  # type: ignore[arg-type]


class LocalAsyncMixin:
    """``AsyncTeamCache``'s calls through its local tier (the tier's own work runs on its
    threads; a local answer takes the tier's lock for microseconds, never the event loop's time)."""

    _tier: LocalTier | None

    async def _remote_get(self, *args: Any, **kwargs: Any) -> Any: ...  # bound by the client
    async def _remote_lookup(self, *args: Any, **kwargs: Any) -> Any: ...
    async def _remote_put(self, *args: Any, **kwargs: Any) -> Any: ...
    async def _remote_upsert(self, *args: Any, **kwargs: Any) -> Any: ...
    async def _remote_delete(self, *args: Any, **kwargs: Any) -> Any: ...
    async def _remote_stats(self, *args: Any, **kwargs: Any) -> Any: ...  # warm's keys
    async def _remote_entries_page(self, *args: Any, **kwargs: Any) -> Any: ...
    async def _remote_inspect_entry(self, *args: Any, **kwargs: Any) -> Any: ...

    async def get(self, namespace: str, key: str | bytes, *, max_stale: int | None = None, no_cache: bool = False,
                  only_if_cached: bool = False, if_none_match: str | None = None,
                  wait: float | None = None) -> Entry | EntryMiss | None:
        """As ``TeamCache.get``."""
        plan = _Plan.of_get(self._tier, namespace, key, no_cache, wait, if_none_match)
        if plan is None:
            return await self._remote_get(namespace, key, max_stale=max_stale,  # type: ignore[no-any-return]
                                          no_cache=no_cache, only_if_cached=only_if_cached,
                                          if_none_match=if_none_match, wait=wait)
        if (local := plan.local_entry()) is not None:
            return local
        try:
            answer = await self._remote_get(namespace, key, max_stale=max_stale, only_if_cached=only_if_cached,
                                            if_none_match=plan.etag)
        except TransportError as error:
            return plan.offline_entry(max_stale, error)
        return plan.got(answer)

    async def lookup(self, namespace: str, descriptor: Mapping[str, Any], *, max_stale: int | None = None,
                     refresh: bool = False, lease: int | None = None, wait: float | None = None,
                     if_none_match: str | None = None) -> Lookup:
        """As ``TeamCache.lookup``."""
        plan = _Plan.of_lookup(self._tier, namespace, descriptor, refresh, if_none_match)
        if plan is None:
            return await self._remote_lookup(namespace, descriptor,  # type: ignore[no-any-return]
                                             max_stale=max_stale, refresh=refresh, lease=lease, wait=wait,
                                             if_none_match=if_none_match)
        if (local := plan.local_lookup()) is not None:
            return local
        try:
            answer = await self._remote_lookup(namespace, descriptor, max_stale=max_stale, lease=lease, wait=wait,
                                               if_none_match=plan.etag)
        except TransportError as error:
            return plan.offline_lookup(max_stale, error)
        return plan.looked_up(answer)

    async def put(self, namespace: str, key: str | bytes, body: bytes | str, *, content_type: str | None = None,
                  ttl: int | None = None, tags: Iterable[str] = (), create_only: bool = False,
                  if_match: str | None = None, lease: Lease | str | None = None,
                  stale_while_revalidate: int | None = None, content_encoding: str | None = None) -> WriteResult:
        """As ``TeamCache.put``."""
        write = _Write.of_put(self._tier, namespace, key, body, content_type, ttl, tags, stale_while_revalidate,
                              create_only or if_match is not None, content_encoding)
        try:
            result = await self._remote_put(namespace, key, body, content_type=content_type, ttl=ttl, tags=tags,
                                            create_only=create_only, if_match=if_match, lease=lease,
                                            stale_while_revalidate=stale_while_revalidate,
                                            content_encoding=content_encoding)
        except TransportError as error:
            return write.failed(error)
        return write.committed(result)

    async def upsert(self, namespace: str, descriptor: Mapping[str, Any], response: str, *,
                     metadata: Mapping[str, Any] | None = None, ttl: int | None = None, tags: Iterable[str] = (),
                     lease: Lease | str | None = None, stale_while_revalidate: int | None = None) -> WriteResult:
        """As ``TeamCache.upsert``."""
        write = _Write.of_upsert(self._tier, namespace, descriptor, response, metadata, ttl, tags,
                                 stale_while_revalidate)
        try:
            result = await self._remote_upsert(namespace, descriptor, response, metadata=metadata, ttl=ttl,
                                               tags=tags, lease=lease, stale_while_revalidate=stale_while_revalidate)
        except TransportError as error:
            return write.failed(error)
        return write.committed(result)

    async def delete(self, namespace: str, key: str | bytes) -> bool:
        """As ``TeamCache.delete``."""
        deleted: bool = await self._remote_delete(namespace, key)
        _forget(self._tier, namespace, key)
        return deleted

    async def warm(self, namespace: str, *, top: int | None = None, tag: str | None = None) -> int:
        """As ``TeamCache.warm``: the keys and the entries asked through this client (its breaker
        and deadlines, so a sick cache fails the call at once, as the sync client's does); the
        wait for the follower on a thread."""
        tier = self._tier
        if tier is None:
            raise ValueError("warm needs a client with a local_tier")
        if (top is None) == (tag is None):
            raise ValueError("warm needs top= or tag=")
        tier._follow(namespace)  # syncing while the keys are asked
        if top is not None:
            keys = [entry.key for entry in (await self._remote_stats(namespace, top=top)).top]
        else:
            keys = await _tagged_keys(self._remote_entries_page, namespace, tag or "")
        await asyncio.to_thread(tier.wait_synced, namespace)
        kept = 0
        for key in keys:
            since = tier.mark()
            if tier.keep_inspected(namespace, key, await self._remote_inspect_entry(namespace, key), since):
                kept += 1
        return kept


async def _tagged_keys(entries_page: Callable[..., Awaitable[dict[str, Any]]], namespace: str, tag: str) -> list[str]:
    """As ``tagged_keys``, through an async client."""
    keys: list[str] = []
    after: str | None = None
    while len(keys) < 10_000:
        page = await entries_page(namespace, tag=tag, after=after)
        keys += [entry["key"] for entry in page.get("entries", []) if isinstance(entry.get("key"), str)]
        after = page.get("next")
        if not after:
            break
    return keys
