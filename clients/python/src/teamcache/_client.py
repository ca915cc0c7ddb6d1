"""``TeamCache`` (sync) and ``AsyncTeamCache``: every route of the API over one reused
httpx connection pool, with timeouts and retries (backoff with jitter, honouring
``Retry-After``) on 503, 429 and lost connections, a short deadline for lookups, and a
circuit breaker shared by every caller of one client (see ``_breaker``). What both clients
share (where, who, how long, how an answer is judged) is ``_settings``."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from . import _operations as op
from ._breaker import CacheHealth, CircuitBreaker
from ._cached import AsyncCachedMixin, CachedMixin
from ._local import LocalTier
from ._local_client import LocalAsyncMixin, LocalSyncMixin
from ._resolve import bound_lookups
from ._settings import _Settings
from .errors import CacheSkipped, ConfigurationError, ProblemError, TransportError

P = ParamSpec("P")
T = TypeVar("T")

#: What a check step may raise and report (the TeamCache errors, and a strict client's).
TeamCacheErrorTypes = (ProblemError, TransportError, ConfigurationError)


def _breaker(option: bool | CircuitBreaker) -> CircuitBreaker | None:
    if isinstance(option, CircuitBreaker):
        return option
    return CircuitBreaker() if option else None


class _Common:
    """What both clients answer the same way (the routes are bound in each, typed by
    ``_sync_route`` and ``_async_route``)."""

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

    @property
    def last_position(self) -> str | None:
        """The highest ``TeamCache-Position`` answered so far (``read_your_writes`` only)."""
        positions = self._settings.positions
        return positions.last if positions is not None else None


def _signature_with_self(build: Callable[..., Any]) -> inspect.Signature:
    """The route's signature as a method's (``help()`` and IDEs show the real parameters)."""
    signature = inspect.signature(build)
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    return signature.replace(parameters=[this, *signature.parameters.values()],
                             return_annotation=inspect.Signature.empty)


def _named_like(send: Callable[..., Any], build: Callable[..., Any]) -> None:
    send.__name__ = send.__qualname__ = build.__name__
    send.__doc__ = build.__doc__
    send.__signature__ = _signature_with_self(build)  # type: ignore[attr-defined]


def _sync_route(build: Callable[P, op.Call[T]]) -> Callable[Concatenate[TeamCache, P], T]:
    """A route of ``_operations`` as a ``TeamCache`` method: builds the call, sends it, returns
    what it parses into (the route's own return type, for type checkers too)."""
    def send(self: TeamCache, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(build(*args, **kwargs))
    _named_like(send, build)
    return send


def _async_route(build: Callable[P, op.Call[T]]) -> Callable[Concatenate[AsyncTeamCache, P], Coroutine[Any, Any, T]]:
    """As ``_sync_route``, for ``AsyncTeamCache`` (the method is a coroutine)."""
    async def send(self: AsyncTeamCache, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(build(*args, **kwargs))
    _named_like(send, build)
    return send


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


def _check_step(outcome: Any, what: str, problems: list[str], settings: _Settings) -> bool:
    """One step of ``check``: True when it worked; otherwise says why in ``problems``."""
    if not isinstance(outcome, BaseException):
        return True
    if isinstance(outcome, CacheSkipped) and outcome.reason == "misconfigured" and settings.breaker is not None:
        # An earlier step's refusal stopped the cache: that is the cause, not reachability.
        problems.append(f"{what}: not asked, the cache is stopped: {settings.breaker.health.misconfiguration}")
    elif isinstance(outcome, ConfigurationError) or \
            (isinstance(outcome, ProblemError) and outcome.status in (401, 403)):
        status = getattr(outcome, "status", 0)
        problems.append(f"{what}: {settings.refusal()}" if status == 401
                        else f"{what}: the token lacks the scope ({outcome})")
    elif isinstance(outcome, ProblemError):
        problems.append(f"{what}: TeamCache answered {outcome}")
    else:
        problems.append(f"{what}: TeamCache is unreachable ({outcome})")
    return False


def _check_result(namespace: str, ready: Any, read: Any, write: Any, settings: _Settings) -> CheckResult:
    problems: list[str] = []
    reachable = not isinstance(ready, TransportError)
    is_ready = _check_step(ready, "readiness", problems, settings)
    can_read = _check_step(read, f"read on {namespace}", problems, settings)
    can_write = _check_step(write, f"write on {namespace}", problems, settings)
    strict = settings.strict
    result = CheckResult(reachable=reachable, ready=is_ready, read=can_read, write=can_write,
                         problems=tuple(problems))
    if strict and problems:
        raise ConfigurationError("; ".join(problems), reason="check", status=0)
    return result


class TeamCache(_Common, LocalSyncMixin, CachedMixin):
    """The synchronous client. ``base_url`` and ``token`` default to ``TEAMCACHE_URL`` and
    ``TEAMCACHE_TOKEN``. Thread-safe; reuses connections; close it (or use ``with``).
    ``read_your_writes``: reads see this client's own writes even when the server reads from
    a standby (they name the last write's position; see ``_positions``). ``local_tier``: a
    ``LocalTier`` that answers fresh copies without a network call (see ``_local``)."""

    def __init__(self, base_url: str | None = None, token: str | None = None, *, timeout: float = 5.0,
                 max_retries: int = 2, backoff: float = 0.1, max_backoff: float = 5.0,
                 http_client: httpx.Client | None = None, read_your_writes: bool = False,
                 lookup_timeout: float = 0.5, circuit_breaker: bool | CircuitBreaker = True, strict: bool = False,
                 local_tier: LocalTier | None = None):
        self._settings = _Settings(base_url, token, timeout, max_retries, backoff, max_backoff, read_your_writes,
                                   lookup_timeout=lookup_timeout, breaker=_breaker(circuit_breaker), strict=strict)
        self._tier = local_tier
        if local_tier is not None:
            local_tier._attach(self._settings, timeout, lent=http_client)
        # Waiting lookups hold a connection each: allow many, so a filler's upsert never
        # queues behind the waiters of its own burst.
        # The service's name is looked up under the connect timeout (``_resolve``): httpx's own
        # lookup has no time limit, and a resolver that hangs would hold every call.
        self._http = http_client or bound_lookups(httpx.Client(
            base_url=self._settings.base_url, headers=self._settings.headers(), timeout=timeout,
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=64)))
        CachedMixin.__init__(self)

    # The API: each route's signature and answer type are its builder's in ``_operations``.
    _remote_get = _sync_route(op.get)
    get_or_lease = _sync_route(op.get_or_lease)
    head = _sync_route(op.head)
    _remote_put = _sync_route(op.put)
    _remote_delete = _sync_route(op.delete)
    _remote_lookup = _sync_route(op.lookup)
    _remote_upsert = _sync_route(op.upsert)
    release = _sync_route(op.release)
    evict = _sync_route(op.evict)
    clear = _sync_route(op.clear)
    stats = _sync_route(op.stats)
    global_stats = _sync_route(op.global_stats)
    settings = _sync_route(op.settings)
    set_settings = _sync_route(op.set_settings)
    export_page = _sync_route(op.export_page)
    changes = _sync_route(op.changes)
    import_lines = _sync_route(op.import_lines)
    health = _sync_route(op.health)
    ready = _sync_route(op.ready)
    metrics = _sync_route(op.metrics)
    report_hits = _sync_route(op.report_hits)
    entries_page = _sync_route(op.entries_page)
    inspect_entry = _sync_route(op.inspect_entry)

    def __enter__(self) -> TeamCache:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._tier is not None:
            self._tier.close()
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
        return _check_result(namespace, ready, read, write, self._settings)

    def _run(self, call: op.Call[T]) -> T:
        settings = self._settings
        settings.admit(call)
        try:
            return self._attempts(call)
        except BaseException:
            settings.abandoned()  # a verdict was given already unless it was cancelled or interrupted
            raise

    def _attempts(self, call: op.Call[T]) -> T:
        settings, attempt = self._settings, 0
        timeout = settings.timeout_for(call)
        # A try that may have reached the service (not a connect error): what a later try that
        # never left says must not hide it (a write would be queued and sent twice).
        maybe_sent: httpx.TransportError | None = None
        while True:
            try:
                response = self._http.request(call.method, call.path, params=call.params or None,
                                              headers=settings.request_headers(call), content=call.content,
                                              timeout=timeout)
            except RuntimeError as error:
                # Closed meanwhile (a background refresh outliving its client): the cache's
                # failure, which fails open, not a RuntimeError out of a thread.
                if not self._http.is_closed:
                    raise
                raise TransportError("the TeamCache client is closed") from error
            except httpx.TransportError as error:
                settings.transport_failed(error)
                if not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout)):
                    maybe_sent = error
                if attempt >= settings.max_retries or not settings.may_retry(call, error) \
                        or not settings.breaker_closed:
                    failed = maybe_sent or error
                    raise settings.unreachable(failed) from settings.cause(failed)
                attempt += 1
                # A lookup on a caller's path is never slept on (as for a status): it tries again
                # at once, or the caller calls the upstream.
                if not call.quick:
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


