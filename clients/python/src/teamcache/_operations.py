"""Each API route as a request to send and a parser of its answer, shared by the sync and the
async client (which differ only in how they send)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from . import _json
from .errors import ProblemError
from .keys import descriptor_key, fields
from .models import (
    ChangePage,
    Entry,
    EntryMiss,
    ImportResult,
    Lease,
    Lookup,
    NamespaceSettings,
    Stats,
    WriteResult,
    _int,
)

DESCRIPTOR_MEMBERS = ("model", "prompt", "messages", "schema", "params", "version")

#: What a call's answer parses into.
T = TypeVar("T")
#: A JSON document as ``json.loads`` gives it.
Document = dict[str, Any]


@dataclass
class Call(Generic[T]):
    """One HTTP request, the statuses that are answers (others raise), and its parser."""

    method: str
    path: str
    parse: Callable[[int, Mapping[str, str], bytes], T]
    accept: frozenset[int]
    params: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes | None = None
    #: Seconds added to the client's timeout (a lookup that may wait for a fill).
    extra_timeout: float = 0
    #: Whether sending it twice does what sending it once does. A call that is not (a lookup
    #: that may be granted a lease, a conditional write) is retried only when it cannot have
    #: reached the server (a refused connection), never after it was sent: a lease granted to
    #: an answer that was lost would hold up the whole burst, a create-only write would
    #: answer 412 to its own first attempt.
    idempotent: bool = True
    #: Reads an entry: carries ``TeamCache-Min-Position`` when the client reads its own writes.
    reads: bool = False
    #: A lookup that does not wait: it gets the client's short ``lookup_timeout`` (a hit is a
    #: few milliseconds; a cache that takes longer costs its caller more than it saves).
    quick: bool = False


def problem(status: int, body: bytes) -> ProblemError:
    try:
        document = json.loads(body) if body else None
    except ValueError:
        document = None
    return ProblemError(status, document if isinstance(document, dict) else None)


def _member(document: Document, name: str, kind: type) -> Any:
    """``document[name]`` when it is absent or null (None) or of ``kind``; otherwise the answer
    is malformed (ValueError). A bool is not taken for an int."""
    value = document.get(name)
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    raise ValueError(f"`{name}` is not a {kind.__name__}")


def _json_body(data: bytes) -> Document:
    document = json.loads(data) if data else {}
    if not isinstance(document, dict):
        raise ValueError("the answer is not a JSON object")
    return document


def namespace_path(namespace: str) -> str:
    return "/v1/caches/" + quote(namespace, safe="")


def entry_path(namespace: str, key: str | bytes) -> str:
    return namespace_path(namespace) + "/entries/" + quote(key, safe="")


def descriptor_members(descriptor: Mapping[str, Any]) -> dict[str, Any]:
    """The descriptor's members, checked as the server checks them (a bad one raises
    ``DescriptorError`` before any request)."""
    fields(descriptor)
    return {name: descriptor[name] for name in DESCRIPTOR_MEMBERS if descriptor.get(name) is not None}


def _json_call(method: str, path: str, document: Mapping[str, Any], parse: Callable[[int, Mapping[str, str], bytes], T],
               accept: Iterable[int], extra_timeout: float = 0, idempotent: bool = True) -> Call[T]:
    return Call(method, path, parse, frozenset(accept), headers={"Content-Type": "application/json"},
                content=_json.dumps(document).encode(), extra_timeout=extra_timeout, idempotent=idempotent)


def _lease(document: Any, id_member: str) -> Lease | None:
    if not isinstance(document, dict) or not isinstance(document.get(id_member), str):
        return None
    return Lease(id=document[id_member], expires_in=int(document.get("expires_in") or 1))


def _header_lease(value: str | None) -> Lease | None:
    """``TeamCache-Lease: <id>; expires_in=N``."""
    if not value:
        return None
    lease_id, _, rest = value.partition(";")
    expires = rest.strip().removeprefix("expires_in=")
    return Lease(id=lease_id.strip(), expires_in=int(expires) if expires.isdigit() else 1)


def _write_result(status: int, _headers: Mapping[str, str], body: bytes) -> WriteResult:
    document = _json_body(body)
    return WriteResult(created=status == 201, key=str(document.get("key", "")), etag=document.get("etag"),
                       size=document.get("size"), stored_size=document.get("stored_size"),
                       encoding=document.get("encoding"), expires_at=document.get("expires_at"),
                       namespace=document.get("namespace"))


# Raw entries


def read(namespace: str, key: str | bytes, *, max_stale: int | None = None, no_cache: bool = False,
         only_if_cached: bool = False, if_none_match: str | None = None, wait: float | None = None,
         lease: int | None = None, method: str = "GET") -> Call[Entry | EntryMiss | None]:
    """A GET or HEAD of an entry, with everything a caller may ask of it (``get``, ``head`` and
    ``get_or_lease`` are its public faces)."""
    directives = []
    if max_stale is not None:
        directives.append(f"max-stale={int(max_stale)}")
    if no_cache:
        directives.append("no-cache")
    if only_if_cached:
        directives.append("only-if-cached")
    headers = {"Accept-Encoding": "gzip"}
    if directives:
        headers["Cache-Control"] = ", ".join(directives)
    if if_none_match is not None:
        headers["If-None-Match"] = if_none_match
    params = {}
    if wait is not None:
        params["wait"] = _wait(wait)
    if lease is not None:
        params["lease"] = str(int(lease))

    def parse(status: int, response_headers: Mapping[str, str], body: bytes) -> Entry | EntryMiss | None:
        if status in (404, 504):
            if lease is None and wait is None:
                return None
            document = _json_body(body) if body else {}
            granted = _header_lease(response_headers.get("teamcache-lease"))
            pending = bool(document.get("pending")) if isinstance(document, dict) else False
            if granted is None and not pending:
                return None
            return EntryMiss(lease=granted, pending=pending,
                             retry_after=int(response_headers.get("retry-after", "0") or 0) or None)
        return Entry(body=b"" if status == 304 else body,
                     content_type=response_headers.get("content-type", "application/octet-stream"),
                     etag=response_headers.get("etag"), cache_status=response_headers.get("cache-status"),
                     age=int(response_headers.get("age", "0") or 0), headers=dict(response_headers),
                     not_modified=status == 304,
                     revalidate=_header_lease(response_headers.get("teamcache-lease")))

    return Call(method, entry_path(namespace, key), parse, frozenset({200, 304, 404, 504}), params=params, reads=True,
                headers=headers, extra_timeout=wait or 0, idempotent=lease is None, quick=not wait)


def _wait(wait: float) -> str:
    if not 0 <= wait <= 60:
        raise ValueError("wait must be from 0 to 60 seconds")
    return repr(float(wait))


def put(namespace: str, key: str | bytes, body: bytes | str, *, content_type: str | None = None,
        ttl: int | None = None, tags: Iterable[str] = (), create_only: bool = False, if_match: str | None = None,
        lease: Lease | str | None = None, stale_while_revalidate: int | None = None,
        content_encoding: str | None = None) -> Call[WriteResult]:
    """Stores ``body``; returns a ``WriteResult`` once it is committed."""
    data = body.encode() if isinstance(body, str) else bytes(body)
    headers = {"Content-Type": content_type or ("text/plain; charset=utf-8" if isinstance(body, str)
                                                 else "application/octet-stream")}
    tag_list = list(tags)
    if tag_list:
        headers["Cache-Tag"] = ", ".join(tag_list)
    if create_only:
        headers["If-None-Match"] = "*"
    if if_match is not None:
        headers["If-Match"] = if_match
    if lease is not None:
        headers["TeamCache-Lease"] = lease.id if isinstance(lease, Lease) else lease
    if stale_while_revalidate is not None:
        headers["Cache-Control"] = f"stale-while-revalidate={int(stale_while_revalidate)}"
    if content_encoding is not None:
        headers["Content-Encoding"] = content_encoding
    params = {"ttl": str(int(ttl))} if ttl is not None else {}
    return Call("PUT", entry_path(namespace, key), _write_result, frozenset({200, 201}), params=params,
                headers=headers, content=data, idempotent=not create_only and if_match is None)


def delete(namespace: str, key: str | bytes) -> Call[bool]:
    """True when an entry was deleted, False when there was none."""
    return Call("DELETE", entry_path(namespace, key), lambda status, _h, _b: status == 204, frozenset({204, 404}))


# Descriptors


def lookup(namespace: str, descriptor: Mapping[str, Any], *, max_stale: int | None = None, refresh: bool = False,
           lease: int | None = None, wait: float | None = None, if_none_match: str | None = None) -> Call[Lookup]:
    """A ``Lookup``: a hit with the stored answer, or a miss (with this caller's ``lease``,
    or ``pending``, when a lease was asked for). ``if_none_match``: the ETag of an answer held
    already; a hit on that version comes ``not_modified``, without the answer."""
    document = descriptor_members(descriptor)
    if if_none_match is not None:
        document["if_none_match"] = if_none_match
    if max_stale is not None:
        document["max_stale"] = int(max_stale)
    if refresh:
        document["refresh"] = True
    if lease is not None:
        document["lease"] = int(lease)
    if wait is not None:
        _wait(wait)
        document["wait"] = float(wait)
    expected_key = descriptor_key(descriptor)

    def parse(_status: int, _headers: Mapping[str, str], body: bytes) -> Lookup:
        answer = _json_body(body)
        # Checked, not trusted: what a hit carries is handed to the caller as its model's answer,
        # and a wrong type (a proxy or another service at the URL) would raise later, outside
        # the client, where nothing takes it for the cache's failure.
        response, metadata = _member(answer, "response", str), _member(answer, "metadata", dict)
        if answer.get("hit") is True and not answer.get("not_modified") and response is None:
            raise ValueError("a hit without a response")
        return Lookup(hit=bool(answer.get("hit")), key=_member(answer, "key", str) or expected_key,
                      response=response, metadata=metadata, age=_member(answer, "age", int),
                      stale=bool(answer.get("stale")), collapsed=bool(answer.get("collapsed")),
                      lease=_lease(answer.get("lease"), "id"), pending=bool(answer.get("pending")),
                      retry_after=_member(answer, "retry_after", int),
                      revalidate=_lease(answer.get("revalidate"), "lease"),
                      etag=answer.get("etag") if isinstance(answer.get("etag"), str) else None,
                      ttl=answer.get("ttl") if isinstance(answer.get("ttl"), int) else None,
                      stale_while_revalidate=int(answer.get("stale_while_revalidate") or 0),
                      not_modified=answer.get("not_modified") is True)

    call = _json_call("POST", namespace_path(namespace) + "/lookup", document, parse, {200},
                      extra_timeout=wait or 0, idempotent=lease is None)
    call.reads = True
    call.quick = not wait
    return call


def upsert(namespace: str, descriptor: Mapping[str, Any], response: str, *,
           metadata: Mapping[str, Any] | None = None, ttl: int | None = None, tags: Iterable[str] = (),
           lease: Lease | str | None = None, stale_while_revalidate: int | None = None) -> Call[WriteResult]:
    """Stores the model's answer to ``descriptor``; ``metadata`` may carry ``input_tokens`` and
    ``output_tokens`` (what a hit saves)."""
    document = descriptor_members(descriptor)
    document["response"] = response
    if metadata is not None:
        document["metadata"] = dict(metadata)
    if ttl is not None:
        document["ttl"] = int(ttl)
    tag_list = list(tags)
    if tag_list:
        document["tags"] = tag_list
    if lease is not None:
        document["lease"] = lease.id if isinstance(lease, Lease) else lease
    if stale_while_revalidate is not None:
        document["stale_while_revalidate"] = int(stale_while_revalidate)
    return _json_call("POST", namespace_path(namespace) + "/upsert", document, _write_result, {200, 201})


def release(namespace: str, key: str, lease: Lease | str) -> Call[bool]:
    """Gives a lease back (the call to fill it failed); False when it was unknown or done."""
    document = {"key": key, "lease": lease.id if isinstance(lease, Lease) else lease}
    return _json_call("POST", namespace_path(namespace) + "/release", document,
                      lambda status, _h, _b: status == 204, {204, 404})


# Evict, stats, settings, operations


def evict(namespace: str, **predicate: Any) -> Call[int]:
    """Evicts what matches every condition given (``tag=``, ``keys=``, ``model=``, ``version=``,
    ``created_before=``, ``accessed_before=``, ``older_than=``, ``idle_for=``, ``all=True``);
    returns how many entries went."""
    if not predicate:
        raise ValueError("an eviction needs at least one condition (all=True wipes the namespace)")
    return _json_call("POST", namespace_path(namespace) + "/evict", dict(predicate),
                      lambda _s, _h, body: _int(_json_body(body), "evicted"), {200})


def clear(namespace: str) -> Call[int]:
    """Evicts every entry of the namespace; returns how many went."""
    return evict(namespace, all=True)


def _document(_status: int, _headers: Mapping[str, str], body: bytes) -> Document:
    return _json_body(body)


def _stats_call(path: str, top: int | None) -> Call[Stats]:
    return Call("GET", path, lambda _s, _h, body: Stats.from_json(_json_body(body)), frozenset({200}),
                params={"top": str(int(top))} if top is not None else {})


def stats(namespace: str, top: int | None = None) -> Call[Stats]:
    """The namespace's ``Stats`` (``top``: how many most-hit entries, 20 unless given)."""
    return _stats_call(namespace_path(namespace) + "/stats", top)


