"""What the calls return."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Lease:
    """A miss (or refresh) lease: the right, for a while, to be the one caller that fills a
    key. ``id`` is the holder's secret; it is left out of ``repr`` so it does not reach logs."""

    id: str = field(repr=False)
    expires_in: int


@dataclass(frozen=True)
class Lookup:
    """A descriptor lookup's answer."""

    hit: bool
    key: str
    response: str | None = None
    metadata: dict[str, Any] | None = None
    age: int | None = None
    stale: bool = False
    #: Answered by waiting for another caller's fill.
    collapsed: bool = False
    #: A miss: this caller holds the key's lease and should fill it (``upsert(lease=...)``).
    lease: Lease | None = None
    #: A miss while another caller holds the lease and the wait ran out.
    pending: bool = False
    retry_after: int | None = None
    #: A stale-while-revalidate answer's refresh lease: serve the stale answer, and refresh.
    revalidate: Lease | None = None
    #: The stored version's ETag, and seconds of freshness left (negative when stale).
    etag: str | None = None
    ttl: int | None = None
    #: The entry's window past expiry (0: none).
    stale_while_revalidate: int = 0
    #: ``if_none_match`` named the stored version: no ``response`` or ``metadata`` came.
    not_modified: bool = False
    #: Answered by the client's local tier, without asking the service.
    from_local: bool = False


@dataclass(frozen=True)
class Entry:
    """A raw entry as read back (``body`` is empty for HEAD and for ``not_modified``)."""

    body: bytes = field(repr=False)
    content_type: str
    etag: str | None
    cache_status: str | None
    age: int
    #: Every response header (kept out of ``repr``: a refresh lease's id is among them).
    headers: dict[str, str] = field(repr=False)
    #: ``If-None-Match`` matched: 304, no body.
    not_modified: bool = False
    #: A stale-while-revalidate answer's refresh lease (GET only).
    revalidate: Lease | None = None
    #: Answered by the client's local tier, without asking the service.
    from_local: bool = False


@dataclass(frozen=True)
class EntryMiss:
    """A raw GET's miss: the lease when one was granted, or ``pending`` when another caller
    holds it."""

    lease: Lease | None = None
    pending: bool = False
    retry_after: int | None = None


@dataclass(frozen=True)
class WriteResult:
    """What a write stored (committed when returned)."""

    created: bool
    key: str
    etag: str | None = None
    size: int | None = None
    stored_size: int | None = None
    encoding: str | None = None
    expires_at: str | None = None
    namespace: str | None = None
    #: The service could not be reached: the write waits in the local tier's outbox and is
    #: sent when it answers again (not committed yet).
    queued: bool = False


# The JSON documents of the other routes, typed. A document missing a required member, or with
# one of the wrong type, is a malformed answer (the client raises ``TransportError``). ``Stats``
# keeps the whole document in ``document`` (out of ``repr``): it is the one a newer server is
# likeliest to grow.


def _int(document: Mapping[str, Any], name: str) -> int:
    value = document.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name!r} is not an integer")
    return value


def _count(document: Mapping[str, Any], name: str) -> int:
    """A count: 0 when absent (a server older than the member), refused when not an integer."""
    return _int(document, name) if name in document else 0


