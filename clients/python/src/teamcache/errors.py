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
