"""A deadline on finding the service's address, for both clients.

httpx's synchronous transport connects with ``socket.create_connection``, whose name lookup
(``getaddrinfo``) has no time limit: with the resolver unreachable, each new connection to the
cache waited out the system's own retries (5 s and more an attempt in ``resolv.conf``'s
defaults) before the connect timeout even began, on the caller's thread. A cache must never
make a call slower than no cache, so the lookup runs on a thread of its own here, and the
caller waits for it no longer than its connect timeout; past that the connection fails as a
connect timeout does (and the call fails open). The lookup and the connects that follow share
that one deadline.

One lookup per name at a time: callers asking for a name being looked up wait for that
lookup, so a hung resolver holds one thread per name, not one per call; a lookup older than
``stale_after`` is not waited for (a resolver that never returns must not keep the service
unreachable after names resolve again), though with two of a name's lookups still running
the next waits longer (``max_unfinished``), so such a resolver cannot take a thread every
``stale_after`` for as long as it hangs. An answer is kept ``keep_answers`` seconds: a
resolver slower than the connect timeout still serves the next call (the breaker's probe)
with the answer that came too late for the last one, instead of timing out each time; a
new connection after that asks again, so an address that moved is followed. A forked child
starts with no lookups (its parent's threads are not in it). The addresses are tried in turn,
each but the last for 250 ms at most (``FIRST_ATTEMPTS``), the one that last connected first.

The async client waits for the same lookups without holding a thread. httpx's own async
lookup (asyncio's ``loop.getaddrinfo``) is bounded by the connect timeout, but it runs on the
event loop's default executor, and a timed-out lookup keeps its worker until the resolver
returns: a handful of calls to a cache behind a hung resolver filled the application's
executor (``asyncio.to_thread``, its other lookups) for as long as the resolver hung.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import threading
import time
import typing

import httpcore
import httpx

#: What httpcore reads to choose its backend; without it, asyncio is assumed.
_sniffio: typing.Any
try:
    import sniffio as _sniffio
except ImportError:
    _sniffio = None

#: httpcore's backend interfaces (httpcore 0.17 and later); without them nothing is installed.
_Backend: typing.Any = getattr(httpcore, "NetworkBackend", None)
_AsyncBackend: typing.Any = getattr(httpcore, "AsyncNetworkBackend", None)


class _Lookup:
    """One name's lookup: its addresses, or the error it ended with, once ``done``."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.done = threading.Event()
        self.finished = 0.0
        self.addresses: list[str] = []
        self.error: BaseException | None = None
        #: Called once it is done (async waiters); None once it is, under the resolver's lock.
        self.wakers: set[typing.Callable[[], None]] | None = set()