def _object(document: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = document.get(name)
    if not isinstance(value, Mapping):
        raise ValueError(f"{name!r} is not an object")
    return value


def _optional_str(document: Mapping[str, Any], name: str) -> str | None:
    value = document.get(name)
    return value if isinstance(value, str) else None


def _optional_int(document: Mapping[str, Any], name: str) -> int | None:
    value = document.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class LookupCounts:
    """Lookups by how they ended (``collapsed``: hits answered by waiting for another caller's
    fill, counted in ``hit`` too)."""

    hit: int
    miss: int
    stale: int
    bypass: int
    collapsed: int
    #: Hits clients' local tiers answered and reported (counted in ``hit`` too).
    local: int = 0


@dataclass(frozen=True)
class TokenCounts:
    input: int
    output: int


@dataclass(frozen=True)
class TopEntry:
    """One of the most-hit entries. ``prompt_digest`` and ``writer_token_id`` are given to
    admin tokens only; ``namespace`` in global stats only."""

    key: str
    model: str | None
    hit_count: int
    last_accessed_at: str
    namespace: str | None = None
    prompt_digest: str | None = None
    writer_token_id: int | None = None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> TopEntry:
        last = document.get("last_accessed_at")
        if not isinstance(document.get("key"), str) or not isinstance(last, str):
            raise ValueError("a top entry needs a key and last_accessed_at")
        return cls(key=document["key"], model=_optional_str(document, "model"),
                   hit_count=_int(document, "hit_count"), last_accessed_at=last,
                   namespace=_optional_str(document, "namespace"),
                   prompt_digest=_optional_str(document, "prompt_digest"),
                   writer_token_id=_optional_int(document, "writer_token_id"))


@dataclass(frozen=True)
class Stats:
    """``stats()`` (one namespace) and ``global_stats()`` (all of them)."""

    entries: int
    #: Bytes of the bodies as written (``identity``) and as stored (after compression).
    identity_bytes: int
    stored_bytes: int
    lookups: LookupCounts
    #: hits / (hits + misses)
    hit_ratio: float
    tokens_saved: TokenCounts
    top: tuple[TopEntry, ...]
    document: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Stats:
        sizes, lookups, tokens = (_object(document, name) for name in ("bytes", "lookups", "tokens_saved"))
        ratio, top = document.get("hit_ratio"), document.get("top")
        if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not isinstance(top, list):
            raise ValueError("stats need a hit_ratio and a top list")
        return cls(entries=_int(document, "entries"), identity_bytes=_int(sizes, "identity"),
                   stored_bytes=_int(sizes, "stored"),
                   lookups=LookupCounts(**{name: _count(lookups, name)
                                           for name in ("hit", "miss", "stale", "bypass", "collapsed", "local")}),
                   hit_ratio=float(ratio), tokens_saved=TokenCounts(_int(tokens, "input"), _int(tokens, "output")),
                   top=tuple(TopEntry.from_json(entry) for entry in top), document=document)


@dataclass(frozen=True)
class NamespaceSettings:
    """A namespace's settings (None: the server's default)."""

    namespace: str
    default_ttl: int | None
    max_bytes: int | None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> NamespaceSettings:
        name = document.get("namespace")
        if not isinstance(name, str):
            raise ValueError("settings name their namespace")
        return cls(namespace=name, default_ttl=_optional_int(document, "default_ttl"),
                   max_bytes=_optional_int(document, "max_bytes"))


@dataclass(frozen=True)
class Change:
    """One committed change of a namespace: ``put`` (the key now holds ``etag``) or ``delete``.
    ``key`` is None when the key is not UTF-8 text (then ``key_base64`` holds its bytes)."""

    cursor: str
    kind: str
    key: str | None = None
    key_base64: str | None = None
    etag: str | None = None
    size: int | None = None
    stored_size: int | None = None
    content_type: str | None = None
    expires_at: str | None = None
    stale_until: str | None = None
    #: With ``include_body=True``: the stored body, in ``encoding`` (identity or gzip).
    body_base64: str | None = field(default=None, repr=False)
    encoding: str | None = None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Change:
        cursor, kind = document.get("cursor"), document.get("kind")
        if not isinstance(cursor, str) or kind not in ("put", "delete"):
            raise ValueError("a change needs a cursor and a kind")
        texts = {name: _optional_str(document, name) for name in
                 ("key", "key_base64", "etag", "content_type", "expires_at", "stale_until", "body_base64", "encoding")}
        return cls(cursor=cursor, kind=kind, size=_optional_int(document, "size"),
                   stored_size=_optional_int(document, "stored_size"), **texts)


@dataclass(frozen=True)
class ChangePage:
    """One page of a change feed: apply ``changes`` in order, then ask again from ``next``
    (``more``: further changes may follow at once)."""

    changes: tuple[Change, ...]
    next: str
    more: bool

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ChangePage:
        changes, cursor = document.get("changes"), document.get("next")
        if not isinstance(changes, list) or not isinstance(cursor, str):
            raise ValueError("a change page needs changes and next")
        return cls(changes=tuple(Change.from_json(change) for change in changes), next=cursor,
                   more=document.get("more") is True)


@dataclass(frozen=True)
class RejectedLine:
    """A dump line the import did not store, by its 1-based number, and why."""

    line: int
    reason: str


@dataclass(frozen=True)
class ImportResult:
    """What an import did with each line (``errors``: the first 100 rejected or store-full lines)."""

    imported: int
    unchanged: int
    skipped: int
    expired: int
    store_full: int
    rejected: int
    errors: tuple[RejectedLine, ...] = ()

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ImportResult:
        errors = document.get("errors", [])
        if not isinstance(errors, list):
            raise ValueError("errors is not a list")
        return cls(**{name: _count(document, name)
                      for name in ("imported", "unchanged", "skipped", "expired", "store_full", "rejected")},
                   errors=tuple(RejectedLine(_int(error, "line"), str(error.get("reason", ""))) for error in errors))