def global_stats(top: int | None = None) -> Call[Stats]:
    """Every namespace's ``Stats`` together (admin on ``*``)."""
    return _stats_call("/v1/stats", top)


def _settings(_status: int, _headers: Mapping[str, str], body: bytes) -> NamespaceSettings:
    return NamespaceSettings.from_json(_json_body(body))


def settings(namespace: str) -> Call[NamespaceSettings]:
    return Call("GET", namespace_path(namespace) + "/settings", _settings, frozenset({200}))


def set_settings(namespace: str, *, default_ttl: int | None = None,
                 max_bytes: int | None = None) -> Call[NamespaceSettings]:
    """Sets both settings (None: back to the server's default); returns them as stored."""
    document = {"default_ttl": default_ttl, "max_bytes": max_bytes}
    return _json_call("PUT", namespace_path(namespace) + "/settings", document, _settings, {200})


def export_page(namespace: str, *, after: str | None = None, limit: int | None = None,
                since: str | None = None) -> Call[tuple[list[bytes], str | None]]:
    """One page of the namespace's dump lines (admin): ``(lines, next_cursor)``; pass the cursor
    as ``after`` for the next page, until it is None."""
    params = {name: str(value) for name, value in (("after", after), ("limit", limit), ("since", since))
              if value is not None}

    def parse(_status: int, headers: Mapping[str, str], body: bytes) -> tuple[list[bytes], str | None]:
        # httpx has already inflated a gzip answer.
        return [line for line in body.split(b"\n") if line.strip()], headers.get("teamcache-next-cursor")

    return Call("GET", namespace_path(namespace) + "/export", parse, frozenset({200}), params=params,
                headers={"Accept-Encoding": "gzip"})


