"""What a failed call raises."""

from __future__ import annotations

from typing import Any


class TeamCacheError(Exception):
    """Any failure of a call to TeamCache."""


class ProblemError(TeamCacheError):
    """The server answered with an RFC 9457 problem (``application/problem+json``)."""

    def __init__(self, status: int, problem: dict[str, Any] | None = None):
        self.status = status
        self.problem: dict[str, Any] = problem or {}
        self.title: str = str(self.problem.get("title") or f"HTTP {status}")
        self.detail: str = str(self.problem.get("detail") or "")
        self.type: str = str(self.problem.get("type") or "about:blank")
        super().__init__(f"{status} {self.title}: {self.detail}" if self.detail else f"{status} {self.title}")


class TransportError(TeamCacheError):
    """TeamCache could not be reached (connection refused or lost, timeout), after retries."""


class CacheSkipped(TransportError):
    """TeamCache was not asked: the client's circuit breaker is open after recent failures
    (it probes again after its cool-down). Every cache path treats it as a miss."""

    def __init__(self, message: str, reason: str = "breaker-open"):
        self.reason = reason
        super().__init__(message)


class ConfigurationError(TeamCacheError):
    """TeamCache refused the client's token or scope (raised only with ``strict=True``; else the
    cache is skipped and the problem logged once). ``reason``: ``unauthorized`` or ``forbidden``."""

    def __init__(self, message: str, reason: str, status: int):
        self.reason = reason
        self.status = status
        super().__init__(message)
