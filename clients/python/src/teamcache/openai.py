"""Caching for the official ``openai`` SDK, as an HTTP transport::

    from openai import OpenAI
    from teamcache.openai import http_client
    client = OpenAI(http_client=http_client(namespace="team-a"))

``POST /v1/chat/completions``, ``/v1/responses`` and ``/v1/embeddings`` go through
TeamCache's descriptor API; everything else goes straight to the upstream. openai 3.x takes
an ``httpx2`` client and openai 1.x/2.x an ``httpx`` one: ``http_client`` builds whichever
the installed SDK uses (``http_module=`` picks one explicitly).

What the key is made of (``plan``): the ``model``; ``messages`` (chat) or ``input``
(responses, embeddings) as the descriptor's input; ``response_format`` / ``text.format`` as
its ``schema``; every other request member that can change the answer in ``params``, with
the endpoint. Left out: the API key, base URL, organisation and project (they are headers
and the URL, never read), and the members that do not change the answer: ``user``,
``safety_identifier``, ``metadata``, ``store``, ``prompt_cache_key``,
``prompt_cache_retention``, ``service_tier`` (except for ``/responses``, whose answer echoes
them); ``stream_options`` except on a streamed call. A string input with whitespace at its
ends or a CR is keyed as sent. Not cached: a Responses call with ``background``, a
``conversation``, or a ``prompt`` template without a ``version`` (docs/gateway-keys.md).

A streamed call (``stream: true``) has an entry of its own: its answer is stored as the
server-sent events the upstream sent and replayed as the same events, so an SDK reading a
replay reads exactly what it read the first time; a non-streamed call's answer is the JSON
document. (Sharing one entry would mean synthesising events, or a document, the upstream
never sent.) A streamed miss reaches the caller chunk by chunk as it arrives and is stored
once it completed (``[DONE]``, or ``response.completed`` / ``response.incomplete``); a stream
cut short is not stored. Only a 200 is stored, and never an answer or stream that reports a
failure (``is_failure``). Usage (``prompt_tokens`` / ``input_tokens``...)
is stored as ``input_tokens`` / ``output_tokens`` so TeamCache counts the tokens a hit saves.
Replayed answers carry ``X-TeamCache: hit`` (``; collapsed`` when answered by waiting for
another caller's fill, ``; stale`` when stale); answers from the upstream ``X-TeamCache:
miss``. ``Cache-Control: no-cache`` on a request (``extra_headers``) forces a fresh call.
Bursts of identical calls make one upstream call (a lease and a wait). With
``stale_while_revalidate=N`` answers stay servable N seconds past their TTL: the caller handed
the refresh lease gets the stale answer at once and the transport refreshes it in the
background. A TeamCache that
fails is skipped: the call goes to the upstream, marked ``X-TeamCache: bypass; reason=…``
(``timeout``, ``unavailable``, ``breaker-open``, ``misconfigured``, ``unauthorized``,
``forbidden``), the failure logged once and counted (``transport.health``). A frozen
TeamCache costs one call the client's lookup deadline (0.5 s); its circuit breaker then
skips it until a probe finds it answering again.

A streamed chat completion that does not ask for usage is sent upstream with
``stream_options.include_usage`` (its key is the caller's request, unchanged): the usage-only
event is recorded, and removed from what the caller reads and from what is stored, so
streamed hits count the tokens they save like the rest.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from types import ModuleType
from typing import Any

from ._breaker import CacheHealth
from ._cached import _CACHE_FAILURES, _fails_open, _Health, refused_write
from ._client import AsyncTeamCache, TeamCache
from ._openai_http import (
    _decoded,
    _names_usage,
    _plan_of,
    _refused_as_read,
    _refused_usage,
    _storable_type,
    _upstream_request,
    _without_length,
)
from ._openai_plan import ENDPOINTS, NOT_IN_KEY, Plan, is_text, plan, truthy
from ._openai_stream import UsageFilter, _usage, is_failure, stream_outcome
from ._settings import in_background, on_callers_path
from .errors import CacheSkipped, ProblemError
from .models import Lease, Lookup


def _bypass_reason(error: BaseException) -> str:
    """What the ``X-TeamCache: bypass; reason=…`` of a call that skipped the cache says."""
    if isinstance(error, CacheSkipped):
        return error.reason
    if isinstance(error, ProblemError):
        return {401: "unauthorized", 403: "forbidden"}.get(error.status, "unavailable")
    cause = error.__cause__ or error
    if "Timeout" in type(cause).__name__:
        return "timeout"
    return "unavailable"


def _mark(found: Lookup) -> str:
    return "hit" + ("; collapsed" if found.collapsed else "") + ("; stale" if found.stale else "")


class _Policy:
    """What both transports share: the cache, the namespace, and how to store."""

    def __init__(self, namespace: str, ttl: int | None, lease: int | None, wait: float,
                 stale_while_revalidate: int | None):
        # The server takes waits up to 60 s.
        self.namespace, self.ttl, self.lease, self.wait = namespace, ttl, lease, min(60.0, max(0.0, wait))
        self.stale_while_revalidate = stale_while_revalidate
        self.health = _Health()

    def lookup_arguments(self, headers: Mapping[str, str]) -> dict[str, Any]:
        refresh = "no-cache" in headers.get("cache-control", "").lower()
        return {"refresh": refresh, "lease": None if refresh else self.lease,
                "wait": None if refresh or not self.lease else self.wait}

    def storable(self, the_plan: Plan, status: int, body: bytes, content_type: str,
                 usage: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]] | None:
        """The text and metadata to store, or None (not a 200, a failure, cut short, not text). `usage`:
        what a usage-only event this transport asked for (and removed) said."""
        # 200 only: a 201 or 202 is a job or a creation, not an answer to replay.
        if status != 200:
            return None
        try:
            text = body.decode()
        except UnicodeDecodeError:
            return None
        if the_plan.stream:
            complete, metadata = stream_outcome(the_plan.endpoint, text)
            if not complete:
                return None
            metadata.update(usage or {})
        else:
            try:
                document = json.loads(text)
            except ValueError:
                return None
            if is_failure(document):
                return None
            metadata = _usage(document)
        # Only a media type the service stores (it answers hits with it); else the endpoint's own.
        metadata["content_type"] = content_type if _storable_type(content_type) else (
            "text/event-stream" if the_plan.stream else "application/json")
        metadata["endpoint"] = the_plan.endpoint
        return text, metadata

    def lookup_steps(self, headers: Mapping[str, str]) -> tuple[dict[str, Any], float | None]:
        """The first lookup's arguments (no wait: the short deadline) and the wait for a
        second one, asked only when the first says another caller is filling the key."""
        arguments = self.lookup_arguments(headers)
        wait = arguments.pop("wait", None)
        return arguments, wait

    def replay_headers(self, found: Lookup) -> dict[str, str]:
        content_type = (found.metadata or {}).get("content_type") or "application/json"
        return {"content-type": str(content_type), "x-teamcache": _mark(found)}


def _module(http_module: ModuleType | str | None) -> ModuleType:
    """The HTTP library the installed openai SDK speaks through (httpx2 for openai 3.x)."""
    if isinstance(http_module, ModuleType):
        return http_module
    if isinstance(http_module, str):
        return importlib.import_module(http_module)
    try:
        base = importlib.import_module("openai._base_client")
        for name in ("httpx2", "httpx"):
            if getattr(base, name, None) is not None:
                return importlib.import_module(name)
    except ImportError:
        pass
    return importlib.import_module("httpx")


def _base(http: ModuleType, name: str) -> Any:
    """A base class of the HTTP library chosen at run time (httpx or httpx2): untyped here, as
    the choice is the installed SDK's."""
    return getattr(http, name)


