"""``TeamCache`` (sync) and ``AsyncTeamCache``: every route of the API over one reused
httpx connection pool, with timeouts and retries (backoff with jitter, honouring
``Retry-After``) on 503, 429 and lost connections, a short deadline for lookups, and a
circuit breaker shared by every caller of one client (see ``_breaker``)."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from . import _operations as op
from ._cached import AsyncCachedMixin, CachedMixin
from ._breaker import CacheHealth, CircuitBreaker
from ._positions import Positions
from .errors import CacheSkipped, ConfigurationError, ProblemError, TransportError
from .models import Entry, EntryMiss, Lease, Lookup, WriteResult

#: Statuses worth another attempt: the server (or a proxy) is overloaded or rate limiting.
RETRYABLE = frozenset({429, 502, 503, 504})


class _Settings:
    """What both clients share: where, who, how long, how often."""

    def __init__(self, base_url: str | None, token: str | None, timeout: float, max_retries: int,
                 backoff: float, max_backoff: float, read_your_writes: bool = False, *,
                 lookup_timeout: float = 0.5, breaker: CircuitBreaker | None = None, strict: bool = False):
        self.base_url = (base_url or os.environ.get("TEAMCACHE_URL") or "http://127.0.0.1:8080").rstrip("/")
        #: A lookup that does not wait gets this long in all (a hit takes milliseconds).
        self.lookup_timeout = lookup_timeout
        #: None: no breaker (every call is tried, as a plain API client would).
        self.breaker = breaker
        #: Raise ``ConfigurationError`` for a refused token or scope instead of skipping the cache.
        self.strict = strict
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
        # A quick lookup is on a caller's path: it is never slept on (a 429's Retry-After, or
        # backoff); the caller is better off calling the upstream now.
        if call.quick:
            return False
        return status == 429 or call.idempotent

    @staticmethod
    def may_retry(call: op.Call, error: httpx.TransportError) -> bool:
        """A call that is not idempotent is retried only if it never reached the server; a
        timeout never is (each try would cost its caller the whole deadline again)."""
        if isinstance(error, httpx.TimeoutException):
            return False
        return call.idempotent or isinstance(error, httpx.ConnectError)

    def timeout_for(self, call: op.Call) -> httpx.Timeout:
        if call.quick:
            return httpx.Timeout(self.lookup_timeout)
        if call.reads and call.extra_timeout:
            # A lookup that waits: its wait, and the short deadline for the answer after it.
            return httpx.Timeout(call.extra_timeout + self.lookup_timeout, connect=self.lookup_timeout)
        return httpx.Timeout(self.timeout + call.extra_timeout, connect=self.timeout)

    def admit(self, call: op.Call) -> None:
        """Raises ``CacheSkipped`` while the breaker is open (no request is made)."""
        if self.breaker is not None and not self.breaker.allow():
            health = self.breaker.health
            raise CacheSkipped(f"TeamCache skipped at {self.base_url}: the circuit is open after "
                               f"{health.consecutive_failures} failure(s) ({health.last_error})",
                               reason="misconfigured" if health.misconfiguration else "breaker-open")

    def transport_failed(self, error: httpx.TransportError) -> None:
        if self.breaker is not None:
            kind = "timed out" if isinstance(error, httpx.TimeoutException) else "unreachable"
            # Our own connection pool being full (a burst's waiters) says nothing of TeamCache.
            at_once = isinstance(error, httpx.TimeoutException) and not isinstance(error, httpx.PoolTimeout)
            self.breaker.failed(f"{kind}: {type(error).__name__}", at_once=at_once)

    def abandoned(self) -> None:
        if self.breaker is not None:
            self.breaker.abandon_probe()

    @property
    def breaker_closed(self) -> bool:
        return self.breaker is None or self.breaker.health.state == "closed"

    def judge(self, call: op.Call, response: httpx.Response) -> None:
        """Tells the breaker what an answer says of TeamCache's health and configuration."""
        status = response.status_code
        if status == 429:
            if self.breaker is not None:
                self.breaker.failed("answered 429 (rate limited)")
            return
        if status in call.accept or status < 400:
            if self.breaker is not None:
                self.breaker.succeeded()
            return
        if status in (401, 403):
            problem = op.problem(status, response.content)
            reason = "unauthorized" if status == 401 else "forbidden"
            what = ("the token is missing" if not self.token else "the token is refused (unknown, expired or revoked)") \
                if status == 401 else f"the token lacks a scope: {problem.detail or 'forbidden'}"
            message = f"{what} ({self.base_url}{call.path}: {status})"
            if self.breaker is not None:
                self.breaker.misconfigured(message, stop=status == 401)
            if self.strict:
                raise ConfigurationError(message, reason=reason, status=status)
            return
        if status >= 500 and self.breaker is not None:
            self.breaker.failed(f"answered {status}")
        elif self.breaker is not None:
            self.breaker.succeeded()

    def request_headers(self, call: op.Call) -> dict[str, str]:
        if self.positions is None or not call.reads:
            return call.headers
        return {**call.headers, **self.positions.headers()}

    def outcome(self, call: op.Call, response: httpx.Response) -> Any:
        self.judge(call, response)
        if self.positions is not None:
            self.positions.note(response.headers)
        if response.status_code in call.accept:
            try:
                return call.parse(response.status_code, response.headers, response.content)
            except Exception as error:  # noqa: BLE001 - not TeamCache's answer (a wrong base URL?)
                if self.breaker is not None:
                    self.breaker.failed(f"malformed answer: {type(error).__name__}")
                raise TransportError(f"TeamCache at {self.base_url} gave a malformed answer to {call.path}") from error
        raise op.problem(response.status_code, response.content)


