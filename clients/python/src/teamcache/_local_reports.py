"""The local tier's hit reports: local hits are counted, numbered into reports within the
service's bounds, and sent (``POST …/hits``) every ``report_interval``; a report is sent
again as it was (same number) until answered, so a lost answer never counts twice."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._local_outbox import later
from .errors import ProblemError, TeamCacheError, TransportError

if TYPE_CHECKING:
    from ._client import TeamCache

logger = logging.getLogger("teamcache.local")

#: Keys of reported hits held while the service cannot take them.
_PENDING_HIT_KEYS = 10_000
#: The service's bounds on one hit report.
_MAX_REPORTED = 1_000_000


@dataclass(frozen=True)
class _Report:
    """Local hits numbered for one report: ``seq`` is kept when it is sent again."""
    namespace: str
    seq: int
    counts: dict[tuple[str, str | None], int]


class HitReporting:
    """``LocalTier``'s hit reports (a mixin: the state is the tier's, made in its ``__init__``)."""

    _client: TeamCache | None
    _lock: threading.Lock
    counts: dict[str, int]
    #: Local hits not reported yet, by namespace, then (key, ETag answered from).
    _hits: dict[str, dict[tuple[str, str | None], int]]
    _reporter: str
    _seq: int
    _unsent: deque[_Report]
    _reporting: threading.Lock
    _numbered: bool

    def _report(self) -> None:
        # One reporter at a time (the background, ``flush`` and ``close``): numbers go out in order.
        with self._reporting:
            self._number_pending()
            client = self._client
            failed: set[str] = set()
            for report in list(self._unsent):
                if report.namespace in failed:
                    continue  # its earlier report waits: a later number would overtake it
                try:
                    if client is None:
                        raise TransportError("no client")
                    self._send_report(client, report)
                    with self._lock:
                        self.counts["reported"] += sum(report.counts.values())
                except ProblemError as error:
                    if later(error.status):
                        failed.add(report.namespace)
                        continue
                    logger.warning("local hits of %s refused (%s): not reported", report.namespace, error.status)
                    with self._lock:
                        self.counts["unreported"] += sum(report.counts.values())
                except TeamCacheError:
                    failed.add(report.namespace)
                    continue
                self._unsent.remove(report)

    def _send_report(self, client: TeamCache, report: _Report) -> None:
        if self._numbered:
            try:
                client.report_hits(report.namespace, report.counts, reporter=self._reporter, seq=report.seq)
                return
            except ProblemError as error:
                if error.status != 422:
                    raise
                # A service from before numbered reports refuses the members: it is sent
                # unnumbered from now on (as before, a lost answer may then count twice).
                logger.warning("the service does not take numbered hit reports: reporting unnumbered")
                self._numbered = False
        client.report_hits(report.namespace, report.counts)

    def _number_pending(self) -> None:
        """Turns the hits counted since the last round into numbered reports (within one
        report's bounds each), dropping what exceeds the tier's bound on waiting keys."""
        with self._lock:
            taken, self._hits = self._hits, {}
        waiting = sum(len(report.counts) for report in self._unsent)
        for namespace, counts in taken.items():
            items = [(key, min(count, _MAX_REPORTED)) for key, count in counts.items()]
            for start, end in _chunks([count for _, count in items]):
                chunk = dict(items[start:end])
                if waiting + len(chunk) > _PENDING_HIT_KEYS:
                    with self._lock:
                        self.counts["unreported"] += sum(chunk.values())
                    continue
                self._seq += 1
                self._unsent.append(_Report(namespace, self._seq, chunk))
                waiting += len(chunk)

    def _last_report(self) -> None:
        with contextlib.suppress(TeamCacheError):
            self._report()

    def _restore_hits(self, namespace: str, counts: Mapping[tuple[str, str | None], int]) -> None:
        held = self._hits.setdefault(namespace, {})
        for key, count in counts.items():
            if key in held or sum(len(keys) for keys in self._hits.values()) < _PENDING_HIT_KEYS:
                held[key] = held.get(key, 0) + count
            else:
                self.counts["unreported"] += count


def _chunks(counts: list[int]) -> list[tuple[int, int]]:
    """Ranges of ``counts`` each within one report's bounds: 1000 keys, a million hits."""
    ranges, start, total = [], 0, 0
    for index, count in enumerate(counts):
        if index - start == 1000 or total + count > _MAX_REPORTED:
            ranges.append((start, index))
            start, total = index, 0
        total += count
    if start < len(counts):
        ranges.append((start, len(counts)))
    return ranges
