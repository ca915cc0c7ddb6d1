"""``TeamCache`` (sync) and ``AsyncTeamCache``: every route of the API over one reused
httpx connection pool, with timeouts and retries (backoff with jitter, honouring
``Retry-After``) on 503, 429 and lost connections, a short deadline for lookups, and a
circuit breaker shared by every caller of one client (see ``_breaker``)."""

from __future__ import annotations

import asyncio
import inspect
import os
import random
import re
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from . import _operations as op
from ._breaker import CacheHealth, CircuitBreaker, logger
from ._cached import AsyncCachedMixin, CachedMixin
from ._local import LocalTier
from ._local_client import LocalAsyncMixin, LocalSyncMixin
from ._positions import Positions
from .errors import CacheSkipped, ConfigurationError, ProblemError, TransportError

P = ParamSpec("P")
T = TypeVar("T")

#: Statuses worth another attempt: the server (or a proxy) is overloaded or rate limiting.
RETRYABLE = frozenset({429, 502, 503, 504})


def _unsendable(token: str | None) -> str | None:
    """Why ``token`` cannot go in a header (None: it can): a character outside printable
    ASCII. Says where, never what."""
    for index, char in enumerate(token or ""):
        if not "\x21" <= char <= "\x7e":
            return f"the token holds a character a header cannot carry (character {index + 1}): it is not sent"
    return None


#: The user and password of a URL: after its scheme (none: a URL written without one), up to
#: the last ``@`` before the path, query or fragment (so a password holding an ``@`` goes whole).
#: Anchored: an ``@`` in the path or query is not one.
_CREDENTIALS = re.compile(r"^((?:(?:[A-Za-z][A-Za-z0-9+.-]*:)?//)?)([^/?#\\]*)@")


def shown_url(url: str) -> str:
    """``url`` as messages name it (and as it is used): without the user and password before
    its host."""
    return _CREDENTIALS.sub(r"\1", url, count=1)


def _holds_credentials(url: str) -> bool:
    match = _CREDENTIALS.match(url)
    return match is not None and match.group(2) != ""


#: Why a URL's user and password are dropped, said where a refusal is explained.
URL_CREDENTIALS_DROPPED = ("the URL's user and password are not sent: TeamCache takes a bearer token "
                           "(token= or TEAMCACHE_TOKEN)")


