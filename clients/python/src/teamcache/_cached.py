"""``cached``: lookup → call on a miss → upsert, with one call per burst (a lease and a wait),
the lease given back when the call raises, stale answers on error when asked, and a cache
that fails never failing the caller (the call is made; the failure is logged once, counted).

Usable three ways::

    answer = cache.cached("team-a", {"model": "m", "prompt": p}, lambda: call_model(p))

    @cache.cached("team-a", descriptor=lambda p: {"model": "m", "prompt": p})
    def ask(p): ...

and the same with ``AsyncTeamCache`` (the call and the decorated function are coroutines).

A result that is not a ``str`` is stored as JSON and decoded on a hit (``json.dumps`` /
``json.loads`` unless ``encode`` / ``decode`` are given); ``usage`` turns a result into
``{"input_tokens", "output_tokens"}`` so the server counts the tokens a hit saves.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import threading

import httpx
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import TeamCacheError
from .keys import descriptor_key
from .models import Lease, Lookup

logger = logging.getLogger("teamcache")

#: Failures of the cache itself (as opposed to the call): the caller is never failed by these.
#: (A descriptor the server would refuse is the caller's bug, and is raised.)
_CACHE_FAILURES: tuple[type[BaseException], ...] = (TeamCacheError, OSError, httpx.HTTPError, json.JSONDecodeError)


@dataclass
class Options:
    ttl: int | None = None
    tags: tuple[str, ...] = ()
    lease: int | None = 60
    wait: float = 30
    stale_on_error: int | None = None
    stale_while_revalidate: int | None = None
    refresh: bool = False
    encode: Callable[[Any], str] | None = None
    decode: Callable[[str], Any] | None = None
    usage: Callable[[Any], Mapping[str, Any]] | None = None


def _encode(options: Options, result: Any) -> tuple[str, dict[str, Any]]:
    metadata: dict[str, Any] = dict(options.usage(result)) if options.usage else {}
    if options.encode is not None:
        return options.encode(result), metadata
    if isinstance(result, str):
        return result, metadata
    metadata["codec"] = "json"
    return json.dumps(result), metadata


_UNDECODABLE = object()


def _decode(options: Options, lookup: Lookup) -> Any:
    """The stored answer as the caller's value; ``_UNDECODABLE`` when it cannot be read (a
    corrupt or foreign entry), which the caller treats as a miss."""
    text = lookup.response or ""
    try:
        if options.decode is not None:
            return options.decode(text)
        if (lookup.metadata or {}).get("codec") == "json":
            return json.loads(text)
    except Exception as error:  # noqa: BLE001 - an entry this cannot read is a miss
        logger.warning("TeamCache entry %s could not be decoded; calling instead: %r", lookup.key[:12], error)
        return _UNDECODABLE
    return text


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
        if first:
            logger.warning("TeamCache unavailable; calling through without the cache: %s", error)

    def succeeded(self) -> None:
        if self._failing:
            with self._lock:
                self._failing = False
            logger.info("TeamCache reachable again")


def _options(**kwargs: Any) -> Options:
    if "tags" in kwargs and kwargs["tags"] is not None:
        kwargs["tags"] = tuple(kwargs["tags"])
    return Options(**{name: value for name, value in kwargs.items() if value is not None or name == "lease"})


class CachedMixin:
    """``cached`` for the synchronous client."""

    def __init__(self) -> None:
        self._health = _Health()

    @property
    def cache_failures(self) -> int:
        """How many times a ``cached`` call went on without the cache because it failed."""
        return self._health.failures

    def cached(self, namespace: str, descriptor: Mapping[str, Any] | Callable[..., Mapping[str, Any]],
               call: Callable[[], Any] | None = None, *, ttl: int | None = None, tags: Any = None,
               lease: int | None = 60, wait: float = 30, stale_on_error: int | None = None,
               stale_while_revalidate: int | None = None, refresh: bool = False,
               encode: Callable[[Any], str] | None = None, decode: Callable[[str], Any] | None = None,
               usage: Callable[[Any], Mapping[str, Any]] | None = None) -> Any:
        options = _options(ttl=ttl, tags=tags, lease=lease, wait=wait, stale_on_error=stale_on_error,
                           stale_while_revalidate=stale_while_revalidate, refresh=refresh, encode=encode,
                           decode=decode, usage=usage)
        if call is not None:
            if callable(descriptor):
                raise TypeError("with `call`, `descriptor` must be the descriptor itself")
            return self._cached(namespace, descriptor, call, options)
        if not callable(descriptor):
            raise TypeError("as a decorator, `descriptor` must be a function of the call's arguments")
        build = descriptor

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(function)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                return self._cached(namespace, build(*args, **kwargs), lambda: function(*args, **kwargs), options)
            return wrapper
        return decorate

    def _cached(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Any],
                options: Options) -> Any:
        lease: Lease | None = None
        if not options.refresh:
            try:
                found = self.lookup(namespace, descriptor, lease=options.lease,  # type: ignore[attr-defined]
                                    wait=options.wait if options.lease else None)
                self._health.succeeded()
            except _CACHE_FAILURES as error:
                self._health.failed(error)
                found = None
            value = _decode(options, found) if found is not None and found.hit else _UNDECODABLE
            if value is not _UNDECODABLE:
                if found.revalidate is not None:
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
                    stale = self.lookup(namespace, descriptor, max_stale=options.stale_on_error)  # type: ignore[attr-defined]
                except _CACHE_FAILURES:
                    stale = None
                if stale is not None and stale.hit and (value := _decode(options, stale)) is not _UNDECODABLE:
                    return value
            raise

    def _refresh(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Any], options: Options,
                 lease: Lease) -> None:
        try:
            self._fill(namespace, descriptor, call, options, lease)
        except Exception as error:  # noqa: BLE001 - a background refresh has nobody to raise to
            logger.warning("TeamCache background refresh failed: %r", error)

    def _fill(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Any], options: Options,
              lease: Lease | None) -> Any:
        try:
            result = call()
        except BaseException:
            if lease is not None:
                try:
                    self.release(namespace, self._key(descriptor), lease)  # type: ignore[attr-defined]
                except _CACHE_FAILURES as error:
                    self._health.failed(error)
            raise
        try:
            text, metadata = _encode(options, result)
        except Exception as error:  # noqa: BLE001 - the call was paid for: its result is returned
            logger.warning("TeamCache could not store a result (encode or usage failed): %r", error)
            if lease is not None:
                try:
                    self.release(namespace, self._key(descriptor), lease)  # type: ignore[attr-defined]
                except _CACHE_FAILURES as failure:
                    self._health.failed(failure)
            return result
        try:
            self.upsert(namespace, descriptor, text, metadata=metadata or None, ttl=options.ttl,  # type: ignore[attr-defined]
                        tags=options.tags, lease=lease, stale_while_revalidate=options.stale_while_revalidate)
        except _CACHE_FAILURES as error:
            self._health.failed(error)
        return result

    @staticmethod
    def _key(descriptor: Mapping[str, Any]) -> str:
        return descriptor_key(descriptor)


class AsyncCachedMixin:
    """``cached`` for the asyncio client (the call, and a decorated function, are coroutines)."""

    def __init__(self) -> None:
        self._health = _Health()
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def cache_failures(self) -> int:
        return self._health.failures

    def cached(self, namespace: str, descriptor: Mapping[str, Any] | Callable[..., Mapping[str, Any]],
               call: Callable[[], Awaitable[Any]] | None = None, *, ttl: int | None = None, tags: Any = None,
               lease: int | None = 60, wait: float = 30, stale_on_error: int | None = None,
               stale_while_revalidate: int | None = None, refresh: bool = False,
               encode: Callable[[Any], str] | None = None, decode: Callable[[str], Any] | None = None,
               usage: Callable[[Any], Mapping[str, Any]] | None = None) -> Any:
        options = _options(ttl=ttl, tags=tags, lease=lease, wait=wait, stale_on_error=stale_on_error,
                           stale_while_revalidate=stale_while_revalidate, refresh=refresh, encode=encode,
                           decode=decode, usage=usage)
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

            @functools.wraps(function)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                return await self._cached(namespace, build(*args, **kwargs), lambda: function(*args, **kwargs),
                                          options)
            return wrapper
        return decorate

    async def _cached(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Awaitable[Any]],
                      options: Options) -> Any:
        lease: Lease | None = None
        if not options.refresh:
            try:
                found = await self.lookup(namespace, descriptor, lease=options.lease,  # type: ignore[attr-defined]
                                          wait=options.wait if options.lease else None)
                self._health.succeeded()
            except _CACHE_FAILURES as error:
                self._health.failed(error)
                found = None
            value = _decode(options, found) if found is not None and found.hit else _UNDECODABLE
            if value is not _UNDECODABLE:
                if found.revalidate is not None:
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
                    stale = await self.lookup(namespace, descriptor, max_stale=options.stale_on_error)  # type: ignore[attr-defined]
                except _CACHE_FAILURES:
                    stale = None
                if stale is not None and stale.hit and (value := _decode(options, stale)) is not _UNDECODABLE:
                    return value
            raise

    async def _refresh(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Awaitable[Any]],
                       options: Options, lease: Lease) -> None:
        try:
            await self._fill(namespace, descriptor, call, options, lease)
        except Exception as error:  # noqa: BLE001 - a background refresh has nobody to raise to
            logger.warning("TeamCache background refresh failed: %r", error)

    async def _fill(self, namespace: str, descriptor: Mapping[str, Any], call: Callable[[], Awaitable[Any]],
                    options: Options, lease: Lease | None) -> Any:
        try:
            result = await call()
        except BaseException:
            if lease is not None:
                try:
                    await self.release(namespace, CachedMixin._key(descriptor), lease)  # type: ignore[attr-defined]
                except _CACHE_FAILURES as error:
                    self._health.failed(error)
            raise
        try:
            text, metadata = _encode(options, result)
        except Exception as error:  # noqa: BLE001 - the call was paid for: its result is returned
            logger.warning("TeamCache could not store a result (encode or usage failed): %r", error)
            if lease is not None:
                try:
                    await self.release(namespace, CachedMixin._key(descriptor), lease)  # type: ignore[attr-defined]
                except _CACHE_FAILURES as failure:
                    self._health.failed(failure)
            return result
        try:
            await self.upsert(namespace, descriptor, text, metadata=metadata or None,  # type: ignore[attr-defined]
                              ttl=options.ttl, tags=options.tags, lease=lease,
                              stale_while_revalidate=options.stale_while_revalidate)
        except _CACHE_FAILURES as error:
            self._health.failed(error)
        return result