class AsyncTeamCache(_Common, LocalAsyncMixin, AsyncCachedMixin):
    """The asyncio client: the same methods as ``TeamCache``, as coroutines."""

    def __init__(self, base_url: str | None = None, token: str | None = None, *, timeout: float = 5.0,
                 max_retries: int = 2, backoff: float = 0.1, max_backoff: float = 5.0,
                 http_client: httpx.AsyncClient | None = None, read_your_writes: bool = False,
                 lookup_timeout: float = 0.5, circuit_breaker: bool | CircuitBreaker = True, strict: bool = False,
                 local_tier: LocalTier | None = None):
        self._settings = _Settings(base_url, token, timeout, max_retries, backoff, max_backoff, read_your_writes,
                                   lookup_timeout=lookup_timeout, breaker=_breaker(circuit_breaker), strict=strict)
        self._tier = local_tier
        if local_tier is not None:
            local_tier._attach(self._settings, timeout, unlent=http_client is not None)
        # Looked up under the connect timeout without holding a thread of the loop's executor.
        self._http = http_client or bound_lookups(httpx.AsyncClient(
            base_url=self._settings.base_url, headers=self._settings.headers(), timeout=timeout,
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=64)))
        AsyncCachedMixin.__init__(self)

    # The API: each route's signature and answer type are its builder's in ``_operations``.
    _remote_get = _async_route(op.get)
    get_or_lease = _async_route(op.get_or_lease)
    head = _async_route(op.head)
    _remote_put = _async_route(op.put)
    _remote_delete = _async_route(op.delete)
    _remote_lookup = _async_route(op.lookup)
    _remote_upsert = _async_route(op.upsert)
    _remote_stats = _async_route(op.stats)
    _remote_entries_page = _async_route(op.entries_page)
    _remote_inspect_entry = _async_route(op.inspect_entry)
    release = _async_route(op.release)
    evict = _async_route(op.evict)
    clear = _async_route(op.clear)
    stats = _async_route(op.stats)
    global_stats = _async_route(op.global_stats)
    settings = _async_route(op.settings)
    set_settings = _async_route(op.set_settings)
    export_page = _async_route(op.export_page)
    changes = _async_route(op.changes)
    import_lines = _async_route(op.import_lines)
    health = _async_route(op.health)
    ready = _async_route(op.ready)
    metrics = _async_route(op.metrics)
    report_hits = _async_route(op.report_hits)
    entries_page = _async_route(op.entries_page)
    inspect_entry = _async_route(op.inspect_entry)

    async def __aenter__(self) -> AsyncTeamCache:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._tier is not None:
            # On a thread: closing reports the last hits over the network (never on the loop).
            await asyncio.to_thread(self._tier.close)
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
        return _check_result(namespace, ready, read, write, self._settings)

    async def _run(self, call: op.Call[T]) -> T:
        settings = self._settings
        settings.admit(call)
        try:
            return await self._attempts(call)
        except BaseException:
            settings.abandoned()
            raise

    async def _attempts(self, call: op.Call[T]) -> T:
        settings, attempt = self._settings, 0
        timeout = settings.timeout_for(call)
        maybe_sent: httpx.TransportError | None = None  # as in TeamCache._attempts
        while True:
            try:
                response = await self._http.request(call.method, call.path, params=call.params or None,
                                                    headers=settings.request_headers(call), content=call.content,
                                                    timeout=timeout)
            except RuntimeError as error:
                if not self._http.is_closed:
                    raise
                raise TransportError("the TeamCache client is closed") from error
            except httpx.TransportError as error:
                settings.transport_failed(error)
                if not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout)):
                    maybe_sent = error
                if attempt >= settings.max_retries or not settings.may_retry(call, error) \
                        or not settings.breaker_closed:
                    failed = maybe_sent or error
                    raise settings.unreachable(failed) from settings.cause(failed)
                attempt += 1
                if not call.quick:
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


__all__ = ["AsyncTeamCache", "CheckResult", "TeamCache"]
