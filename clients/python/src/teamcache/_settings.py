"""What both clients share: where the service is (its URL, without a user and password),
who asks (the token, trimmed, and never sent when a header cannot carry it), how long and how
often; and how an answer or a failure is judged and explained."""

from __future__ import annotations

import contextlib
import contextvars
import os
import random
import re
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

import httpx

from . import _operations as op
from ._breaker import CircuitBreaker, logger
from ._positions import Positions
from .errors import CacheSkipped, ConfigurationError, TransportError

T = TypeVar("T")

#: Statuses worth another attempt: the server (or a proxy) is overloaded or rate limiting.
RETRYABLE = frozenset({429, 502, 503, 504})


def _unsendable(token: str | None) -> str | None:
    """Why ``token`` cannot go in a header (None: it can): a character outside printable
    ASCII. Says where, never what."""
    for index, char in enumerate(token or ""):
        if not "\x21" <= char <= "\x7e":
            return f"the token holds a character a header cannot carry (character {index + 1}): it is not sent"
    return None


#: The user and password of a URL: after its scheme (none: a URL written without one), up to
#: the last ``@`` before the path, query or fragment (so a password holding an ``@`` goes whole).
#: Anchored: an ``@`` in the path or query is not one.
_CREDENTIALS = re.compile(r"^((?:(?:[A-Za-z][A-Za-z0-9+.-]*:)?//)?)([^/?#\\]*)@")


def without_credentials(url: str) -> str:
    """``url`` without the user and password before its host: as the client uses it and as its
    messages name it."""
    return _CREDENTIALS.sub(r"\1", url, count=1)


def _holds_credentials(url: str) -> bool:
    match = _CREDENTIALS.match(url)
    return match is not None and match.group(2) != ""


#: Why a URL's user and password are dropped, said where a refusal is explained.
URL_CREDENTIALS_DROPPED = ("the URL's user and password are not sent: TeamCache takes a bearer token "
                           "(token= or TEAMCACHE_TOKEN)")


#: The URLs (without credentials) already warned of: a process that makes a client per request
#: would otherwise log the same warning with every one. Bounded: past it, each is warned again.
_warned_urls: set[str] = set()
_warned_lock = threading.Lock()
_WARNED_MAX = 256


def _first_warning(base_url: str) -> bool:
    """Whether the dropped credentials of ``base_url`` are to be warned of now: once a process."""
    with _warned_lock:
        if base_url in _warned_urls:
            return False
        if len(_warned_urls) < _WARNED_MAX:
            _warned_urls.add(base_url)
        return True


#: Set while a write is made on a caller's path, after the model call it stores (``cached``,
#: the transports, LangChain's ``update``): the caller is waiting for its answer, which it
#: already has. Such a write gets a short deadline (``fill_timeout``) and is never slept on
#: (no Retry-After, no backoff), so a cache that is slow to write (its primary stalled while
#: lookups still answer) costs a caller that at most, not the client's whole timeout.
#: None: not said; False: background work (a refresh nobody waits for, the local tier's own
#: threads), which keeps the client's timeout and retries even through the same code.
_callers_path: contextvars.ContextVar[bool | None] = contextvars.ContextVar("teamcache_callers_path", default=None)


@contextlib.contextmanager
def on_callers_path() -> Iterator[None]:
    """Marks the writes made inside as on a caller's path (see ``_callers_path``), unless they
    are made by background work."""
    token = _callers_path.set(True) if _callers_path.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _callers_path.reset(token)


@contextlib.contextmanager
def in_background() -> Iterator[None]:
    """Marks the work inside as nobody's wait: its writes keep the client's timeout and retries."""
    token = _callers_path.set(False)
    try:
        yield
    finally:
        _callers_path.reset(token)


def waited_on() -> bool:
    """Whether a caller is waiting on the call being made (``on_callers_path``)."""
    return _callers_path.get() is True


