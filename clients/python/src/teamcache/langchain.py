"""A LangChain LLM cache backed by TeamCache::

    from langchain_core.globals import set_llm_cache
    from teamcache.langchain import TeamCacheLLMCache
    set_llm_cache(TeamCacheLLMCache(namespace="team-a"))

Each (prompt, llm_string) becomes a descriptor: the model parsed out of ``llm_string``
(``model_name`` / ``model``...), the prompt, and the rest of ``llm_string`` as ``params``
with secrets, base URLs, organisations and clients removed, so services with different
credentials or gateways share entries. Generations are stored with LangChain's own
serialisation and loaded back allowing only generation and message classes (a shared cache
is not trusted to name arbitrary classes). Token usage of chat generations is stored so
TeamCache counts what a hit saves. A cache that fails is a miss (logged once, counted):
it never fails the model call, whatever it raises. Async calls use one ``AsyncTeamCache``
per event loop (an asyncio client is bound to the loop it first ran on; a second
``asyncio.run`` must not meet the first loop's closed connections).
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import warnings
from collections.abc import Sequence
from typing import Any

from langchain_core.caches import BaseCache
from langchain_core.load import Serializable, dumpd, load
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, Generation, GenerationChunk

from ._cached import _fails_open, _Health
from ._client import AsyncTeamCache, TeamCache
from ._settings import on_callers_path
from .keys import descriptor_key
from .models import Lease, Lookup

#: Members of an llm_string that say who calls or where, never what is answered. Matched
#: as whole names or `_`-suffixes (`openai_api_key`), never as bare substrings: `eos_token`
#: or `pad_token` change the answer and stay.
_NOT_IN_KEY = re.compile(r"^(.*_)?(api_key|api_base|base_url|access_token|secret_key|password|organization"
                         r"|organisation|endpoint|proxy)$|^(client|async_client|http_client|http_async_client"
                         r"|default_headers|default_query|timeout|request_timeout|max_retries|project)$",
                         re.IGNORECASE)
#: A descriptor or a serialisation that cannot be made is a miss, not an error.
_UNUSABLE = (ValueError, TypeError, RecursionError)
_MODEL_NAMES = ("model_name", "model", "model_id", "deployment_name", "azure_deployment")
_LOADABLE: list[type[Serializable]] = [
    Generation, ChatGeneration, GenerationChunk, ChatGenerationChunk, AIMessage, AIMessageChunk,
    HumanMessage, SystemMessage, ToolMessage, FunctionMessage, ChatMessage,
]


def _clean(value: Any) -> Any:
    """Drops credentials and endpoints (and LangChain's secret markers) anywhere in the value."""
    if isinstance(value, dict):
        if value.get("type") == "secret" and value.get("lc") == 1:
            return None
        return {str(name): _clean(item) for name, item in value.items() if not _NOT_IN_KEY.search(str(name))}
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and isinstance(value[0], str) and _NOT_IN_KEY.search(value[0]):
            return None  # an ("openai_api_base", "...") pair of a param string
        return [item for item in (_clean(item) for item in value) if item is not None]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def _find_model(value: Any) -> str | None:
    if isinstance(value, dict):
        for name in _MODEL_NAMES:
            found_name = value.get(name)
            if isinstance(found_name, str) and found_name:
                return found_name
        for item in value.values():
            found = _find_model(item)
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        if len(value) == 2 and value[0] in _MODEL_NAMES and isinstance(value[1], str) and value[1]:
            return value[1]
        for item in value:
            found = _find_model(item)
            if found:
                return found
    return None


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def descriptor(prompt: str, llm_string: str) -> dict[str, Any]:
    """The TeamCache descriptor of a LangChain cache key."""
    # Chat models: "<the model serialised>---<sorted call params>"; others: the params alone.
    head, separator, tail = llm_string.partition("---")
    parts = [_parse(head)] + ([_parse(tail)] if separator else [])
    if any(part is None for part in parts):
        structure: Any = {"llm_string": llm_string}
        model = None
    else:
        structure = _clean(parts)
        model = _find_model(parts)
    return {"model": model or "langchain", "prompt": prompt, "params": {"langchain": structure}}


def _serialise(generations: Sequence[Generation]) -> tuple[str, dict[str, Any]]:
    inputs = outputs = 0
    for generation in generations:
        usage = getattr(getattr(generation, "message", None), "usage_metadata", None) or {}
        inputs += int(usage.get("input_tokens", 0) or 0)
        outputs += int(usage.get("output_tokens", 0) or 0)
    metadata = {"input_tokens": inputs, "output_tokens": outputs, "format": "langchain-dumpd"}
    return json.dumps([dumpd(generation) for generation in generations]), metadata


def _deserialise(text: str) -> list[Generation] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = [load(item, allowed_objects=_LOADABLE) for item in json.loads(text)]
    except Exception:  # noqa: BLE001 - an entry this cannot read is a miss
        return None
    return loaded if all(isinstance(item, Generation) for item in loaded) else None


class TeamCacheLLMCache(BaseCache):
    """``BaseCache`` over TeamCache (sync and async methods). ``cache`` / ``async_cache`` default
    to clients for ``TEAMCACHE_URL`` and ``TEAMCACHE_TOKEN``. With ``stale_while_revalidate``,
    an expired answer is still served for that long, except to the one caller handed its
    refresh lease: for it the lookup is a miss, the model is called, and the update refreshes."""

    def __init__(self, namespace: str, cache: TeamCache | None = None, async_cache: AsyncTeamCache | None = None,
                 *, base_url: str | None = None, token: str | None = None, ttl: int | None = None,
                 stale_while_revalidate: int | None = None):
        self.namespace = namespace
        self.ttl = ttl
        self.stale_while_revalidate = stale_while_revalidate
        self._cache = cache or TeamCache(base_url, token)
        # One asyncio client per running loop (the first loop may get the one given); loops
        # that closed are dropped when a new one appears.
        self._given_async = async_cache
        self._async_by_loop: dict[asyncio.AbstractEventLoop, AsyncTeamCache] = {}
        self._health = _Health()
        #: Refresh leases handed to lookups that answered "miss" for a stale entry, by key,
        #: for the `update` that follows (bounded: the oldest are dropped).
        self._refreshing: dict[str, Lease] = {}

    @property
    def cache_failures(self) -> int:
        return self._health.failures

    def _async(self) -> AsyncTeamCache:
        """The asyncio client of the running loop (made on first use in that loop)."""
        loop = asyncio.get_running_loop()
        client = self._async_by_loop.get(loop)
        if client is None:
            for closed in [known for known in self._async_by_loop if known.is_closed()]:
                del self._async_by_loop[closed]
            given = self._given_async
            if given is not None and given not in self._async_by_loop.values():
                client = given
            else:
                # Every loop's client shares one breaker (the sync client's, or the given one's)
                # and the same settings.
                model = (given or self._cache)._settings
                client = AsyncTeamCache(model.base_url, model.token, timeout=model.timeout,
                                        max_retries=model.max_retries, backoff=model.backoff,
                                        max_backoff=model.max_backoff, lookup_timeout=model.lookup_timeout,
                                        circuit_breaker=model.breaker or False, strict=model.strict)
                # Its URL is the model's, without the user and password: a 401 still says so.
                client._settings.url_problem = model.url_problem
            self._async_by_loop[loop] = client
        return client

    def _failed(self, error: BaseException) -> None:
        """Anything the cache raises is a miss (counted), never the model call's failure,
        except a strict client's misconfiguration."""
        _fails_open(error)
        self._health.failed(error)

    def _answer(self, found: Lookup) -> list[Generation] | None:
        """A hit's generations; a stale hit that came with the refresh lease is a miss for
        this caller (LangChain then calls the model, and `update` fills the lease)."""
        if not found.hit or not found.response:
            return None
        if found.revalidate is not None:
            if len(self._refreshing) >= 1024:
                self._refreshing.pop(next(iter(self._refreshing), ""), None)
            self._refreshing[found.key] = found.revalidate
            return None
        return _deserialise(found.response)

    def lookup(self, prompt: str, llm_string: str) -> list[Generation] | None:
        try:
            found = self._cache.lookup(self.namespace, descriptor(prompt, llm_string))
        except _UNUSABLE:
            return None
        except Exception as error:  # noqa: BLE001 - a cache never fails the model call
            self._failed(error)
            return None
        self._health.succeeded()
        return self._answer(found)

    def _write(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> dict[str, Any] | None:
        try:
            described = descriptor(prompt, llm_string)
            key = descriptor_key(described)
            text, metadata = _serialise(return_val)
        except _UNUSABLE:
            return None
        except Exception as error:  # noqa: BLE001 - a generation this cannot store is not stored
            self._failed(error)
            return None
        return {"descriptor": described, "response": text, "metadata": metadata, "ttl": self.ttl,
                "lease": self._refreshing.pop(key, None),
                "stale_while_revalidate": self.stale_while_revalidate}

    def update(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> None:
        write = self._write(prompt, llm_string, return_val)
        if write is None:
            return
        try:
            with on_callers_path():
                self._cache.upsert(self.namespace, write.pop("descriptor"), write.pop("response"), **write)
        except Exception as error:  # noqa: BLE001 - a cache never fails the model call
            self._failed(error)

    def clear(self, **kwargs: Any) -> None:
        """Evicts every entry of the namespace."""
        try:
            self._cache.clear(self.namespace)
        except Exception as error:  # noqa: BLE001 - a cache never fails the model call
            self._failed(error)

    async def alookup(self, prompt: str, llm_string: str) -> list[Generation] | None:
        try:
            found = await self._async().lookup(self.namespace, descriptor(prompt, llm_string))
        except _UNUSABLE:
            return None
        except Exception as error:  # noqa: BLE001 - a cache never fails the model call
            self._failed(error)
            return None
        self._health.succeeded()
        return self._answer(found)

    async def aupdate(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> None:
        write = self._write(prompt, llm_string, return_val)
        if write is None:
            return
        try:
            with on_callers_path():
                await self._async().upsert(self.namespace, write.pop("descriptor"), write.pop("response"), **write)
        except Exception as error:  # noqa: BLE001 - a cache never fails the model call
            self._failed(error)

    async def aclear(self, **kwargs: Any) -> None:
        try:
            await self._async().clear(self.namespace)
        except Exception as error:  # noqa: BLE001 - a cache never fails the model call
            self._failed(error)


__all__ = ["TeamCacheLLMCache", "descriptor"]
