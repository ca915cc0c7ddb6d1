"""``cached``: lookup → call on a miss → upsert, with one call per burst (a lease and a wait),
the lease given back when the call raises, stale answers on error when asked, and a cache
that fails never failing the caller (the call is made; the failure is logged once, counted).

Usable three ways::

    answer = cache.cached("team-a", {"model": "m", "prompt": p}, lambda: call_model(p))

    @cache.cached("team-a", descriptor=lambda p: {"model": "m", "prompt": p})
    def ask(p): ...

and the same with ``AsyncTeamCache`` (the call and the decorated function are coroutines).

A result that is not a ``str`` is stored as JSON and decoded on a hit (``json.dumps`` /
``json.loads`` unless ``encode`` / ``decode`` are given). A pydantic model (an OpenAI
``ChatCompletion``, say) is stored as its ``model_dump(mode="json")`` and a dataclass as its
fields, and decoded back into the declared return type (the decorated function's return
annotation, or ``result_type=``): the type is never read from the shared cache. ``usage``
turns a result into ``{"input_tokens", "output_tokens"}`` so the server counts the tokens a
hit saves. A cache that is down, frozen or refuses the token costs a call at most the
client's short lookup deadline, once: the client's circuit breaker then skips it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import logging
import threading
import typing
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypedDict, TypeVar, overload

import httpx

from . import _operations as op
from ._cached_values import _UNDECODABLE, Options, _decode, _encode, _unstorable
from ._settings import in_background, on_callers_path
from .errors import ConfigurationError, ProblemError, TeamCacheError
from .keys import descriptor_key
from .models import Lease, Lookup, WriteResult

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger("teamcache")

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class CachedDecorator(Protocol):
    """What ``cached(namespace, descriptor=function)`` returns: a decorator that keeps the
    decorated function's parameters and return type."""

    def __call__(self, function: Callable[P, R], /) -> Callable[P, R]: ...