class Resolver:
    """Looks names up on threads of their own, one lookup per name and port at a time."""

    stale_after = 30.0
    keep_answers = 15.0
    #: Lookups of one name left running before the next waits longer: with that many still
    #: running, a new one starts only once the newest is ``stale_after`` times 2, 4, 8… old, so
    #: a resolver that does not return takes threads at a slowing pace, not one every
    #: ``stale_after`` for as long as it hangs (and a name still recovers when it answers again).
    max_unfinished = 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lookups: dict[tuple[str, int], _Lookup] = {}
        self._unfinished: dict[tuple[str, int], set[_Lookup]] = {}
        #: The address each name last connected by, tried first (see ``FIRST_ATTEMPTS``).
        self._connected: dict[tuple[str, int], str] = {}

    def forget(self) -> None:
        """Drops every lookup (a forked child: the threads that would finish them are not there)."""
        self._lock = threading.Lock()
        self._lookups = {}
        self._unfinished = {}
        self._connected = {}

    def connected(self, host: str, port: int, address: str) -> None:
        """Notes the address a connection to ``host`` was made by: the next ones try it first."""
        with self._lock:
            self._connected[(host, port)] = address

    def addresses(self, host: str, port: int, deadline: float | None) -> list[str]:
        """The addresses ``host`` names, waiting until ``deadline`` (monotonic; None: no limit)."""
        if _is_address(host):
            return [host]  # an address already: nothing to look up
        lookup = self._started((host, port))
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not lookup.done.wait(wait):
            raise _timed_out()
        return self._ordered((host, port), _answer(lookup))

    async def addresses_async(self, host: str, port: int, deadline: float | None) -> list[str]:
        """``addresses`` for a caller on an asyncio loop: it waits on the loop, not on a thread."""
        if _is_address(host):
            return [host]
        lookup = self._started((host, port))
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def wake() -> None:  # on the lookup's thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_settle, done, True)

        if self._on_done(lookup, wake):
            # Not asyncio.wait_for: before Python 3.12 it can return a result that lands in the
            # same pass as the caller's cancellation, and the cancellation is lost.
            expiry = None if deadline is None else \
                loop.call_later(max(0.0, deadline - time.monotonic()), _settle, done, False)
            try:
                answered = await done
            finally:
                if expiry is not None:
                    expiry.cancel()
                self._forget_waker(lookup, wake)
            if not answered:
                raise _timed_out()
        return self._ordered((host, port), _answer(lookup))

    def _ordered(self, key: tuple[str, int], addresses: list[str]) -> list[str]:
        """The resolver's order, with the address the name last connected by first."""
        with self._lock:
            preferred = self._connected.get(key)
        if preferred is None or preferred not in addresses or addresses[0] == preferred:
            return addresses
        return [preferred, *(address for address in addresses if address != preferred)]

    def _started(self, key: tuple[str, int]) -> _Lookup:
        """The lookup of ``key`` to wait for, its thread started if it is new."""
        lookup, start = self._lookup(key)
        if start:
            try:
                threading.Thread(target=self._look_up, args=(key, lookup), name="teamcache-resolve",
                                 daemon=True).start()
            except BaseException as error:  # noqa: BLE001 - no thread (a limit reached): the lookup failed
                self._finish(key, lookup, error=error)
        return lookup

    def _on_done(self, lookup: _Lookup, wake: typing.Callable[[], None]) -> bool:
        """Has ``wake`` called when ``lookup`` is done; False if it is done already."""
        with self._lock:
            if lookup.wakers is None:
                return False
            lookup.wakers.add(wake)
            return True

    def _forget_waker(self, lookup: _Lookup, wake: typing.Callable[[], None]) -> None:
        # A lookup that never returns must not keep every caller that gave up on it.
        with self._lock:
            if lookup.wakers is not None:
                lookup.wakers.discard(wake)

    def _lookup(self, key: tuple[str, int]) -> tuple[_Lookup, bool]:
        """The lookup to wait for, and whether it is new (its thread to be started, outside the
        lock). Past ``max_unfinished`` still running, the newest of them until it is old enough."""
        now = time.monotonic()
        with self._lock:
            lookup = self._lookups.get(key)
            if lookup is not None:
                fresh_answer = lookup.done.is_set() and lookup.error is None \
                    and now - lookup.finished <= self.keep_answers
                in_flight = not lookup.done.is_set() and now - lookup.started <= self.stale_after
                if fresh_answer or in_flight:
                    return lookup, False
            running = self._unfinished.setdefault(key, set())
            if len(running) >= self.max_unfinished:
                newest = max(running, key=lambda unfinished: unfinished.started)
                patience = self.stale_after * 2 ** (len(running) - self.max_unfinished + 1)
                if now - newest.started <= patience:
                    return newest, False  # waited for (each caller within its deadline)
            running.add(lookup := _Lookup())
            self._lookups[key] = lookup
            return lookup, True

    def _look_up(self, key: tuple[str, int], lookup: _Lookup) -> None:
        addresses: list[str] | None = None
        error: BaseException | None = None
        try:
            addresses = [_address(info[4]) for info in socket.getaddrinfo(key[0], key[1], type=socket.SOCK_STREAM)]
        except BaseException as failure:  # noqa: BLE001 - whatever it was, the callers are told
            error = failure
        self._finish(key, lookup, addresses=addresses, error=error)

    def _finish(self, key: tuple[str, int], lookup: _Lookup, addresses: list[str] | None = None,
                error: BaseException | None = None) -> None:
        # In the resolver's order (it sorts them by preference), each address once.
        lookup.addresses = list(dict.fromkeys(addresses or []))
        lookup.error = error
        lookup.finished = time.monotonic()
        with self._lock:
            # A failed lookup is not kept (the next connection asks again); nor is one that a
            # newer lookup replaced when it went stale.
            if error is not None and self._lookups.get(key) is lookup:
                del self._lookups[key]
            # By identity, so a lookup that ends twice or after ``forget`` changes nothing else.
            running = self._unfinished.get(key)
            if running is not None:
                running.discard(lookup)
                if not running:
                    del self._unfinished[key]
            wakers, lookup.wakers = lookup.wakers or set(), None
        lookup.done.set()
        for wake in wakers:
            with contextlib.suppress(Exception):  # one waiter's failure must not strand the others
                wake()


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _timed_out() -> httpcore.ConnectTimeout:
    return httpcore.ConnectTimeout("looking up the cache's address took longer than the connect timeout")


def _answer(lookup: _Lookup) -> list[str]:
    """A finished lookup's addresses, or the connect error that its failure is."""
    if lookup.error is not None or not lookup.addresses:
        raise httpcore.ConnectError(f"the cache's address was not found: {lookup.error!r}")
    return lookup.addresses


def _settle(done: asyncio.Future[bool], answered: bool) -> None:
    """Ends an async wait: the lookup is done (True) or the deadline came first (False)."""
    if not done.done():  # the first of the two, and not cancelled with its caller
        done.set_result(answered)


