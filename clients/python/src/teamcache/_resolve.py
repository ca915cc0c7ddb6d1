"""A deadline on finding the service's address, for the synchronous client.

httpx's synchronous transport connects with ``socket.create_connection``, whose name lookup
(``getaddrinfo``) has no time limit: with the resolver unreachable, each new connection to the
cache waited out the system's own retries (5 s and more an attempt in ``resolv.conf``'s
defaults) before the connect timeout even began, on the caller's thread. A cache must never
make a call slower than no cache, so the lookup runs on a thread of its own here, and the
caller waits for it no longer than its connect timeout; past that the connection fails as a
connect timeout does (and the call fails open).

One lookup per name at a time: callers asking for a name being looked up wait for that
lookup, so a hung resolver holds one thread per name, not one per call. Nothing is cached:
a new connection (rare: connections are kept) asks the resolver again, so an address that
moved is followed. The async client needs none of this: its lookup runs in a worker thread
under the connect timeout already.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
import typing

import httpcore
import httpx


class _Lookup:
    """One name's lookup in flight: its answer, or the error it ended with, once ``done``."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.done = threading.Event()
        self.addresses: list[str] = []
        self.error: OSError | None = None


class Resolver:
    """Looks names up on threads of their own, one lookup per name and port at a time.
    A lookup older than ``stale_after`` is not waited for: a resolver that never returns
    (the system's gives up after its retries; a broken one might not) must not keep the
    service unreachable after the names resolve again. It costs a thread a name that long."""

    stale_after = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: dict[tuple[str, int], _Lookup] = {}

    def addresses(self, host: str, port: int, timeout: float | None) -> list[str]:
        """The addresses ``host`` names, waiting at most ``timeout`` seconds (None: no limit)."""
        try:
            ipaddress.ip_address(host)
            return [host]  # an address already: nothing to look up
        except ValueError:
            pass
        key = (host, port)
        with self._lock:
            lookup = self._in_flight.get(key)
            if lookup is None or time.monotonic() - lookup.started > self.stale_after:
                lookup = self._in_flight[key] = _Lookup()
                threading.Thread(target=self._look_up, args=(key, lookup), name="teamcache-resolve",
                                 daemon=True).start()
        if not lookup.done.wait(timeout):
            raise httpcore.ConnectTimeout(f"looking up the cache's address took longer than {timeout} s")
        if lookup.error is not None:
            raise httpcore.ConnectError(f"the cache's address was not found: {lookup.error}")
        return lookup.addresses

    def _look_up(self, key: tuple[str, int], lookup: _Lookup) -> None:
        try:
            found = socket.getaddrinfo(key[0], key[1], type=socket.SOCK_STREAM)
            # In the resolver's order (it sorts them by preference), each address once.
            lookup.addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
            if not lookup.addresses:
                lookup.error = OSError("no address")
        except OSError as error:
            lookup.error = error
        finally:
            with self._lock:
                if self._in_flight.get(key) is lookup:  # not a stale one's successor
                    del self._in_flight[key]
            lookup.done.set()


class BoundedLookups(httpcore.NetworkBackend):
    """httpcore's own backend, with each name looked up under the connect timeout first; the
    connection then goes to the address it found, trying each in turn (TLS still checks the
    name the caller asked for: httpcore gives it to the handshake, not the address)."""

    def __init__(self, inner: httpcore.NetworkBackend, resolver: Resolver) -> None:
        self._inner, self._resolver = inner, resolver

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: typing.Iterable[typing.Any] | None = None) -> httpcore.NetworkStream:
        failure: Exception | None = None
        for address in self._resolver.addresses(host, port, timeout):
            try:
                return self._inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                               socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
        assert failure is not None  # addresses() returns at least one address or raises
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: typing.Iterable[typing.Any] | None = None) -> httpcore.NetworkStream:
        return self._inner.connect_unix_socket(path, timeout=timeout, socket_options=socket_options)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


_resolver = Resolver()


def transport(limits: httpx.Limits) -> httpx.HTTPTransport:
    """httpx's transport (certificates, proxies from the environment as its default) whose
    direct connections look the service's name up under the connect timeout."""
    made = httpx.HTTPTransport(limits=limits)
    pool = getattr(made, "_pool", None)
    # httpx keeps its httpcore pool in `_pool` (0.23-0.28); a pool without the attribute this
    # needs is left as it is (lookups then as httpx does them), never broken.
    if isinstance(pool, httpcore.ConnectionPool) and hasattr(pool, "_network_backend"):
        pool._network_backend = BoundedLookups(pool._network_backend, _resolver)
    return made
