"""Checked by mypy (``mypy --strict``, see pyproject.toml), never run: the public API's answers
have real types, for the sync client and the async one alike. The ``type: ignore`` lines are
calls the types must refuse: were a route to fall back to ``Any``, mypy would report the
ignore as unused and fail."""

from __future__ import annotations

from typing_extensions import assert_type

from teamcache import (
    AsyncTeamCache,
    ChangePage,
    Entry,
    EntryMiss,
    ImportResult,
    Lookup,
    NamespaceSettings,
    Stats,
    TeamCache,
    WriteResult,
)


def sync_client(cache: TeamCache) -> None:
    assert_type(cache.get("team", "k"), Entry | EntryMiss | None)
    assert_type(cache.put("team", "k", b"v", ttl=60), WriteResult)
    assert_type(cache.delete("team", "k"), bool)
    assert_type(cache.lookup("team", {"model": "m", "prompt": "p"}), Lookup)
    assert_type(cache.upsert("team", {"model": "m", "prompt": "p"}, "answer"), WriteResult)
    assert_type(cache.evict("team", tag="t"), int)
    assert_type(cache.stats("team"), Stats)
    assert_type(cache.global_stats(top=5), Stats)
    assert_type(cache.settings("team"), NamespaceSettings)
    assert_type(cache.changes("team", since=0), ChangePage)
    assert_type(cache.import_lines("team", ["{}"]), ImportResult)
    assert_type(cache.export_page("team"), tuple[list[bytes], str | None])
    assert_type(cache.metrics(), str)
    cache.get("team", 3)  # type: ignore[arg-type]
    cache.stats("team", colour="red")  # type: ignore[call-arg]
    assert_type(cache.cached("team", {"model": "m", "prompt": "p"}, lambda: 42), int)

    @cache.cached("team", lambda question: {"model": "m", "prompt": question}, ttl=60)
    def ask(question: str) -> list[str]:
        return [question]

    assert_type(ask("why?"), list[str])
    ask(3)  # type: ignore[arg-type]
    cache.cached("team", {"model": "m"}, lambda: 1, colour="red")  # type: ignore[call-overload]


async def async_client(cache: AsyncTeamCache) -> None:
    assert_type(await cache.get("team", "k"), Entry | EntryMiss | None)
    assert_type(await cache.lookup("team", {"model": "m", "prompt": "p"}), Lookup)
    assert_type(await cache.stats("team"), Stats)
    assert_type(await cache.changes("team", wait=5), ChangePage)

    async def call() -> str:
        return "answer"

    assert_type(await cache.cached("team", {"model": "m", "prompt": "p"}, call), str)

    @cache.cached("team", lambda question: {"model": "m", "prompt": question})
    async def ask(question: str) -> dict[str, int]:
        return {question: 1}

    assert_type(await ask("why?"), dict[str, int])