def transport(cache: TeamCache, namespace: str, *, http_module: ModuleType | str | None = None,
              inner: Any = None, ttl: int | None = None, lease: int | None = 60, wait: float = 30,
              stale_while_revalidate: int | None = None) -> Any:
    """A synchronous transport (of the library ``http_module``) that caches through ``cache``."""
    http = _module(http_module)
    policy = _Policy(namespace, ttl, lease, wait, stale_while_revalidate)
    upstream = inner if inner is not None else http.HTTPTransport()

    SyncByteStream: Any = _base(http, "SyncByteStream")
    class Recording(SyncByteStream):
        """Passes a streamed answer through chunk by chunk (through `usage`, when this
        transport asked for the usage event), and stores it once it completed."""

        def __init__(self, stream: Any, finish: Any, usage: UsageFilter | None = None):
            self.stream, self.finish, self.done, self.usage = stream, finish, False, usage
            self.parts: list[bytes] = []

        def __iter__(self) -> Iterator[bytes]:
            try:
                for chunk in self.stream:
                    part = self.usage.feed(bytes(chunk)) if self.usage else bytes(chunk)
                    if part:
                        self.parts.append(part)
                        yield part
                if self.usage and (rest := self.usage.finish()):
                    self.parts.append(rest)
                    yield rest
            finally:
                self._end()

        def _end(self) -> None:
            if not self.done:
                self.done = True
                # What arrived is judged by its content: the SDK stops reading at `[DONE]`
                # without draining the stream, and a stream cut short lacks its end marker.
                self.finish(b"".join(self.parts), self.usage.usage if self.usage else None)

        def close(self) -> None:
            try:
                self.stream.close()
            finally:
                self._end()

    BaseTransport: Any = _base(http, "BaseTransport")
    class CachingTransport(BaseTransport):
        def handle_request(self, request: Any) -> Any:
            the_plan = _plan_of(request, request.read())
            if the_plan is None:
                return upstream.handle_request(request)
            try:
                arguments, wait = policy.lookup_steps(request.headers)
                found = cache.lookup(namespace, the_plan.descriptor, **arguments)
                if found.pending and wait:
                    found = cache.lookup(namespace, the_plan.descriptor, **arguments, wait=wait)
                policy.health.succeeded()
            except _CACHE_FAILURES as error:
                _fails_open(error)
                policy.health.failed(error)
                response = upstream.handle_request(request)
                response.headers["x-teamcache"] = f"bypass; reason={_bypass_reason(error)}"
                return response
            if found.hit:
                if found.revalidate is not None:
                    # Stale within its window, and this caller holds the refresh lease: the stale
                    # answer now, the refresh in the background.
                    fresh = http.Request(request.method, request.url, headers=request.headers,
                                         content=request.content, extensions=request.extensions)
                    threading.Thread(target=self._refresh, args=(fresh, the_plan, found.revalidate), daemon=True,
                                     name="teamcache-refresh").start()
                return http.Response(200, headers=policy.replay_headers(found),
                                     content=(found.response or "").encode())
            return self._call(request, the_plan, found.lease)

        def _refresh(self, request: Any, the_plan: Plan, lease: Lease) -> None:
            with in_background():
                self._refresh_now(request, the_plan, lease)

        def _refresh_now(self, request: Any, the_plan: Plan, lease: Lease) -> None:
            request.headers["accept-encoding"] = "identity"
            try:
                response = upstream.handle_request(request)
                body = response.read()
                response.close()
            except Exception:  # noqa: BLE001 - nobody to raise to: give the lease back
                self._store(the_plan, lease, None)
                return
            self._store(the_plan, lease, policy.storable(the_plan, response.status_code, body,
                                                         response.headers.get("content-type", "")))

        def _call(self, request: Any, the_plan: Plan, lease: Lease | None) -> Any:
            original = request
            request = _upstream_request(http, request, the_plan)
            # Identity bodies, so what is stored is what the SDK reads.
            request.headers["accept-encoding"] = "identity"
            try:
                response = upstream.handle_request(request)
                if _refused_usage(the_plan, response.status_code):
                    refusal = response.read()
                    response.close()
                    if _names_usage(refusal):
                        # An upstream that refuses the usage member gets the caller's request as sent.
                        the_plan = dataclasses.replace(the_plan, upstream_body=None)
                        original.headers["accept-encoding"] = "identity"
                        response = upstream.handle_request(original)
                    else:
                        response = _refused_as_read(http, response, refusal)
            except BaseException:
                self._store(the_plan, lease, None)
                raise
            headers = [(name, value) for name, value in response.headers.multi_items()
                       if name.lower() != "x-teamcache"] + [("x-teamcache", "miss")]
            content_type = response.headers.get("content-type", "")
            if the_plan.stream and 200 <= response.status_code < 300:
                def finish(body: bytes, usage: Mapping[str, Any] | None) -> None:
                    self._store(the_plan, lease,
                                policy.storable(the_plan, response.status_code, body, content_type, usage))
                usage = UsageFilter() if the_plan.strips_usage else None
                return http.Response(response.status_code, headers=_without_length(headers) if usage else headers,
                                     stream=Recording(response.stream, finish, usage), extensions=response.extensions)
            body = response.read()
            response.close()
            self._store(the_plan, lease, policy.storable(the_plan, response.status_code, body, content_type))
            return http.Response(response.status_code, headers=_decoded(headers), content=body,
                                 extensions=response.extensions)

        @property
        def health(self) -> CacheHealth:
            """The cache's health as this transport's client sees it (breaker, failures)."""
            return cache.cache_health

        @property
        def bypassed(self) -> int:
            """Calls this transport sent upstream without the cache because it failed."""
            return policy.health.failures

        def _store(self, the_plan: Plan, lease: Lease | None, stored: tuple[str, dict[str, Any]] | None) -> None:
            try:
                with on_callers_path():
                    if stored is not None:
                        cache.upsert(namespace, the_plan.descriptor, stored[0], metadata=stored[1], ttl=policy.ttl,
                                     lease=lease, stale_while_revalidate=policy.stale_while_revalidate)
                    elif lease is not None:
                        cache.release(namespace, the_plan.key, lease)
            except _CACHE_FAILURES as error:
                policy.health.failed(error)
                if stored is not None and lease is not None and refused_write(error):
                    self._store(the_plan, lease, None)

        def close(self) -> None:
            upstream.close()

    return CachingTransport()