def _on_asyncio() -> bool:
    """Whether the running async library is asyncio, as httpcore decides it (trio can run as
    a guest of an asyncio loop, and is then the one to wait with)."""
    if _sniffio is not None:
        try:
            return bool(_sniffio.current_async_library() == "asyncio")
        except _sniffio.AsyncLibraryNotFoundError:
            return False
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


#: What each address but the last may take of the connect timeout: as Happy Eyeballs (RFC 8305)
#: starts the next address after 250 ms, so a name whose first address drops packets (an IPv6
#: route that goes nowhere) still connects by the next one within the timeout. Serial, not
#: raced: an address slower than that to connect to is reached only as the last one, so the
#: address that last connected is tried first (``Resolver.connected``). Without a timeout the
#: earlier addresses still get 250 ms each; the last one gets no limit.
FIRST_ATTEMPTS = 0.25


def _attempts(addresses: list[str], deadline: float | None) -> typing.Iterator[tuple[str, float | None]]:
    """Each address with the time its connection may take; a connect timeout once none is left."""
    for index, address in enumerate(addresses):
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise httpcore.ConnectTimeout("connecting to the cache took longer than the connect timeout")
        if index == len(addresses) - 1:
            yield address, left
        else:
            yield address, FIRST_ATTEMPTS if left is None else min(left, FIRST_ATTEMPTS)


def _address(sockaddr: tuple[typing.Any, ...]) -> str:
    """A socket address's host, with an IPv6 address's scope (a link-local one needs it)."""
    host = str(sockaddr[0])
    if len(sockaddr) >= 4 and sockaddr[3] and "%" not in host:
        return f"{host}%{sockaddr[3]}"
    return host


class BoundedLookups(_Backend or object):  # type: ignore[misc]
    """httpcore's own backend, with each name looked up under the connect timeout first; the
    connection then goes to the addresses found, in turn, within what is left of that timeout
    (TLS still checks the name the caller asked for: httpcore gives the name, not the address,
    to the handshake)."""

    def __init__(self, inner: typing.Any, resolver: Resolver) -> None:
        self._inner, self._resolver = inner, resolver

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: typing.Iterable[typing.Any] | None = None) -> typing.Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        failure: Exception = httpcore.ConnectError("no address to connect to")
        for address, attempt in _attempts(self._resolver.addresses(host, port, deadline), deadline):
            try:
                stream = self._inner.connect_tcp(address, port, timeout=attempt, local_address=local_address,
                                                 socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
                continue
            self._resolver.connected(host, port, address)
            return stream
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: typing.Iterable[typing.Any] | None = None) -> typing.Any:
        return self._inner.connect_unix_socket(path, timeout=timeout, socket_options=socket_options)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class AsyncBoundedLookups(_AsyncBackend or object):  # type: ignore[misc]
    """``BoundedLookups`` for the async client: on an asyncio loop the name is looked up by
    the resolver's own thread, waited for on the loop. Under trio httpcore's own backend is
    used as it is: trio's lookup is bounded by the connect timeout too, but an abandoned one
    keeps its place in trio's thread limiter until the resolver returns (not handled here)."""

    def __init__(self, inner: typing.Any, resolver: Resolver) -> None:
        self._inner, self._resolver = inner, resolver

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: typing.Iterable[typing.Any] | None = None) -> typing.Any:
        options = {"local_address": local_address, "socket_options": socket_options}
        if not _on_asyncio():
            return await self._inner.connect_tcp(host, port, timeout=timeout, **options)
        deadline = None if timeout is None else time.monotonic() + timeout
        failure: Exception = httpcore.ConnectError("no address to connect to")
        for address, attempt in _attempts(await self._resolver.addresses_async(host, port, deadline), deadline):
            try:
                stream = await self._inner.connect_tcp(address, port, timeout=attempt, **options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
                continue
            self._resolver.connected(host, port, address)
            return stream
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: typing.Iterable[typing.Any] | None = None) -> typing.Any:
        return await self._inner.connect_unix_socket(path, timeout=timeout, socket_options=socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


_resolver = Resolver()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_resolver.forget)


_Client = typing.TypeVar("_Client", httpx.Client, httpx.AsyncClient)


def bound_lookups(client: _Client) -> _Client:
    """``client`` with its connections' name lookups under their connect timeout: its own
    transport's and those it mounted for proxies from the environment (a proxy's name is
    looked up the same way). httpx keeps its httpcore pool in ``_pool`` and the pool its
    backend in ``_network_backend`` (httpx 0.23-0.28, httpcore 0.17-1.0); a transport without
    them is left as it is (lookups then as httpx makes them), never broken."""
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None or isinstance(backend, (BoundedLookups, AsyncBoundedLookups)):
            continue
        if _Backend is not None and isinstance(pool, httpcore.ConnectionPool):
            pool._network_backend = BoundedLookups(backend, _resolver)
        elif _AsyncBackend is not None and isinstance(pool, httpcore.AsyncConnectionPool):
            pool._network_backend = AsyncBoundedLookups(backend, _resolver)
    return client