class _Settings:
    """What both clients share: where, who, how long, how often."""

    def __init__(self, base_url: str | None, token: str | None, timeout: float, max_retries: int,
                 backoff: float, max_backoff: float, read_your_writes: bool = False, *,
                 lookup_timeout: float = 0.5, breaker: CircuitBreaker | None = None, strict: bool = False):
        url = (base_url or os.environ.get("TEAMCACHE_URL") or "http://127.0.0.1:8080").strip().rstrip("/")
        # A user and password in the URL are never used: httpx would send them as Basic auth in
        # place of the bearer token (every call refused), and log the URL, password and all, on
        # each request. They are dropped, and said so (a warning now, and with any 401).
        self.base_url = shown_url(url)
        #: Why the URL's user and password are not sent (None: it had none).
        self.url_problem = URL_CREDENTIALS_DROPPED if _holds_credentials(url) else None
        if self.url_problem is not None:
            logger.warning("TeamCache at %s: %s", self.base_url, self.url_problem)
        #: A lookup that does not wait gets this long in all (a hit takes milliseconds).
        self.lookup_timeout = lookup_timeout
        #: None: no breaker (every call is tried, as a plain API client would).
        self.breaker = breaker
        #: Raise ``ConfigurationError`` for a refused token or scope instead of skipping the cache.
        self.strict = strict
        #: The highest write position seen, sent back on reads (see ``_positions``); None: off.
        self.positions = Positions() if read_your_writes else None
        # A token read from a file or an environment file often ends in a newline; no token
        # holds whitespace, so it is trimmed rather than sent (and refused) as it came.
        raw = token if token is not None else os.environ.get("TEAMCACHE_TOKEN")
        self.token = raw.strip() if raw is not None else None
        #: Why the token is not sent (None: it is). Sent, a character no header can carry makes
        #: h11 refuse the request and quote the whole header in its error, and in every
        #: traceback that error reaches.
        self.token_problem = _unsendable(self.token)
        #: Where the service is, as messages name it (the URL holds no user or password now).
        self.shown_url = self.base_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff

    def unreachable(self, error: httpx.TransportError) -> TransportError:
        """The error a caller gets when the service could not be reached. Of httpx's errors,
        only a request refused before it was sent quotes the request (its headers: a caller's
        own client with a header no request can carry); it is named by its class alone. This
        client's own token never gets there: one a header cannot carry is not sent
        (`token_problem`)."""
        detail = f"{type(error).__name__} (the request could not be sent as built)" \
            if isinstance(error, httpx.LocalProtocolError) else repr(error)
        return TransportError(f"TeamCache unreachable at {self.shown_url}: {detail}")

    @staticmethod
    def cause(error: httpx.TransportError) -> BaseException | None:
        """What a TransportError keeps as its cause: none for a request refused before it was
        sent, whose message (and every traceback showing it) quotes the request's headers."""
        return None if isinstance(error, httpx.LocalProtocolError) else error

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": "teamcache-python"}
        if self.token and self.token_problem is None:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def pause(self, attempt: int, retry_after: str | None) -> float:
        """Seconds before attempt `attempt` + 1: `Retry-After` when given, else exponential
        backoff with jitter; capped."""
        if retry_after and retry_after.strip().isdigit():
            return min(self.max_backoff, float(retry_after.strip()))
        growth: float = 2.0 ** (attempt - 1)
        return min(self.max_backoff, self.backoff * growth * random.uniform(0.5, 1.5))

    @staticmethod
    def retries(call: op.Call[Any], status: int) -> bool:
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
    def may_retry(call: op.Call[Any], error: httpx.TransportError) -> bool:
        """A call that is not idempotent is retried only if it never reached the server; a
        timeout never is (each try would cost its caller the whole deadline again)."""
        if isinstance(error, httpx.TimeoutException):
            return False
        return call.idempotent or isinstance(error, httpx.ConnectError)

    def timeout_for(self, call: op.Call[Any]) -> httpx.Timeout:
        if call.quick:
            return httpx.Timeout(self.lookup_timeout)
        if call.reads and call.extra_timeout:
            # A lookup that waits: its wait, and the short deadline for the answer after it.
            return httpx.Timeout(call.extra_timeout + self.lookup_timeout, connect=self.lookup_timeout)
        return httpx.Timeout(self.timeout + call.extra_timeout, connect=self.timeout)

    def admit(self, call: op.Call[Any]) -> None:
        """Raises ``CacheSkipped`` while the breaker is open (no request is made)."""
        if self.breaker is not None and not self.breaker.allow():
            health = self.breaker.health
            raise CacheSkipped(f"TeamCache skipped at {self.shown_url}: the circuit is open after "
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

    def judge(self, call: op.Call[Any], response: httpx.Response) -> None:
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
            what = self.refusal("the token is refused (unknown, expired or revoked)") if status == 401 \
                else f"the token lacks a scope: {problem.detail or 'forbidden'}"
            message = f"{what} ({self.shown_url}{call.path}: {status})"
            if self.breaker is not None:
                self.breaker.misconfigured(message, stop=status == 401)
            if self.strict:
                raise ConfigurationError(message, reason=reason, status=status)
            return
        if status >= 500 and self.breaker is not None:
            self.breaker.failed(f"answered {status}")
        elif self.breaker is not None:
            self.breaker.succeeded()

    def refusal(self, refused: str) -> str:
        """Why a 401 came: the token not sent, missing or refused; and the URL's dropped user
        and password, when it had them (a proxy in front that wanted them also answers 401)."""
        what = self.token_problem or ("the token is missing" if not self.token else refused)
        return f"{what}; {self.url_problem}" if self.url_problem else what

    def request_headers(self, call: op.Call[Any]) -> dict[str, str]:
        if self.positions is None or not call.reads:
            return call.headers
        return {**call.headers, **self.positions.headers()}

    def outcome(self, call: op.Call[T], response: httpx.Response) -> T:
        self.judge(call, response)
        if self.positions is not None:
            self.positions.note(response.headers)
        if response.status_code in call.accept:
            try:
                return call.parse(response.status_code, response.headers, response.content)
            except Exception as error:  # noqa: BLE001 - not TeamCache's answer (a wrong base URL?)
                if self.breaker is not None:
                    self.breaker.failed(f"malformed answer: {type(error).__name__}")
                raise TransportError(f"TeamCache at {self.shown_url} gave a malformed answer to {call.path}") from error
        raise op.problem(response.status_code, response.content)


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


def _check_step(outcome: Any, what: str, problems: list[str], refusal: str, settings: _Settings) -> bool:
    """One step of ``check``: True when it worked; otherwise says why in ``problems``."""
    if not isinstance(outcome, BaseException):
        return True
    if isinstance(outcome, CacheSkipped) and outcome.reason == "misconfigured" and settings.breaker is not None:
        # An earlier step's refusal stopped the cache: that is the cause, not reachability.
        problems.append(f"{what}: not asked, the cache is stopped: {settings.breaker.health.misconfiguration}")
    elif isinstance(outcome, ConfigurationError) or \
            (isinstance(outcome, ProblemError) and outcome.status in (401, 403)):
        status = getattr(outcome, "status", 0)
        problems.append(f"{what}: {refusal}" if status == 401 else f"{what}: the token lacks the scope ({outcome})")
    elif isinstance(outcome, ProblemError):
        problems.append(f"{what}: TeamCache answered {outcome}")
    else:
        problems.append(f"{what}: TeamCache is unreachable ({outcome})")
    return False


def _check_result(namespace: str, ready: Any, read: Any, write: Any, settings: _Settings) -> CheckResult:
    problems: list[str] = []
    reachable = not isinstance(ready, TransportError)
    refusal = settings.refusal("the token is refused (unknown, expired or revoked)")
    is_ready = _check_step(ready, "readiness", problems, refusal, settings)
    can_read = _check_step(read, f"read on {namespace}", problems, refusal, settings)
    can_write = _check_step(write, f"write on {namespace}", problems, refusal, settings)
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
        self._http = http_client or httpx.Client(
            base_url=self._settings.base_url, headers=self._settings.headers(), timeout=timeout,
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=64))
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
        while True:
            try:
                response = self._http.request(call.method, call.path, params=call.params or None,
                                              headers=settings.request_headers(call), content=call.content,
                                              timeout=timeout)
            except httpx.TransportError as error:
                settings.transport_failed(error)
                if attempt >= settings.max_retries or not settings.may_retry(call, error) \
                        or not settings.breaker_closed:
                    raise settings.unreachable(error) from settings.cause(error)
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
        self._http = http_client or httpx.AsyncClient(
            base_url=self._settings.base_url, headers=self._settings.headers(), timeout=timeout,
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=64))
        AsyncCachedMixin.__init__(self)

    # The API: each route's signature and answer type are its builder's in ``_operations``.
    _remote_get = _async_route(op.get)
    get_or_lease = _async_route(op.get_or_lease)
    head = _async_route(op.head)
    _remote_put = _async_route(op.put)
    _remote_delete = _async_route(op.delete)
    _remote_lookup = _async_route(op.lookup)
    _remote_upsert = _async_route(op.upsert)
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
        while True:
            try:
                response = await self._http.request(call.method, call.path, params=call.params or None,
                                                    headers=settings.request_headers(call), content=call.content,
                                                    timeout=timeout)
            except httpx.TransportError as error:
                settings.transport_failed(error)
                if attempt >= settings.max_retries or not settings.may_retry(call, error) \
                        or not settings.breaker_closed:
                    raise settings.unreachable(error) from settings.cause(error)
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


__all__ = ["AsyncTeamCache", "CheckResult", "TeamCache"]
