"""What the calls return."""

from __future__ import annotations

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
