"""The local tier (clients/python LocalTier) beside the service it fronts, same entry, same
machine: a local hit against a service hit (descriptor lookups and raw GETs), the change
feed's lag from a write through another client to the tier's copy going (1,000 writes), and
what following the feed costs the service per 1,000 changes (its CPU and its database's
transactions, with a follower against without one, the same writes). Prints markdown rows."""

from __future__ import annotations

import argparse
import builtins
import functools
import os
import statistics
import subprocess
import threading
import time
import urllib.request

from teamcache import LocalTier, TeamCache


def per_call(call, count: int) -> float:
    """Median of five rounds, microseconds a call."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(count):
            call()
        rounds.append((time.perf_counter() - started) / count * 1e6)
    return statistics.median(rounds)


def cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return total / ticks


def commits(socket_dir: str) -> int:
    out = subprocess.run(["psql", "-h", socket_dir, "-U", "postgres", "teamcache", "-qAtc",
                          "SELECT xact_commit FROM pg_stat_database WHERE datname = 'teamcache'"],
                         capture_output=True, check=True, text=True)
    return int(out.stdout.strip())


def feed_pages(url: str, token: str) -> float:
    request = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {token}"})
    text = urllib.request.urlopen(request).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("teamcache_feed_pages_total"))


def wait_live(tier: LocalTier, namespace: str) -> None:
    tier._follow(namespace)
    deadline = time.monotonic() + 30
    while not tier.live(namespace):
        if time.monotonic() > deadline:
            raise SystemExit("the follower never caught up")
        time.sleep(0.05)


def local_under_writes(local: TeamCache, writer: TeamCache, namespace: str, where: str, writers: int,
                       seconds: float = 5.0) -> tuple[float, int, float]:
    """The share of reads of a fresh copy answered locally while `writers` threads put to
    `where`, the reads, and the writes a second (counted per thread, over the time taken)."""
    local.get(namespace, "raw")
    stop = threading.Event()
    written = [0] * writers

    def write(thread: int) -> None:
        while not stop.is_set():
            writer.put(where, f"busy-{thread}-{written[thread] % 100}", b"x" * 2000, ttl=3600)
            written[thread] += 1

    threads = [threading.Thread(target=write, args=(thread,)) for thread in range(writers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    reads = from_local = 0
    while time.perf_counter() - started < seconds:
        reads += 1
        from_local += local.get(namespace, "raw").from_local
        time.sleep(0.001)
    stop.set()
    for thread in threads:
        thread.join()
    return from_local / reads, reads, sum(written) / (time.perf_counter() - started)


def main() -> None:
    print = functools.partial(builtins.print, flush=True)  # noqa: A001 - rows as they come
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--pg-socket", required=True)
    parser.add_argument("--writes", type=int, default=1000)
    args = parser.parse_args()
    namespace = "bench-local"
    answer = ("The tier answers from memory. " * 70)[:2000]
    descriptor = {"model": "bench-model", "prompt": "what does the local tier cost?"}
    writer = TeamCache(args.url, args.token)
    service = TeamCache(args.url, args.token)
    tier = LocalTier(feed_wait=10)
    local = TeamCache(args.url, args.token, local_tier=tier)
    wait_live(tier, namespace)
    writer.upsert(namespace, descriptor, answer, metadata={"input_tokens": 500, "output_tokens": 400})
    writer.put(namespace, "raw", answer.encode(), content_type="application/json", ttl=3600)
    local.lookup(namespace, descriptor)
    local.get(namespace, "raw")
    assert local.lookup(namespace, descriptor).from_local and local.get(namespace, "raw").from_local

    rows = []
    for what, remote, near in (
        ("descriptor lookup, ~2 KB answer", lambda: service.lookup(namespace, descriptor),
         lambda: local.lookup(namespace, descriptor)),
        ("raw GET, ~2 KB body", lambda: service.get(namespace, "raw"), lambda: local.get(namespace, "raw")),
    ):
        remote_us = per_call(remote, 400)
        local_us = per_call(near, 20000)
        rows.append(f"| {what} | {remote_us:.0f} µs | {local_us:.2f} µs | {remote_us / local_us:.0f}× |")
    print("| a hit, same entry, same machine | service (no tier) | local tier | service / local |")
    print("| --- | --- | --- | --- |")
    print("\n".join(rows))
    print()

    # Lag: the writer replaces the key the tier holds; the time until the tier's copy goes.
    lags = []
    writer.put(namespace, "hot", b"start", ttl=3600)
    for version in range(args.writes):
        local.get(namespace, "hot")
        deadline = time.perf_counter() + 5
        while tier.local(namespace, "hot", "raw") is None:
            if time.perf_counter() > deadline:
                raise SystemExit("the tier never kept the key")
            local.get(namespace, "hot")
        writer.put(namespace, "hot", f"v{version}".encode(), ttl=3600)
        written = time.perf_counter()
        while tier.local(namespace, "hot", "raw") is not None:
            if time.perf_counter() - written > 5:
                raise SystemExit("a write was not seen in 5 s")
            time.sleep(0.0002)
        lags.append((time.perf_counter() - written) * 1000)
    lags.sort()
    p = lambda q: lags[min(len(lags) - 1, int(len(lags) * q))]  # noqa: E731
    print(f"| feed lag, a write through another client → the tier's copy dropped ({len(lags)} writes) "
          "| p50 | p99 | max |")
    print("| --- | --- | --- | --- |")
    print(f"| ms | {p(0.5):.1f} | {p(0.99):.1f} | {lags[-1]:.1f} |")
    print()

    # Local answers while others write: a fresh copy answers locally only while the follower
    # is live, so writes elsewhere (other keys, other namespaces) must not take it out of live.
    print("| a fresh copy read for 5 s while another client writes | reads | answered locally | writes a second |")
    print("| --- | --- | --- | --- |")
    for writers in (1, 8):
        for where in (namespace, "bench-elsewhere"):
            local_share, reads, rate = local_under_writes(local, writer, namespace, where, writers)
            print(f"| {writers} writer{'s' if writers > 1 else ''} to "
                  f"{'other keys of the same namespace' if where == namespace else 'another namespace'} "
                  f"| {reads} | {local_share:.1%} | {rate:.0f} |")
    print()

    # Cost: the same writes to other keys, with the tier following and without it.
    local.close()
    postgres = [int(pid) for pid in subprocess.run(["pgrep", "-u", "postgres", "-f", "postgres"],
                                                     capture_output=True, text=True).stdout.split()]

    def measured(follow: bool) -> tuple[float, int, float]:
        follower = None
        if follow:
            follower = LocalTier(feed_wait=10)
            client = TeamCache(args.url, args.token, local_tier=follower)
            wait_live(follower, namespace)
        time.sleep(0.5)
        cpu, xacts, pages = cpu_seconds([args.server_pid, *postgres]), commits(args.pg_socket), \
            feed_pages(args.url, args.token)
        for index in range(args.writes):
            writer.put(namespace, f"cold-{index % 100}", f"{index}".encode(), ttl=3600)
        time.sleep(1.0)
        used = (cpu_seconds([args.server_pid, *postgres]) - cpu, commits(args.pg_socket) - xacts,
                feed_pages(args.url, args.token) - pages)
        if follower is not None:
            client.close()
        return used

    off = [measured(False) for _ in range(3)]
    on = [measured(True) for _ in range(3)]
    cpu = statistics.median(o[0] for o in on) - statistics.median(o[0] for o in off)
    xacts = statistics.median(o[1] for o in on) - statistics.median(o[1] for o in off)
    pages = statistics.median(o[2] for o in on) - statistics.median(o[2] for o in off)
    scale = 1000 / args.writes
    print(f"| following the feed, per 1,000 changes (one follower; medians of 3, with − without) "
          f"| service + PostgreSQL CPU | database transactions | feed pages served |")
    print("| --- | --- | --- | --- |")
    print(f"| one write at a time | {cpu * scale * 1000:.0f} ms | {xacts * scale:.0f} | {pages * scale:.0f} |")
    writer.close()
    service.close()


if __name__ == "__main__":
    main()