#: What a check step may raise and report (the TeamCache errors, and a strict client's).
TeamCacheErrorTypes = (ProblemError, TransportError, ConfigurationError)


def _breaker(option: bool | CircuitBreaker) -> CircuitBreaker | None:
    if isinstance(option, CircuitBreaker):
        return option
    return CircuitBreaker() if option else None


class _Routes:
    """The API, as calls; `_run` sends one (sync or async)."""

    _settings: _Settings

    @property
    def cache_health(self) -> CacheHealth:
        """The client's cache health: the breaker's state and the failure counts (shared by
        every caller of this client, the transports and ``cached`` included). (``health()``
        is the server's ``/healthz``.)"""
        breaker = self._settings.breaker
        if breaker is None:
            return CacheHealth(state="closed", failures=0, consecutive_failures=0, skipped=0, last_error=None,
                               misconfiguration=None)
        return breaker.health

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


@dataclass(frozen=True)
class CheckResult:
    """What ``check`` found: can this client use TeamCache for ``namespace``?"""

    reachable: bool
    ready: bool
    read: bool
    write: bool
    #: Each thing wrong, as a sentence saying what to fix.
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


_CHECK_DESCRIPTOR = {"model": "teamcache.check", "prompt": "teamcache start-up check"}
_CHECK_LEASE = "tcl_" + "0" * 64


def _check_step(outcome: Any, what: str, problems: list[str]) -> bool:
    """One step of ``check``: True when it worked; otherwise says why in ``problems``."""
    if not isinstance(outcome, BaseException):
        return True
    if isinstance(outcome, ConfigurationError) or (isinstance(outcome, ProblemError) and outcome.status in (401, 403)):
        status = getattr(outcome, "status", 0)
        problems.append(f"{what}: the token is missing or refused" if status == 401
                        else f"{what}: the token lacks the scope ({outcome})")
    elif isinstance(outcome, ProblemError):
        problems.append(f"{what}: TeamCache answered {outcome}")
    else:
        problems.append(f"{what}: TeamCache is unreachable ({outcome})")
    return False


def _check_result(namespace: str, ready: Any, read: Any, write: Any, strict: bool) -> CheckResult:
    problems: list[str] = []
    reachable = not isinstance(ready, TransportError)
    is_ready = _check_step(ready, "readiness", problems)
    can_read = _check_step(read, f"read on {namespace}", problems)
    can_write = _check_step(write, f"write on {namespace}", problems)
    result = CheckResult(reachable=reachable, ready=is_ready, read=can_read, write=can_write,
                         problems=tuple(problems))
    if strict and problems:
        raise ConfigurationError("; ".join(problems), reason="check", status=0)
    return result