def async_transport(cache: AsyncTeamCache, namespace: str, *, http_module: ModuleType | str | None = None,
                    inner: Any = None, ttl: int | None = None, lease: int | None = 60, wait: float = 30,
                    stale_while_revalidate: int | None = None) -> Any:
    """The asyncio transport: as ``transport``, for ``AsyncOpenAI``."""
    http = _module(http_module)
    policy = _Policy(namespace, ttl, lease, wait, stale_while_revalidate)
    upstream = inner if inner is not None else http.AsyncHTTPTransport()
    refreshing: set[asyncio.Task[Any]] = set()  # background refreshes, kept until done

    AsyncByteStream: Any = _base(http, "AsyncByteStream")
    class Recording(AsyncByteStream):
        def __init__(self, stream: Any, finish: Any, usage: UsageFilter | None = None):
            self.stream, self.finish, self.done, self.usage = stream, finish, False, usage
            self.parts: list[bytes] = []

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self.stream:
                    part = self.usage.feed(bytes(chunk)) if self.usage else bytes(chunk)
                    if part:
                        self.parts.append(part)
                        yield part
                if self.usage and (rest := self.usage.finish()):
                    self.parts.append(rest)
                    yield rest
            finally:
                await self._end()

        async def _end(self) -> None:
            if not self.done:
                self.done = True
                await self.finish(b"".join(self.parts), self.usage.usage if self.usage else None)

        async def aclose(self) -> None:
            try:
                await self.stream.aclose()
            finally:
                await self._end()

    AsyncBaseTransport: Any = _base(http, "AsyncBaseTransport")
    class CachingTransport(AsyncBaseTransport):
        async def handle_async_request(self, request: Any) -> Any:
            the_plan = _plan_of(request, await request.aread())
            if the_plan is None:
                return await upstream.handle_async_request(request)
            try:
                arguments, wait = policy.lookup_steps(request.headers)
                found = await cache.lookup(namespace, the_plan.descriptor, **arguments)
                if found.pending and wait:
                    found = await cache.lookup(namespace, the_plan.descriptor, **arguments, wait=wait)
                policy.health.succeeded()
            except _CACHE_FAILURES as error:
                _fails_open(error)
                policy.health.failed(error)
                response = await upstream.handle_async_request(request)
                response.headers["x-teamcache"] = f"bypass; reason={_bypass_reason(error)}"
                return response
            if found.hit:
                if found.revalidate is not None:
                    fresh = http.Request(request.method, request.url, headers=request.headers,
                                         content=request.content, extensions=request.extensions)
                    task = asyncio.get_running_loop().create_task(self._refresh(fresh, the_plan, found.revalidate))
                    refreshing.add(task)
                    task.add_done_callback(refreshing.discard)
                return http.Response(200, headers=policy.replay_headers(found),
                                     content=(found.response or "").encode())
            return await self._call(request, the_plan, found.lease)

        async def _refresh(self, request: Any, the_plan: Plan, lease: Lease) -> None:
            with in_background():
                await self._refresh_now(request, the_plan, lease)

        async def _refresh_now(self, request: Any, the_plan: Plan, lease: Lease) -> None:
            request.headers["accept-encoding"] = "identity"
            try:
                response = await upstream.handle_async_request(request)
                body = await response.aread()
                await response.aclose()
            except Exception:  # noqa: BLE001 - nobody to raise to: give the lease back
                await self._store(the_plan, lease, None)
                return
            await self._store(the_plan, lease, policy.storable(the_plan, response.status_code, body,
                                                               response.headers.get("content-type", "")))

        async def _call(self, request: Any, the_plan: Plan, lease: Lease | None) -> Any:
            original = request
            request = _upstream_request(http, request, the_plan)
            request.headers["accept-encoding"] = "identity"
            try:
                response = await upstream.handle_async_request(request)
                if _refused_usage(the_plan, response.status_code):
                    refusal = await response.aread()
                    await response.aclose()
                    if _names_usage(refusal):
                        the_plan = dataclasses.replace(the_plan, upstream_body=None)
                        original.headers["accept-encoding"] = "identity"
                        response = await upstream.handle_async_request(original)
                    else:
                        response = _refused_as_read(http, response, refusal)
            except BaseException:
                await self._store(the_plan, lease, None)
                raise
            headers = [(name, value) for name, value in response.headers.multi_items()
                       if name.lower() != "x-teamcache"] + [("x-teamcache", "miss")]
            content_type = response.headers.get("content-type", "")
            if the_plan.stream and 200 <= response.status_code < 300:
                async def finish(body: bytes, usage: Mapping[str, Any] | None) -> None:
                    await self._store(the_plan, lease,
                                      policy.storable(the_plan, response.status_code, body, content_type, usage))
                usage = UsageFilter() if the_plan.strips_usage else None
                return http.Response(response.status_code, headers=_without_length(headers) if usage else headers,
                                     stream=Recording(response.stream, finish, usage), extensions=response.extensions)
            body = await response.aread()
            await response.aclose()
            await self._store(the_plan, lease, policy.storable(the_plan, response.status_code, body, content_type))
            return http.Response(response.status_code, headers=_decoded(headers), content=body,
                                 extensions=response.extensions)

        async def _store(self, the_plan: Plan, lease: Lease | None, stored: tuple[str, dict[str, Any]] | None) -> None:
            try:
                with on_callers_path():
                    if stored is not None:
                        await cache.upsert(namespace, the_plan.descriptor, stored[0], metadata=stored[1],
                                           ttl=policy.ttl, lease=lease,
                                           stale_while_revalidate=policy.stale_while_revalidate)
                    elif lease is not None:
                        await cache.release(namespace, the_plan.key, lease)
            except _CACHE_FAILURES as error:
                policy.health.failed(error)
                if stored is not None and lease is not None and refused_write(error):
                    await self._store(the_plan, lease, None)

        async def aclose(self) -> None:
            await upstream.aclose()

        @property
        def health(self) -> CacheHealth:
            return cache.cache_health

        @property
        def bypassed(self) -> int:
            return policy.health.failures

    return CachingTransport()