class AsyncCachedDecorator(Protocol):
    """As ``CachedDecorator``, for coroutine functions."""

    def __call__(self, function: Callable[P, Awaitable[R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...


class CacheOptions(TypedDict, total=False):
    """``cached``'s options (each as described there), for type checkers."""

    ttl: int | None
    tags: Iterable[str] | None
    lease: int | None
    wait: float
    stale_on_error: int | None
    stale_while_revalidate: int | None
    refresh: bool
    encode: Callable[[Any], str] | None
    decode: Callable[[str], Any] | None
    usage: Callable[[Any], Mapping[str, Any]] | None
    result_type: Any

#: Failures of the cache itself (as opposed to the call): the caller is never failed by these.
#: (A descriptor the server would refuse is the caller's bug, and is raised.)
_CACHE_FAILURES: tuple[type[BaseException], ...] = (TeamCacheError, OSError, httpx.HTTPError, json.JSONDecodeError)


def refused_write(error: BaseException) -> bool:
    """Whether the service refused what a write carried (400, 413, 422) or had no room for it
    (507): nothing was stored, and the lease it held is given back at once, so the callers waiting
    on it are not held until it expires."""
    return isinstance(error, ProblemError) and error.status in (400, 413, 422, 507)


def _fails_open(error: BaseException) -> None:
    """Cache failures are misses, except a strict client's misconfiguration: raised."""
    if isinstance(error, ConfigurationError):
        raise error


class _Health:
    """Counts cache failures and logs the first of a run of them (not every request)."""

    def __init__(self) -> None:
        self.failures = 0
        self._failing = False
        self._lock = threading.Lock()

    def failed(self, error: BaseException) -> None:
        with self._lock:
            self.failures += 1
            first, self._failing = not self._failing, True
        # The client's circuit breaker says what is wrong, once; this only counts.
        logger.debug("TeamCache failed; calling through without the cache: %r (first of a run: %s)", error, first)

    def succeeded(self) -> None:
        if self._failing:
            with self._lock:
                self._failing = False
            logger.debug("TeamCache reachable again")


def _return_type(function: Callable[..., Any]) -> Any:
    """A function's declared return type (for decoding pydantic and dataclass results)."""
    try:
        kind = typing.get_type_hints(function).get("return")
    except Exception:  # noqa: BLE001 - an unresolvable annotation only means: not known
        return None
    return kind if isinstance(kind, type) else None


def _options(**kwargs: Any) -> Options:
    if "tags" in kwargs and kwargs["tags"] is not None:
        kwargs["tags"] = tuple(kwargs["tags"])
    if kwargs.get("wait") is not None:
        kwargs["wait"] = min(60.0, max(0.0, float(kwargs["wait"])))  # the server's range
    return Options(**{name: value for name, value in kwargs.items() if value is not None or name == "lease"})


class CachedMixin:
    """``cached`` for the synchronous client."""

    def __init__(self) -> None:
        self._health = _Health()

    if TYPE_CHECKING:
        def _run(self, call: op.Call[T]) -> T: ...

        # The client's own calls (``LocalSyncMixin``): through its local tier when it has one.
        def lookup(self, namespace: str, descriptor: Mapping[str, Any], *, max_stale: int | None = None,
                   refresh: bool = False, lease: int | None = None, wait: float | None = None,
                   if_none_match: str | None = None) -> Lookup: ...

        def upsert(self, namespace: str, descriptor: Mapping[str, Any], response: str, *,
                   metadata: Mapping[str, Any] | None = None, ttl: int | None = None, tags: Iterable[str] = (),
                   lease: Lease | str | None = None, stale_while_revalidate: int | None = None) -> WriteResult: ...

    @property
    def cache_failures(self) -> int:
        """How many times a ``cached`` call went on without the cache because it failed."""
        return self._health.failures

    @overload
    def cached(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], R],
               **options: Unpack[CacheOptions]) -> R: ...

    @overload
    def cached(self, namespace: str, descriptor: Callable[..., Mapping[str, Any]], call: None = None,
               **options: Unpack[CacheOptions]) -> CachedDecorator: ...

    def cached(self, namespace: str, descriptor: Mapping[str, Any] | Callable[..., Mapping[str, Any]],
               call: Callable[[], Any] | None = None, *, ttl: int | None = None, tags: Any = None,
               lease: int | None = 60, wait: float = 30, stale_on_error: int | None = None,
               stale_while_revalidate: int | None = None, refresh: bool = False,
               encode: Callable[[Any], str] | None = None, decode: Callable[[str], Any] | None = None,
               usage: Callable[[Any], Mapping[str, Any]] | None = None, result_type: Any = None) -> Any:
        options = _options(ttl=ttl, tags=tags, lease=lease, wait=wait, stale_on_error=stale_on_error,
                           stale_while_revalidate=stale_while_revalidate, refresh=refresh, encode=encode,
                           decode=decode, usage=usage, result_type=result_type)
        if call is not None:
            if callable(descriptor):
                raise TypeError("with `call`, `descriptor` must be the descriptor itself")
            return self._cached(namespace, descriptor, call, options)
        if not callable(descriptor):
            raise TypeError("as a decorator, `descriptor` must be a function of the call's arguments")
        build = descriptor

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            typed = options if options.result_type else dataclasses.replace(options, result_type=_return_type(function))

            @functools.wraps(function)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                return self._cached(namespace, build(*args, **kwargs), lambda: function(*args, **kwargs), typed)
            return wrapper
        return decorate

    def _cached(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Any],
                options: Options) -> Any:
        lease: Lease | None = None
        if not options.refresh:
            try:
                # Without a wait first, under the client's short lookup deadline: a frozen cache
                # costs that, not the wait. Only a caller told "pending" waits for the fill.
                found = self.lookup(namespace, descriptor, lease=options.lease)
                if found.pending and options.lease and options.wait:
                    found = self.lookup(namespace, descriptor, lease=options.lease, wait=options.wait)
                self._health.succeeded()
            except _CACHE_FAILURES as error:
                _fails_open(error)
                self._health.failed(error)
                found = None
            value = _decode(options, found) if found is not None and found.hit else _UNDECODABLE
            if value is not _UNDECODABLE:
                if found is not None and found.revalidate is not None:
                    refresh = found.revalidate
                    threading.Thread(target=self._refresh, args=(namespace, descriptor, call, options, refresh),
                                     daemon=True, name="teamcache-refresh").start()
                return value
            if found is not None:
                lease = found.lease or found.revalidate
        try:
            return self._fill(namespace, descriptor, call, options, lease)
        except Exception:
            if options.stale_on_error is not None:
                try:
                    stale = self.lookup(namespace, descriptor, max_stale=options.stale_on_error)
                except _CACHE_FAILURES:
                    stale = None
                if stale is not None and stale.hit and (value := _decode(options, stale)) is not _UNDECODABLE:
                    return value
            raise

    def _refresh(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Any], options: Options,
                 lease: Lease) -> None:
        try:
            with in_background():
                self._fill(namespace, descriptor, call, options, lease)
        except Exception as error:  # noqa: BLE001 - a background refresh has nobody to raise to
            logger.warning("TeamCache background refresh failed: %r", error)

    def _fill(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Any], options: Options,
              lease: Lease | None) -> Any:
        try:
            result = call()
        except BaseException:
            with on_callers_path():
                self._let_go(namespace, descriptor, lease)
            raise
        with on_callers_path():
            return self._store(namespace, descriptor, options, lease, result)

    def _store(self, namespace: str, descriptor: Mapping[str, Any], options: Options, lease: Lease | None,
               result: Any) -> Any:
        # The call was paid for: its result is returned whatever storing it meets. A result the
        # write cannot carry (a lone surrogate, usage numbers JSON has no form for) is the
        # cache's loss, warned once, and its lease let go.
        try:
            text, metadata = _encode(options, result)
            self.upsert(namespace, descriptor, text, metadata=metadata or None, ttl=options.ttl,
                        tags=options.tags, lease=lease, stale_while_revalidate=options.stale_while_revalidate)
        except _CACHE_FAILURES as error:
            self._health.failed(error)
            if refused_write(error):
                self._let_go(namespace, descriptor, lease)
        except Exception as error:  # noqa: BLE001
            _unstorable(error)
            self._let_go(namespace, descriptor, lease)
        return result

    def _let_go(self, namespace: str, descriptor: Mapping[str, Any], lease: Lease | None) -> None:
        """Gives back a lease whose fill will not come, so its waiters are not held until it expires."""
        if lease is None:
            return
        try:
            self._run(op.release(namespace, self._key(descriptor), lease))
        except _CACHE_FAILURES as failure:
            self._health.failed(failure)

    @staticmethod
    def _key(descriptor: Mapping[str, Any]) -> str:
        return descriptor_key(descriptor)