def changes(namespace: str, *, since: str | int = 0, limit: int | None = None, wait: float | None = None,
            include_body: bool = False) -> Call[ChangePage]:
    """One ``ChangePage`` of the namespace's committed changes after ``since`` (read scope).
    Apply each change in order (``put``: the key's ``etag``, ``size``, ``expires_at``, and
    ``body_base64`` with ``include_body``; ``delete``: drop the key), then ask again from
    ``next``; ``wait`` holds an empty page for the next change. A cursor too old (or from another
    store) raises ``ProblemError`` with status 410: resync from an export, whose first page names
    the cursor to follow from."""
    params = {"since": str(since)}
    if limit is not None:
        params["limit"] = str(limit)
    if wait is not None:
        params["wait"] = _wait(wait)
    if include_body:
        params["include"] = "body"

    def parse(_status: int, _headers: Mapping[str, str], body: bytes) -> ChangePage:
        return ChangePage.from_json(_json_body(body))

    return Call("GET", namespace_path(namespace) + "/changes", parse, frozenset({200}), params=params,
                headers={"Accept-Encoding": "gzip"}, extra_timeout=wait or 0)


def import_lines(namespace: str, lines: Iterable[bytes | str], *, on_conflict: str = "skip") -> Call[ImportResult]:
    """Stores dump lines (an export's, or ``{"key": ..., "body": ...}`` of your own) into the
    namespace (admin), gzip-compressed on the way; the server's ``ImportResult``. Safe to send
    again (an identical entry is ``unchanged``). Keep a call to a few thousand lines; send more
    in parts."""
    if on_conflict not in ("skip", "replace", "newer"):
        raise ValueError("on_conflict must be skip, replace or newer")
    payload = b"\n".join(line.encode() if isinstance(line, str) else line for line in lines) + b"\n"
    return Call("POST", namespace_path(namespace) + "/import",
                lambda _s, _h, body: ImportResult.from_json(_json_body(body)), frozenset({200}),
                params={"on_conflict": on_conflict},
                headers={"Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"},
                content=gzip.compress(payload, compresslevel=6))


