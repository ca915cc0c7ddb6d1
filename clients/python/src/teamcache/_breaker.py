"""The circuit breaker every caller of one client shares, and the health it reports.

A cache must never make a call slower, costlier or less reliable than no cache. A TeamCache
that is down, frozen or refuses the token would otherwise cost every call its deadline (and
its retries); the breaker turns a run of failures into a cool-down during which the cache is
skipped at no cost (``CacheSkipped``, a ``TransportError``: every cache path treats it as a
miss and calls the upstream), then lets one call through as a probe, and closes again when
TeamCache answers it.

- A timeout opens it at once: each one cost its caller the whole deadline.
- Other failures (connection refused, 5xx) open it after ``failure_threshold`` in a row.
- A refused token (401) opens it for ``misconfigured_cooldown``: every call would be refused.
- While it is open, ``allow()`` is False except for the one probe per cool-down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger("teamcache")


@dataclass(frozen=True)
class CacheHealth:
    """A snapshot of a client's cache health (``TeamCache.cache_health``, ``transport.health``)."""

    #: ``closed`` (the cache is used), ``open`` (skipped until the next probe), ``half_open``
    #: (one probe in flight).
    state: str
    #: Calls to TeamCache that failed (timeouts, refused connections, 5xx, refused tokens).
    failures: int
    #: Failures since the last success.
    consecutive_failures: int
    #: Calls that skipped the cache because the breaker was open.
    skipped: int
    #: The last failure, as a sentence (never a token).
    last_error: str | None
    #: What is misconfigured (a refused token, a missing scope), or None.
    misconfiguration: str | None


class CircuitBreaker:
    """Thread-safe; shared by the sync and async paths of one client."""

    def __init__(self, *, failure_threshold: int = 3, cooldown: float = 5.0, misconfigured_cooldown: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failure_threshold = max(1, failure_threshold)
        self.cooldown = cooldown
        self.misconfigured_cooldown = misconfigured_cooldown
        self._clock = clock
        self._lock = threading.Lock()
        self._state = "closed"
        self._open_until = 0.0
        self._failures = 0
        self._consecutive = 0
        self._skipped = 0
        self._last_error: str | None = None
        self._misconfiguration: str | None = None
        self._warned: set[str] = set()

    def allow(self) -> bool:
        """Whether a call may go to TeamCache now (counted as skipped when not). A probe that
        never reported (its caller was cancelled) is replaced after another cool-down."""
        with self._lock:
            if self._state == "closed":
                return True
            if self._clock() >= self._open_until:
                self._state = "half_open"  # this caller is the probe
                self._open_until = self._clock() + self.cooldown
                return True
            self._skipped += 1
            return False

    def abandon_probe(self) -> None:
        """The call ended without a verdict (cancelled, interrupted): the next call probes."""
        with self._lock:
            if self._state == "half_open":
                self._state, self._open_until = "open", self._clock()

    def succeeded(self) -> None:
        with self._lock:
            recovered = self._state != "closed"
            self._state, self._consecutive, self._misconfiguration = "closed", 0, None
            self._warned.clear()
        if recovered:
            logger.info("TeamCache answers again: the cache is used again")

    def failed(self, error: str, *, at_once: bool = False) -> None:
        """A failed call: opens the breaker after a run of them, or `at_once` (a timeout)."""
        with self._lock:
            self._failures += 1
            self._consecutive += 1
            self._last_error = error
            opening = self._state == "half_open" or at_once or self._consecutive >= self.failure_threshold
            if opening:
                self._open(self.cooldown)
            first = "unavailable" not in self._warned
            self._warned.add("unavailable")
        if first:
            logger.warning("TeamCache unavailable (%s); calls go on without the cache%s", error,
                           f", skipping it for {self.cooldown:g} s at a time" if opening else "")

    def misconfigured(self, message: str, *, stop: bool) -> None:
        """The token is refused or lacks a scope: said once, clearly. `stop`: every call would
        be refused (401), so the cache is skipped for the longer cool-down."""
        with self._lock:
            self._failures += 1
            self._last_error = self._misconfiguration = message
            if stop:
                self._open(self.misconfigured_cooldown)
            else:
                # The server answered (a scope is missing for this call): it is up.
                self._state, self._consecutive = "closed", 0
            first = message not in self._warned
            self._warned.add(message)
        if first:
            logger.error("TeamCache is misconfigured: %s. Calls go on without the cache.", message)

    def _open(self, seconds: float) -> None:
        self._state = "open"
        self._open_until = self._clock() + seconds

    @property
    def health(self) -> CacheHealth:
        with self._lock:
            return CacheHealth(state=self._state, failures=self._failures, consecutive_failures=self._consecutive,
                               skipped=self._skipped, last_error=self._last_error,
                               misconfiguration=self._misconfiguration)