class TeamCache(_Routes, CachedMixin):
    """The synchronous client. ``base_url`` and ``token`` default to ``TEAMCACHE_URL`` and
    ``TEAMCACHE_TOKEN``. Thread-safe; reuses connections; close it (or use ``with``).
    ``read_your_writes``: reads see this client's own writes even when the server reads from
    a standby (they name the last write's position; see ``_positions``)."""

    def __init__(self, base_url: str | None = None, token: str | None = None, *, timeout: float = 5.0,
                 max_retries: int = 2, backoff: float = 0.1, max_backoff: float = 5.0,
                 http_client: httpx.Client | None = None, read_your_writes: bool = False,
                 lookup_timeout: float = 0.5, circuit_breaker: bool | CircuitBreaker = True, strict: bool = False):
        self._settings = _Settings(base_url, token, timeout, max_retries, backoff, max_backoff, read_your_writes,
                                   lookup_timeout=lookup_timeout, breaker=_breaker(circuit_breaker), strict=strict)
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

    def check(self, namespace: str) -> CheckResult:
        """A start-up check: TeamCache is reachable and ready, and this client's token may read
        and write ``namespace``. Raises ``ConfigurationError`` with ``strict=True`` when not."""
        def attempt(step: Callable[[], Any]) -> Any:
            try:
                return step()
            except (TeamCacheErrorTypes) as error:
                return error
        ready = attempt(self.ready)
        read = attempt(lambda: self.lookup(namespace, _CHECK_DESCRIPTOR))
        write = attempt(lambda: self.release(namespace, "teamcache-check", _CHECK_LEASE))
        return _check_result(namespace, ready, read, write, self._settings.strict)

    def _run(self, call: op.Call) -> Any:
        settings = self._settings
        settings.admit(call)
        try:
            return self._attempts(call)
        except BaseException:
            settings.abandoned()  # a verdict was given already unless it was cancelled or interrupted
            raise

    def _attempts(self, call: op.Call) -> Any:
        settings, attempt = self._settings, 0
        timeout = settings.timeout_for(call)
        while True:
            try:
                response = self._http.request(call.method, call.path, params=call.params or None,
                                              headers=settings.request_headers(call), content=call.content,
                                              timeout=timeout)
            except httpx.TransportError as error:
                settings.transport_failed(error)
                if attempt >= settings.max_retries or not settings.may_retry(call, error) or not settings.breaker_closed:
                    raise TransportError(f"TeamCache unreachable at {settings.base_url}: {error!r}") from error
                attempt += 1
                time.sleep(settings.pause(attempt, None))
                continue
            if settings.retries(call, response.status_code) and attempt < settings.max_retries:
                settings.judge(call, response)
                if not settings.breaker_closed:
                    raise op.problem(response.status_code, response.content)
                attempt += 1
                time.sleep(settings.pause(attempt, response.headers.get("retry-after")))
                continue
            return settings.outcome(call, response)


class AsyncTeamCache(_Routes, AsyncCachedMixin):
    """The asyncio client: the same methods as ``TeamCache``, as coroutines."""

    def __init__(self, base_url: str | None = None, token: str | None = None, *, timeout: float = 5.0,
                 max_retries: int = 2, backoff: float = 0.1, max_backoff: float = 5.0,
                 http_client: httpx.AsyncClient | None = None, read_your_writes: bool = False,
                 lookup_timeout: float = 0.5, circuit_breaker: bool | CircuitBreaker = True, strict: bool = False):
        self._settings = _Settings(base_url, token, timeout, max_retries, backoff, max_backoff, read_your_writes,
                                   lookup_timeout=lookup_timeout, breaker=_breaker(circuit_breaker), strict=strict)
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

    async def check(self, namespace: str) -> CheckResult:
        """As ``TeamCache.check``."""
        async def attempt(step: Callable[[], Any]) -> Any:
            try:
                return await step()
            except (TeamCacheErrorTypes) as error:
                return error
        ready = await attempt(self.ready)
        read = await attempt(lambda: self.lookup(namespace, _CHECK_DESCRIPTOR))
        write = await attempt(lambda: self.release(namespace, "teamcache-check", _CHECK_LEASE))
        return _check_result(namespace, ready, read, write, self._settings.strict)

    async def _run(self, call: op.Call) -> Any:  # type: ignore[override]
        settings = self._settings
        settings.admit(call)
        try:
            return await self._attempts(call)
        except BaseException:
            settings.abandoned()
            raise

    async def _attempts(self, call: op.Call) -> Any:
        settings, attempt = self._settings, 0
        timeout = settings.timeout_for(call)
        while True:
            try:
                response = await self._http.request(call.method, call.path, params=call.params or None,
                                                    headers=settings.request_headers(call), content=call.content,
                                                    timeout=timeout)
            except httpx.TransportError as error:
                settings.transport_failed(error)
                if attempt >= settings.max_retries or not settings.may_retry(call, error) or not settings.breaker_closed:
                    raise TransportError(f"TeamCache unreachable at {settings.base_url}: {error!r}") from error
                attempt += 1
                await asyncio.sleep(settings.pause(attempt, None))
                continue
            if settings.retries(call, response.status_code) and attempt < settings.max_retries:
                settings.judge(call, response)
                if not settings.breaker_closed:
                    raise op.problem(response.status_code, response.content)
                attempt += 1
                await asyncio.sleep(settings.pause(attempt, response.headers.get("retry-after")))
                continue
            return settings.outcome(call, response)


__all__ = ["AsyncTeamCache", "CheckResult", "Entry", "EntryMiss", "Lease", "Lookup", "TeamCache", "WriteResult"]