def health() -> Call[Document]:
    """The server's ``/healthz`` document (the process is alive)."""
    return Call("GET", "/healthz", _document, frozenset({200}))


def ready() -> Call[Document]:
    """The readiness document; raises ``ProblemError`` (503) when not ready."""
    return Call("GET", "/readyz", _document, frozenset({200}))


def metrics() -> Call[str]:
    """The Prometheus text ``/metrics`` serves (the ``metrics`` scope)."""
    return Call("GET", "/metrics", lambda _s, _h, body: body.decode(), frozenset({200}))


# The raw entry reads' public faces.


def get(namespace: str, key: str | bytes, *, max_stale: int | None = None, no_cache: bool = False,
        only_if_cached: bool = False, if_none_match: str | None = None,
        wait: float | None = None) -> Call[Entry | EntryMiss | None]:
    """The entry (``Entry``), or None on a miss. ``wait`` with ``if_none_match``: a watch (an
    ``EntryMiss`` marked ``pending`` when another caller's fill did not come in the wait)."""
    return read(namespace, key, max_stale=max_stale, no_cache=no_cache, only_if_cached=only_if_cached,
                if_none_match=if_none_match, wait=wait)


def get_or_lease(namespace: str, key: str | bytes, *, lease: int = 30, wait: float | None = None,
                 max_stale: int | None = None) -> Call[Entry | EntryMiss | None]:
    """The entry (``Entry``), or on a miss an ``EntryMiss`` carrying this caller's lease (fill
    it with ``put(lease=...)``), or ``pending`` when another caller holds it."""
    return read(namespace, key, lease=lease, wait=wait, max_stale=max_stale)


