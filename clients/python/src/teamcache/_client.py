"""``TeamCache`` (sync) and ``AsyncTeamCache``: every route of the API over one reused
httpx connection pool, with timeouts and retries (backoff with jitter, honouring
``Retry-After``) on 503, 429 and lost connections."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from . import _operations as op
from ._cached import AsyncCachedMixin, CachedMixin
from ._positions import Positions
from .errors import TransportError
from .models import Entry, EntryMiss, Lease, Lookup, WriteResult

#: Statuses worth another attempt: the server (or a proxy) is overloaded or rate limiting.
RETRYABLE = frozenset({429, 502, 503, 504})


class _Settings:
    """What both clients share: where, who, how long, how often."""

    def __init__(self, base_url: str | None, token: str | None, timeout: float, max_retries: int,
                 backoff: float, max_backoff: float, read_your_writes: bool = False):
        self.base_url = (base_url or os.environ.get("TEAMCACHE_URL") or "http://127.0.0.1:8080").rstrip("/")
        #: The highest write position seen, sent back on reads (see ``_positions``); None: off.
        self.positions = Positions() if read_your_writes else None
        self.token = token if token is not None else os.environ.get("TEAMCACHE_TOKEN")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": "teamcache-python"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def pause(self, attempt: int, retry_after: str | None) -> float:
        """Seconds before attempt `attempt` + 1: `Retry-After` when given, else exponential
        backoff with jitter; capped."""
        if retry_after and retry_after.strip().isdigit():
            return min(self.max_backoff, float(retry_after.strip()))
        return min(self.max_backoff, self.backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))

    @staticmethod
    def retries(call: op.Call, status: int) -> bool:
        """Whether an answer with ``status`` is worth another attempt. A 429 always (refused
        before anything was done); 502, 503 and 504 only for an idempotent call: a create-only
        or ``If-Match`` write, or a lookup that may be granted a lease, sent again could meet
        its own effect (412 for its own write, "pending" for its own lease)."""
        if status in call.accept or status not in RETRYABLE:
            return False
        return status == 429 or call.idempotent

    @staticmethod
    def may_retry(call: op.Call, error: httpx.TransportError) -> bool:
        """A call that is not idempotent is retried only if it never reached the server."""
        return call.idempotent or isinstance(error, httpx.ConnectError)

    def request_headers(self, call: op.Call) -> dict[str, str]:
        if self.positions is None or not call.reads:
            return call.headers
        return {**call.headers, **self.positions.headers()}

    def outcome(self, call: op.Call, response: httpx.Response) -> Any:
        if self.positions is not None:
            self.positions.note(response.headers)
        if response.status_code in call.accept:
            return call.parse(response.status_code, response.headers, response.content)
        raise op.problem(response.status_code, response.content)


class _Routes:
    """The API, as calls; `_run` sends one (sync or async)."""

    _settings: _Settings

    def _run(self, call: op.Call) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def last_position(self) -> str | None:
        """The highest ``TeamCache-Position`` answered so far (``read_your_writes`` only)."""
        positions = self._settings.positions
        return positions.last if positions is not None else None

    # Raw entries

    def get(self, namespace: str, key: str | bytes, *, max_stale: int | None = None, no_cache: bool = False,
            only_if_cached: bool = False, if_none_match: str | None = None, wait: float | None = None) -> Any:
        """The entry (``Entry``), or None on a miss. ``wait`` with ``if_none_match``: a watch."""
        return self._run(op.get(namespace, key, max_stale=max_stale, no_cache=no_cache,
                                only_if_cached=only_if_cached, if_none_match=if_none_match, wait=wait))

    def get_or_lease(self, namespace: str, key: str | bytes, *, lease: int = 30, wait: float | None = None,
                     max_stale: int | None = None) -> Any:
        """The entry (``Entry``), or on a miss an ``EntryMiss`` carrying this caller's lease (fill
        it with ``put(lease=...)``), or ``pending`` when another caller holds it."""
        return self._run(op.get(namespace, key, lease=lease, wait=wait, max_stale=max_stale))

    def head(self, namespace: str, key: str | bytes) -> Any:
        return self._run(op.get(namespace, key, method="HEAD"))

    def put(self, namespace: str, key: str | bytes, body: bytes | str, *, content_type: str | None = None,
            ttl: int | None = None, tags: Iterable[str] = (), create_only: bool = False,
            if_match: str | None = None, lease: Lease | str | None = None,
            stale_while_revalidate: int | None = None, content_encoding: str | None = None) -> Any:
        """Stores ``body``; returns a ``WriteResult`` once it is committed."""
        return self._run(op.put(namespace, key, body, content_type=content_type, ttl=ttl, tags=tags,
                                create_only=create_only, if_match=if_match, lease=lease,
                                stale_while_revalidate=stale_while_revalidate, content_encoding=content_encoding))

    def delete(self, namespace: str, key: str | bytes) -> Any:
        """True when an entry was deleted, False when there was none."""
        return self._run(op.delete(namespace, key))

    # Descriptors

    def lookup(self, namespace: str, descriptor: Mapping[str, Any], *, max_stale: int | None = None,
               refresh: bool = False, lease: int | None = None, wait: float | None = None) -> Any:
        """A ``Lookup``: a hit with the stored answer, or a miss (with this caller's ``lease``,
        or ``pending``, when a lease was asked for)."""
        return self._run(op.lookup(namespace, descriptor, max_stale=max_stale, refresh=refresh, lease=lease,
                                   wait=wait))

    def upsert(self, namespace: str, descriptor: Mapping[str, Any], response: str, *,
               metadata: Mapping[str, Any] | None = None, ttl: int | None = None, tags: Iterable[str] = (),
               lease: Lease | str | None = None, stale_while_revalidate: int | None = None) -> Any:
        """Stores the model's answer to ``descriptor``; ``metadata`` may carry ``input_tokens`` and
        ``output_tokens`` (what a hit saves)."""
        return self._run(op.upsert(namespace, descriptor, response, metadata=metadata, ttl=ttl, tags=tags,
                                   lease=lease, stale_while_revalidate=stale_while_revalidate))

    def release(self, namespace: str, key: str, lease: Lease | str) -> Any:
        """Gives a lease back (the call to fill it failed); False when it was unknown or done."""
        return self._run(op.release(namespace, key, lease))

    # Evict, stats, settings, operations

    def evict(self, namespace: str, **predicate: Any) -> Any:
        """Evicts what matches every condition given (``tag=``, ``keys=``, ``model=``, ``version=``,
        ``created_before=``, ``accessed_before=``, ``older_than=``, ``idle_for=``, ``all=True``);
        returns how many entries went."""
        return self._run(op.evict(namespace, predicate))

    def clear(self, namespace: str) -> Any:
        """Evicts every entry of the namespace."""
        return self._run(op.evict(namespace, {"all": True}))

    def stats(self, namespace: str, top: int | None = None) -> Any:
        return self._run(op.stats(namespace, top))

    def global_stats(self, top: int | None = None) -> Any:
        return self._run(op.stats(None, top))

    def settings(self, namespace: str) -> Any:
        return self._run(op.settings(namespace))

    def set_settings(self, namespace: str, *, default_ttl: int | None = None, max_bytes: int | None = None) -> Any:
        return self._run(op.set_settings(namespace, default_ttl=default_ttl, max_bytes=max_bytes))

    def export_page(self, namespace: str, *, after: str | None = None, limit: int | None = None,
                    since: str | None = None) -> Any:
        """One page of the namespace's dump lines (admin): ``(lines, next_cursor)``; pass the cursor
        as ``after`` for the next page, until it is None."""
        return self._run(op.export_page(namespace, after=after, limit=limit, since=since))

    def changes(self, namespace: str, *, since: str | int = 0, limit: int | None = None,
                wait: float | None = None, include_body: bool = False) -> Any:
        """One page of the namespace's committed changes after ``since`` (read scope):
        ``{"changes": [...], "next": cursor, "more": bool}``. Apply each change in order (``put``:
        the key's ``etag``, ``size``, ``expires_at``, and ``body_base64`` with ``include_body``;
        ``delete``: drop the key), then ask again from ``next``; ``wait`` holds an empty page
        for the next change. A cursor too old raises ``ProblemError`` (410): resync."""
        return self._run(op.changes(namespace, since=since, limit=limit, wait=wait, include_body=include_body))

    def import_lines(self, namespace: str, lines: Iterable[bytes | str], *, on_conflict: str = "skip") -> Any:
        """Stores dump lines (an export's, or ``{"key": ..., "body": ...}`` of your own) into the
        namespace (admin); the server's counts (``imported``, ``unchanged``, ``rejected``, …).
        Keep a call to a few thousand lines; send more in parts."""
        return self._run(op.import_lines(namespace, lines, on_conflict=on_conflict))

    def health(self) -> Any:
        return self._run(op.operation("/healthz"))

    def ready(self) -> Any:
        """The readiness document; raises ``ProblemError`` (503) when not ready."""
        return self._run(op.operation("/readyz"))

    def metrics(self) -> Any:
        return self._run(op.operation("/metrics", text=True))


class TeamCache(_Routes, CachedMixin):
    """The synchronous client. ``base_url`` and ``token`` default to ``TEAMCACHE_URL`` and
    ``TEAMCACHE_TOKEN``. Thread-safe; reuses connections; close it (or use ``with``).
    ``read_your_writes``: reads see this client's own writes even when the server reads from
    a standby (they name the last write's position; see ``_positions``)."""

    def __init__(self, base_url: str | None = None, token: str | None = None, *, timeout: float = 5.0,
                 max_retries: int = 2, backoff: float = 0.1, max_backoff: float = 5.0,
                 http_client: httpx.Client | None = None, read_your_writes: bool = False):
        self._settings = _Settings(base_url, token, timeout, max_retries, backoff, max_backoff, read_your_writes)
        # Waiting lookups hold a connection each: allow many, so a filler's upsert never
        # queues behind the waiters of its own burst.
        self._http = http_client or httpx.Client(
            base_url=self._settings.base_url, headers=self._settings.headers(), timeout=timeout,
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=64))
        CachedMixin.__init__(self)

    def __enter__(self) -> TeamCache:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, call: op.Call) -> Any:
        settings, attempt = self._settings, 0
        timeout = httpx.Timeout(settings.timeout + call.extra_timeout, connect=settings.timeout)
        while True:
            try:
                response = self._http.request(call.method, call.path, params=call.params or None,
                                              headers=settings.request_headers(call), content=call.content,
                                              timeout=timeout)
            except httpx.TransportError as error:
                if attempt >= settings.max_retries or not settings.may_retry(call, error):
                    raise TransportError(f"TeamCache unreachable at {settings.base_url}: {error!r}") from error
                attempt += 1
                time.sleep(settings.pause(attempt, None))
                continue
            if settings.retries(call, response.status_code) and attempt < settings.max_retries:
                attempt += 1
                time.sleep(settings.pause(attempt, response.headers.get("retry-after")))
                continue
            return settings.outcome(call, response)


