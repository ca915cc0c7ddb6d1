"""Reading one's own writes through a read standby (the server's ``TEAMCACHE_READ_DATABASE_URL``).

While a standby is configured, every write answers ``TeamCache-Position``: the primary's WAL
position after the commit. A client that sends the highest position it has seen back on its
reads, as ``TeamCache-Min-Position``, is answered only by a database that has replayed that
far, so it sees its own writes whichever replica it asks. Such reads skip the server's
in-memory near-cache, so this is opt-in (``read_your_writes=True``)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

POSITION_HEADER = "TeamCache-Position"
MIN_POSITION_HEADER = "TeamCache-Min-Position"
_HEX = frozenset("0123456789abcdefABCDEF")


def parse(text: str | None) -> int | None:
    """PostgreSQL's ``16/B374D848`` as a number; None for anything else."""
    if not text:
        return None
    high, slash, low = text.strip().partition("/")
    if not slash or not all(0 < len(part) <= 8 and set(part) <= _HEX for part in (high, low)):
        return None
    return int(high, 16) << 32 | int(low, 16)


class Positions:
    """The highest position this client has been answered with (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = -1
        self._text: str | None = None

    @property
    def last(self) -> str | None:
        with self._lock:
            return self._text

    def note(self, headers: Mapping[str, str]) -> None:
        text = headers.get(POSITION_HEADER)
        value = parse(text)
        if value is None:
            return
        with self._lock:
            if value > self._value:
                self._value, self._text = value, text.strip() if text else None

    def headers(self) -> dict[str, str]:
        with self._lock:
            return {MIN_POSITION_HEADER: self._text} if self._text else {}