class AsyncCachedMixin:
    """``cached`` for the asyncio client (the call, and a decorated function, are coroutines)."""

    def __init__(self) -> None:
        self._health = _Health()
        self._background: set[asyncio.Task[Any]] = set()

    if TYPE_CHECKING:
        async def _run(self, call: op.Call[T]) -> T: ...

        async def lookup(self, namespace: str, descriptor: Mapping[str, Any], *, max_stale: int | None = None,
                         refresh: bool = False, lease: int | None = None, wait: float | None = None,
                         if_none_match: str | None = None) -> Lookup: ...

        async def upsert(self, namespace: str, descriptor: Mapping[str, Any], response: str, *,
                         metadata: Mapping[str, Any] | None = None, ttl: int | None = None,
                         tags: Iterable[str] = (), lease: Lease | str | None = None,
                         stale_while_revalidate: int | None = None) -> WriteResult: ...

    @property
    def cache_failures(self) -> int:
        return self._health.failures

    @overload
    def cached(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Awaitable[R]],
               **options: Unpack[CacheOptions]) -> Coroutine[Any, Any, R]: ...

    @overload
    def cached(self, namespace: str, descriptor: Callable[..., Mapping[str, Any]], call: None = None,
               **options: Unpack[CacheOptions]) -> AsyncCachedDecorator: ...

    def cached(self, namespace: str, descriptor: Mapping[str, Any] | Callable[..., Mapping[str, Any]],
               call: Callable[[], Awaitable[Any]] | None = None, *, ttl: int | None = None, tags: Any = None,
               lease: int | None = 60, wait: float = 30, stale_on_error: int | None = None,
               stale_while_revalidate: int | None = None, refresh: bool = False,
               encode: Callable[[Any], str] | None = None, decode: Callable[[str], Any] | None = None,
               usage: Callable[[Any], Mapping[str, Any]] | None = None, result_type: Any = None) -> Any:
        options = _options(ttl=ttl, tags=tags, lease=lease, wait=wait, stale_on_error=stale_on_error,
                           stale_while_revalidate=stale_while_revalidate, refresh=refresh, encode=encode,
                           decode=decode, usage=usage, result_type=result_type)
        if call is not None:
            if callable(descriptor):
                raise TypeError("with `call`, `descriptor` must be the descriptor itself")
            return self._cached(namespace, descriptor, call, options)
        if not callable(descriptor):
            raise TypeError("as a decorator, `descriptor` must be a function of the call's arguments")
        build = descriptor

        def decorate(function: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            if not inspect.iscoroutinefunction(function):
                raise TypeError("AsyncTeamCache.cached decorates coroutine functions")
            typed = options if options.result_type else dataclasses.replace(options, result_type=_return_type(function))

            @functools.wraps(function)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                return await self._cached(namespace, build(*args, **kwargs), lambda: function(*args, **kwargs),
                                          typed)
            return wrapper
        return decorate

    async def _cached(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Awaitable[Any]],
                      options: Options) -> Any:
        lease: Lease | None = None
        if not options.refresh:
            try:
                found = await self.lookup(namespace, descriptor, lease=options.lease)
                if found.pending and options.lease and options.wait:
                    found = await self.lookup(namespace, descriptor, lease=options.lease, wait=options.wait)
                self._health.succeeded()
            except _CACHE_FAILURES as error:
                _fails_open(error)
                self._health.failed(error)
                found = None
            value = _decode(options, found) if found is not None and found.hit else _UNDECODABLE
            if value is not _UNDECODABLE:
                if found is not None and found.revalidate is not None:
                    task = asyncio.get_running_loop().create_task(
                        self._refresh(namespace, descriptor, call, options, found.revalidate))
                    self._background.add(task)
                    task.add_done_callback(self._background.discard)
                return value
            if found is not None:
                lease = found.lease or found.revalidate
        try:
            return await self._fill(namespace, descriptor, call, options, lease)
        except Exception:
            if options.stale_on_error is not None:
                try:
                    stale = await self.lookup(namespace, descriptor, max_stale=options.stale_on_error)
                except _CACHE_FAILURES:
                    stale = None
                if stale is not None and stale.hit and (value := _decode(options, stale)) is not _UNDECODABLE:
                    return value
            raise

    async def _refresh(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Awaitable[Any]],
                       options: Options, lease: Lease) -> None:
        try:
            with in_background():
                await self._fill(namespace, descriptor, call, options, lease)
        except Exception as error:  # noqa: BLE001 - a background refresh has nobody to raise to
            logger.warning("TeamCache background refresh failed: %r", error)

    async def _fill(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Awaitable[Any]],
                    options: Options, lease: Lease | None) -> Any:
        try:
            result = await call()
        except BaseException:
            with on_callers_path():
                await self._let_go(namespace, descriptor, lease)
            raise
        with on_callers_path():
            return await self._store(namespace, descriptor, options, lease, result)

    async def _store(self, namespace: str, descriptor: Mapping[str, Any], options: Options, lease: Lease | None,
                     result: Any) -> Any:
        # As the sync fill: the result is returned whatever storing it meets.
        try:
            text, metadata = _encode(options, result)
            await self.upsert(namespace, descriptor, text, metadata=metadata or None,
                              ttl=options.ttl, tags=options.tags, lease=lease,
                              stale_while_revalidate=options.stale_while_revalidate)
        except _CACHE_FAILURES as error:
            self._health.failed(error)
            if refused_write(error):
                await self._let_go(namespace, descriptor, lease)
        except Exception as error:  # noqa: BLE001
            _unstorable(error)
            await self._let_go(namespace, descriptor, lease)
        return result

    async def _let_go(self, namespace: str, descriptor: Mapping[str, Any], lease: Lease | None) -> None:
        """As ``CachedMixin._let_go``."""
        if lease is None:
            return
        try:
            await self._run(op.release(namespace, CachedMixin._key(descriptor), lease))
        except _CACHE_FAILURES as failure:
            self._health.failed(failure)