class _Settings:
    """What both clients share: where, who, how long, how often."""

    def __init__(self, base_url: str | None, token: str | None, timeout: float, max_retries: int,
                 backoff: float, max_backoff: float, read_your_writes: bool = False, *,
                 lookup_timeout: float = 0.5, breaker: CircuitBreaker | None = None, strict: bool = False):
        url = (base_url or os.environ.get("TEAMCACHE_URL") or "http://127.0.0.1:8080").strip().rstrip("/")
        # A user and password in the URL are never used: httpx would send them as Basic auth in
        # place of the bearer token (every call refused), and log the URL, password and all, on
        # each request. They are dropped, and said so (a warning the first time, and with any 401).
        self.base_url = without_credentials(url)
        #: Why the URL's user and password are not sent (None: it had none).
        self.url_problem = URL_CREDENTIALS_DROPPED if _holds_credentials(url) else None
        if self.url_problem is not None and _first_warning(self.base_url):
            logger.warning("TeamCache at %s: %s", self.base_url, self.url_problem)
        #: A lookup that does not wait gets this long in all (a hit takes milliseconds).
        self.lookup_timeout = lookup_timeout
        #: A write on a caller's path, after its paid call, gets this long (``_callers_path``).
        self.fill_timeout = max(1.0, 2 * lookup_timeout)
        #: None: no breaker (every call is tried, as a plain API client would).
        self.breaker = breaker
        #: Raise ``ConfigurationError`` for a refused token or scope instead of skipping the cache.
        self.strict = strict
        #: The highest write position seen, sent back on reads (see ``_positions``); None: off.
        self.positions = Positions() if read_your_writes else None
        # A token read from a file or an environment file often ends in a newline; no token
        # holds whitespace, so it is trimmed rather than sent (and refused) as it came.
        raw = token if token is not None else os.environ.get("TEAMCACHE_TOKEN")
        self.token = raw.strip() if raw is not None else None
        #: Why the token is not sent (None: it is). Sent, a character no header can carry makes
        #: h11 refuse the request and quote the whole header in its error, and in every
        #: traceback that error reaches.
        self.token_problem = _unsendable(self.token)
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff

    def unreachable(self, error: httpx.TransportError) -> TransportError:
        """The error a caller gets when the service could not be reached. Of httpx's errors,
        only a request refused before it was sent quotes the request (its headers: a caller's
        own client with a header no request can carry); it is named by its class alone. This
        client's own token never gets there: one a header cannot carry is not sent
        (`token_problem`)."""
        detail = f"{type(error).__name__} (the request could not be sent as built)" \
            if isinstance(error, httpx.LocalProtocolError) else repr(error)
        return TransportError(f"TeamCache unreachable at {self.base_url}: {detail}")

    @staticmethod
    def cause(error: httpx.TransportError) -> BaseException | None:
        """What a TransportError keeps as its cause: none for a request refused before it was
        sent, whose message (and every traceback showing it) quotes the request's headers."""
        return None if isinstance(error, httpx.LocalProtocolError) else error

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": "teamcache-python"}
        if self.token and self.token_problem is None:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def pause(self, attempt: int, retry_after: str | None) -> float:
        """Seconds before attempt `attempt` + 1: `Retry-After` when given, else exponential
        backoff with jitter; capped."""
        if retry_after and retry_after.strip().isdigit():
            return min(self.max_backoff, float(retry_after.strip()))
        growth: float = 2.0 ** (attempt - 1)
        return min(self.max_backoff, self.backoff * growth * random.uniform(0.5, 1.5))

    @staticmethod
    def retries(call: op.Call[Any], status: int) -> bool:
        """Whether an answer with ``status`` is worth another attempt. A 429 always (refused
        before anything was done); 502, 503 and 504 only for an idempotent call: a create-only
        or ``If-Match`` write, or a lookup that may be granted a lease, sent again could meet
        its own effect (412 for its own write, "pending" for its own lease)."""
        if status in call.accept or status not in RETRYABLE:
            return False
        # A quick lookup is on a caller's path: it is never slept on (a 429's Retry-After, or
        # backoff); the caller is better off calling the upstream now. So is a write after a
        # paid call: the caller has its answer.
        if call.quick or waited_on():
            return False
        return status == 429 or call.idempotent

    @staticmethod
    def may_retry(call: op.Call[Any], error: httpx.TransportError) -> bool:
        """A call that is not idempotent is retried only if it never reached the server; a
        timeout never is (each try would cost its caller the whole deadline again)."""
        if isinstance(error, httpx.TimeoutException) or waited_on():
            return False
        return call.idempotent or isinstance(error, httpx.ConnectError)

    def timeout_for(self, call: op.Call[Any]) -> httpx.Timeout:
        if call.quick:
            return httpx.Timeout(self.lookup_timeout)
        if waited_on():
            return httpx.Timeout(self.fill_timeout, connect=self.lookup_timeout)
        if call.reads and call.extra_timeout:
            # A lookup that waits: its wait, and the short deadline for the answer after it.
            return httpx.Timeout(call.extra_timeout + self.lookup_timeout, connect=self.lookup_timeout)
        return httpx.Timeout(self.timeout + call.extra_timeout, connect=self.timeout)

    def admit(self, call: op.Call[Any]) -> None:
        """Raises ``CacheSkipped`` while the breaker is open (no request is made)."""
        if self.breaker is not None and not self.breaker.allow():
            health = self.breaker.health
            raise CacheSkipped(f"TeamCache skipped at {self.base_url}: the circuit is open after "
                               f"{health.consecutive_failures} failure(s) ({health.last_error})",
                               reason="misconfigured" if health.misconfiguration else "breaker-open")

    def transport_failed(self, error: httpx.TransportError) -> None:
        if self.breaker is not None:
            kind = "timed out" if isinstance(error, httpx.TimeoutException) else "unreachable"
            # Our own connection pool being full (a burst's waiters) says nothing of TeamCache.
            at_once = isinstance(error, httpx.TimeoutException) and not isinstance(error, httpx.PoolTimeout)
            self.breaker.failed(f"{kind}: {type(error).__name__}", at_once=at_once)

    def abandoned(self) -> None:
        if self.breaker is not None:
            self.breaker.abandon_probe()

    @property
    def breaker_closed(self) -> bool:
        return self.breaker is None or self.breaker.health.state == "closed"

    def judge(self, call: op.Call[Any], response: httpx.Response) -> None:
        """Tells the breaker what an answer says of TeamCache's health and configuration."""
        status = response.status_code
        if status == 429:
            if self.breaker is not None:
                self.breaker.failed("answered 429 (rate limited)")
            return
        if status in call.accept or status < 400:
            if self.breaker is not None:
                self.breaker.succeeded()
            return
        if status in (401, 403):
            problem = op.problem(status, response.content)
            reason = "unauthorized" if status == 401 else "forbidden"
            what = self.refusal() if status == 401 \
                else f"the token lacks a scope: {problem.detail or 'forbidden'}"
            message = f"{what} ({self.base_url}{call.path}: {status})"
            if self.breaker is not None:
                self.breaker.misconfigured(message, stop=status == 401)
            if self.strict:
                raise ConfigurationError(message, reason=reason, status=status)
            return
        if status >= 500 and self.breaker is not None:
            self.breaker.failed(f"answered {status}")
        elif self.breaker is not None:
            self.breaker.succeeded()

    def refusal(self) -> str:
        """Why a 401 came: the token not sent, missing or refused; and the URL's dropped user
        and password, when it had them (a proxy in front that wanted them also answers 401)."""
        refused = "the token is refused (unknown, expired or revoked)"
        what = self.token_problem or ("the token is missing" if not self.token else refused)
        return f"{what}; {self.url_problem}" if self.url_problem else what

    def request_headers(self, call: op.Call[Any]) -> dict[str, str]:
        if self.positions is None or not call.reads:
            return call.headers
        return {**call.headers, **self.positions.headers()}

    def outcome(self, call: op.Call[T], response: httpx.Response) -> T:
        self.judge(call, response)
        if self.positions is not None:
            self.positions.note(response.headers)
        if response.status_code in call.accept:
            try:
                return call.parse(response.status_code, response.headers, response.content)
            except Exception as error:  # noqa: BLE001 - not TeamCache's answer (a wrong base URL?)
                # At once: the status was counted a success a moment ago, so a run of these would
                # never add up to the threshold, and every call would pay another round trip.
                if self.breaker is not None:
                    self.breaker.failed(f"malformed answer: {type(error).__name__}", at_once=True)
                raise TransportError(f"TeamCache at {self.base_url} gave a malformed answer to {call.path}") from error
        raise op.problem(response.status_code, response.content)