def head(namespace: str, key: str | bytes) -> Call[Entry | EntryMiss | None]:
    """The entry's headers (``Entry`` with an empty body), or None on a miss."""
    return read(namespace, key, method="HEAD")


# What a local tier asks (``LocalTier``): reported hits, and the entry browser's routes to warm
# it without counting a lookup.


def report_hits(namespace: str, counts: Mapping[tuple[str, str | None], int], *,
                reporter: str | None = None, seq: int | None = None) -> Call[Document]:
    """Reports hits a local tier answered, by (key, the ETag of the version it answered
    from): ``{"counted", "priced"}`` (at most 1000 keys a call). Numbered (``reporter``,
    ``seq``), a report sent again is counted once (``"replayed": true``)."""
    document: dict[str, Any] = {
        "hits": [{"key": key, "count": int(count), **({"etag": etag} if etag is not None else {})}
                 for (key, etag), count in counts.items()]}
    if reporter is not None and seq is not None:
        document.update(reporter=reporter, seq=seq)
    return _json_call("POST", namespace_path(namespace) + "/hits", document, _document, {200})


def entries_page(namespace: str, *, tag: str | None = None, after: str | None = None,
                 limit: int = 100) -> Call[Document]:
    """One page of the entry browser's listing (``entries`` and ``next``; no lookup counted)."""
    params = {name: value for name, value in (("tag", tag), ("after", after), ("limit", str(limit)))
              if value is not None}
    return Call("GET", namespace_path(namespace) + "/entries", _document, frozenset({200}), params=params)


def inspect_entry(namespace: str, key: str) -> Call[Document | None]:
    """One entry with its metadata and a body preview (no lookup counted); None when absent."""
    def parse(status: int, _headers: Mapping[str, str], body: bytes) -> Document | None:
        return _json_body(body) if status == 200 else None
    return Call("GET", namespace_path(namespace) + "/inspect/" + quote(key, safe=""), parse, frozenset({200, 404}))
