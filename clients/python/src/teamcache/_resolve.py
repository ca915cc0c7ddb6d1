"""A deadline on finding the service's address, for the synchronous client.

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
unreachable after names resolve again). An answer is kept ``keep_answers`` seconds: a
resolver slower than the connect timeout still serves the next call (the breaker's probe)
with the answer that came too late for the last one, instead of timing out each time; a
new connection after that asks again, so an address that moved is followed. A forked child
starts with no lookups (its parent's threads are not in it). The async client needs none of
this: its lookup runs in a worker thread under the connect timeout already.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
import time
import typing

import httpcore
import httpx

#: httpcore's backend interface (httpcore 0.17 and later); without it nothing is installed.
_Backend: typing.Any = getattr(httpcore, "NetworkBackend", None)


class _Lookup:
    """One name's lookup: its addresses, or the error it ended with, once ``done``."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.done = threading.Event()
        self.finished = 0.0
        self.addresses: list[str] = []
        self.error: BaseException | None = None


class Resolver:
    """Looks names up on threads of their own, one lookup per name and port at a time."""

    stale_after = 30.0
    keep_answers = 15.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lookups: dict[tuple[str, int], _Lookup] = {}

    def forget(self) -> None:
        """Drops every lookup (a forked child: the threads that would finish them are not there)."""
        self._lock = threading.Lock()
        self._lookups = {}

    def addresses(self, host: str, port: int, deadline: float | None) -> list[str]:
        """The addresses ``host`` names, waiting until ``deadline`` (monotonic; None: no limit)."""
        try:
            ipaddress.ip_address(host)
            return [host]  # an address already: nothing to look up
        except ValueError:
            pass
        lookup, start = self._lookup((host, port))
        if start:
            try:
                threading.Thread(target=self._look_up, args=((host, port), lookup), name="teamcache-resolve",
                                 daemon=True).start()
            except BaseException as error:  # noqa: BLE001 - no thread (a limit reached): the lookup failed
                self._finish((host, port), lookup, error=error)
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not lookup.done.wait(wait):
            raise httpcore.ConnectTimeout("looking up the cache's address took longer than the connect timeout")
        if lookup.error is not None or not lookup.addresses:
            raise httpcore.ConnectError(f"the cache's address was not found: {lookup.error!r}")
        return lookup.addresses

    def _lookup(self, key: tuple[str, int]) -> tuple[_Lookup, bool]:
        """The lookup to wait for, and whether it is new (its thread to be started, outside the lock)."""
        now = time.monotonic()
        with self._lock:
            lookup = self._lookups.get(key)
            if lookup is not None:
                fresh_answer = lookup.done.is_set() and lookup.error is None \
                    and now - lookup.finished <= self.keep_answers
                in_flight = not lookup.done.is_set() and now - lookup.started <= self.stale_after
                if fresh_answer or in_flight:
                    return lookup, False
            lookup = self._lookups[key] = _Lookup()
            return lookup, True

    def _look_up(self, key: tuple[str, int], lookup: _Lookup) -> None:
        try:
            found = socket.getaddrinfo(key[0], key[1], type=socket.SOCK_STREAM)
            self._finish(key, lookup, addresses=[_address(info[4]) for info in found])
        except BaseException as error:  # noqa: BLE001 - whatever it was, the callers are told
            self._finish(key, lookup, error=error)

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
        lookup.done.set()


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
        for address in self._resolver.addresses(host, port, deadline):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise httpcore.ConnectTimeout("connecting to the cache took longer than the connect timeout")
            try:
                return self._inner.connect_tcp(address, port, timeout=left, local_address=local_address,
                                               socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: typing.Iterable[typing.Any] | None = None) -> typing.Any:
        return self._inner.connect_unix_socket(path, timeout=timeout, socket_options=socket_options)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


_resolver = Resolver()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_resolver.forget)


def bound_lookups(client: httpx.Client) -> httpx.Client:
    """``client`` with its connections' name lookups under their connect timeout: its own
    transport's and those it mounted for proxies from the environment (a proxy's name is
    looked up the same way). httpx keeps its httpcore pool in ``_pool`` and the pool its
    backend in ``_network_backend`` (httpx 0.23-0.28, httpcore 0.17-1.0); a transport without
    them is left as it is (lookups then as httpx makes them), never broken."""
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if _Backend is not None and isinstance(pool, httpcore.ConnectionPool) \
                and hasattr(pool, "_network_backend") and not isinstance(pool._network_backend, BoundedLookups):
            pool._network_backend = BoundedLookups(pool._network_backend, _resolver)
    return client
