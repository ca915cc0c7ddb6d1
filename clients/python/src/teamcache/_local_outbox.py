"""The local tier's outbox: writes made while the service could not be reached wait (in the
tier's file when it has one) and are sent when it answers again; the last write wins, and a
write that met a version it had not seen is reported, never dropped silently."""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from ._local_store import Copies, Queued, Record, instant, window
from .errors import ProblemError
from .models import Entry, WriteResult

if TYPE_CHECKING:
    from ._client import TeamCache

logger = logging.getLogger("teamcache.local")

#: Answers that say "later", not "never": a queued write waits for the next round.
_RETRIED_STATUSES = frozenset({401, 403, 408, 425, 429})


@dataclass(frozen=True)
class OutboxConflict:
    """A queued write that met a version of its key it had not seen, or that the service
    refused. ``outcome``: ``overwrote`` (ours was later: sent, replacing theirs),
    ``superseded`` (theirs was later: ours was not sent) or ``refused (STATUS)`` (a 4xx that
    sending again cannot mend: not sent)."""

    namespace: str
    key: str
    outcome: str
    written_at: float


class OutboxSending:
    """``LocalTier``'s outbox sender (a mixin: the state is the tier's, made in its ``__init__``)."""

    _client: TeamCache | None
    _stop: threading.Event
    _lock: threading.Lock
    _sending: threading.Lock
    _copies: Copies
    _outbox: deque[Queued]
    counts: dict[str, int]
    conflicts: deque[OutboxConflict]
    on_conflict: Callable[[OutboxConflict], None] | None

    if TYPE_CHECKING:
        def wrote(self, namespace: str, key: str, record: Record) -> None: ...

    def _send_outbox(self) -> None:
        # One sender at a time (the background and ``flush``): two would send the same write.
        with self._sending:
            client = self._client
            while client is not None and not self._stop.is_set():
                with self._lock:
                    if not self._outbox:
                        return
                    item = self._outbox[0]
                try:
                    record = _send(client, item, self._conflict)
                except ProblemError as error:
                    if later(error.status):
                        return  # overloaded, rate limited or refusing the token: sent again later
                    logger.warning("a write queued offline to %s was refused (%s %s): dropped", item.namespace,
                                   error.status, error.title)
                    self._conflict(item, f"refused ({error.status})")
                    record = None
                with self._lock:
                    if self._outbox and self._outbox[0] is item:
                        self._outbox.popleft()
                    self._copies.unqueue(item)
                    self.counts["sent"] += 1
                    if record is None:
                        self._copies.drop(item.namespace, item.key)
                if record is not None:
                    self.wrote(item.namespace, item.key, record)

    def _conflict(self, item: Queued, outcome: str) -> None:
        conflict = OutboxConflict(item.namespace, item.key, outcome, item.written_at)
        self.conflicts.append(conflict)
        logger.warning("a write queued offline to %s met a version it had not seen: %s", item.namespace, outcome)
        if self.on_conflict is not None:
            try:
                self.on_conflict(conflict)
            except Exception:  # noqa: BLE001 - the caller's hook must not stop the outbox
                logger.exception("on_conflict raised")


def later(status: int) -> bool:
    """An answer that says "later", not "never": the write or report waits for the next round."""
    return status in _RETRIED_STATUSES or status >= 500


def _send(client: TeamCache, item: Queued, conflict: Callable[[Queued, str], None]) -> Record | None:
    """Sends one queued write: as it was made when the key still holds the version it was
    made over; otherwise the later write wins. The copy to keep, or None (ours lost, or the
    service refused it: dropped, logged)."""
    payload = dict(item.payload)
    if item.kind == "put":
        return _send_put(client, item, payload, conflict)
    return _send_upsert(client, item, payload, conflict)


def _send_put(client: TeamCache, item: Queued, payload: dict[str, Any],
              conflict: Callable[[Queued, str], None]) -> Record | None:
    body = payload.pop("body").encode("latin-1")
    try:
        if item.base_etag is None:
            result = client.put(item.namespace, item.key, body, create_only=True, **payload)
        else:
            result = client.put(item.namespace, item.key, body, if_match=item.base_etag, **payload)
    except ProblemError as error:
        if error.status != 412:
            raise
        head = client.head(item.namespace, item.key)
        theirs = _modified(head.headers.get("last-modified")) if isinstance(head, Entry) else None
        if theirs is not None and theirs > item.written_at:
            conflict(item, "superseded")
            return None
        conflict(item, "overwrote")
        result = client.put(item.namespace, item.key, body, **payload)
    return _written(result, "raw", body, payload.get("content_type") or "application/octet-stream", None,
                    payload.get("stale_while_revalidate"))


def _send_upsert(client: TeamCache, item: Queued, payload: dict[str, Any],
                 conflict: Callable[[Queued, str], None]) -> Record | None:
    descriptor, response = payload.pop("descriptor"), payload.pop("response")
    current = client.lookup(item.namespace, descriptor, max_stale=2**31 - 1)
    if current.hit and current.etag != item.base_etag:
        theirs = time.time() - (current.age or 0)
        if theirs > item.written_at:
            conflict(item, "superseded")
            return None
        conflict(item, "overwrote")
    result = client.upsert(item.namespace, descriptor, response, **payload)
    return _written(result, "lookup", response.encode(), "text/plain", payload.get("metadata"),
                    payload.get("stale_while_revalidate"))


def _modified(text: str | None) -> float | None:
    try:
        return parsedate_to_datetime(text).timestamp() if text else None
    except (TypeError, ValueError):
        return None


def _written(result: WriteResult, kind: str, body: bytes, content_type: str,
             metadata: dict[str, Any] | None, swr: Any = None) -> Record | None:
    """The copy of a committed write (None when its expiry is not known), with the write's
    stale-while-revalidate window (``swr``: the caller's, which the service took as it is or
    refused; none given: 0), as Swift's tier keeps it."""
    expires = instant(result.expires_at)
    if expires is None or result.etag is None:
        return None
    now = time.time()
    return Record(kind=kind, etag=result.etag, body=body, content_type=content_type, metadata=copy.deepcopy(metadata),
                  expires_at=expires, updated_at=now, swr=window(swr))