class AsyncTeamCache(_Routes, AsyncCachedMixin):
    """The asyncio client: the same methods as ``TeamCache``, as coroutines."""

    def __init__(self, base_url: str | None = None, token: str | None = None, *, timeout: float = 5.0,
                 max_retries: int = 2, backoff: float = 0.1, max_backoff: float = 5.0,
                 http_client: httpx.AsyncClient | None = None, read_your_writes: bool = False):
        self._settings = _Settings(base_url, token, timeout, max_retries, backoff, max_backoff, read_your_writes)
        self._http = http_client or httpx.AsyncClient(
            base_url=self._settings.base_url, headers=self._settings.headers(), timeout=timeout,
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=64))
        AsyncCachedMixin.__init__(self)

    async def __aenter__(self) -> AsyncTeamCache:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, call: op.Call) -> Any:  # type: ignore[override]
        settings, attempt = self._settings, 0
        timeout = httpx.Timeout(settings.timeout + call.extra_timeout, connect=settings.timeout)
        while True:
            try:
                response = await self._http.request(call.method, call.path, params=call.params or None,
                                                    headers=settings.request_headers(call), content=call.content,
                                                    timeout=timeout)
            except httpx.TransportError as error:
                if attempt >= settings.max_retries or not settings.may_retry(call, error):
                    raise TransportError(f"TeamCache unreachable at {settings.base_url}: {error!r}") from error
                attempt += 1
                await asyncio.sleep(settings.pause(attempt, None))
                continue
            if settings.retries(call, response.status_code) and attempt < settings.max_retries:
                attempt += 1
                await asyncio.sleep(settings.pause(attempt, response.headers.get("retry-after")))
                continue
            return settings.outcome(call, response)


__all__ = ["AsyncTeamCache", "Entry", "EntryMiss", "Lease", "Lookup", "TeamCache", "WriteResult"]