def http_client(namespace: str, cache: TeamCache | None = None, *, base_url: str | None = None,
                token: str | None = None, http_module: ModuleType | str | None = None, **options: Any) -> Any:
    """An HTTP client for ``OpenAI(http_client=...)`` that caches through TeamCache (at
    ``base_url`` / ``TEAMCACHE_URL`` with ``token`` / ``TEAMCACHE_TOKEN`` unless ``cache`` is
    given). ``options``: ``ttl``, ``lease``, ``wait``, ``stale_while_revalidate``, ``inner``."""
    http = _module(http_module)
    cache = cache or TeamCache(base_url, token)
    return http.Client(transport=transport(cache, namespace, http_module=http, **options), timeout=None)


def async_http_client(namespace: str, cache: AsyncTeamCache | None = None, *, base_url: str | None = None,
                      token: str | None = None, http_module: ModuleType | str | None = None, **options: Any) -> Any:
    """As ``http_client``, for ``AsyncOpenAI(http_client=...)``."""
    http = _module(http_module)
    cache = cache or AsyncTeamCache(base_url, token)
    return http.AsyncClient(transport=async_transport(cache, namespace, http_module=http, **options), timeout=None)


__all__ = ["ENDPOINTS", "NOT_IN_KEY", "Plan", "UsageFilter", "async_http_client", "async_transport", "http_client",
           "is_text", "plan", "stream_outcome", "transport", "truthy"]
