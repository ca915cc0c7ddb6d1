#!/usr/bin/env python3
"""Replays a Zipf workload over N Citus workers with `namespace` as the distribution column.

No Citus here (it is not packaged for Debian 12's PostgreSQL 15 in reach of this machine), so
this simulates what its hash distribution would do with TeamCache's tables: every row of a
namespace (entries, leases, counter deltas, settings) lands on the shard its namespace hashes
to, shards are placed round robin on the workers, and each request costs its namespace's
worker one query. A stable 32-bit hash stands in for Citus's `hashtext`.

Teams differ: namespace popularity is Zipf (s=NS_SKEW), keys within a namespace are Zipf
(s=KEY_SKEW), and a namespace stores entries in proportion to its traffic. Printed: the
busiest worker's share of requests and of stored entries against the even share 1/N, also
after isolating the hottest namespace on a shard (and worker) of its own, as Citus's
`isolate_tenant_to_new_shard` does.
"""
import argparse, bisect, hashlib, random

parser = argparse.ArgumentParser()
parser.add_argument("--namespaces", type=int, default=200)
parser.add_argument("--requests", type=int, default=500_000)
parser.add_argument("--shards", type=int, default=32, help="citus.shard_count (Citus's default: 32)")
parser.add_argument("--ns-skew", type=float, default=1.1)
parser.add_argument("--key-skew", type=float, default=0.99)
parser.add_argument("--keys", type=int, default=10_000, help="distinct keys per namespace")
parser.add_argument("--near-keys", type=int, default=1000,
                    help="hot keys per namespace each TeamCache keeps in its near-cache (their repeat hits cost no query)")
parser.add_argument("--seed", type=int, default=17)
args = parser.parse_args()
random.seed(args.seed)

def zipf_cdf(n, s):
    weights = [1 / (rank ** s) for rank in range(1, n + 1)]
    total, running, cdf = sum(weights), 0.0, []
    for weight in weights:
        running += weight
        cdf.append(running / total)
    return weights, cdf

def draw(cdf):
    return min(bisect.bisect_left(cdf, random.random()), len(cdf) - 1)

def shard_of(namespace):
    return int.from_bytes(hashlib.md5(namespace.encode()).digest()[:4], "big") % args.shards

names = [f"team-{i:03d}" for i in range(args.namespaces)]
ns_weights, ns_cdf = zipf_cdf(args.namespaces, args.ns_skew)
_, key_cdf = zipf_cdf(args.keys, args.key_skew)
requests = [0] * args.namespaces
queries = [0] * args.namespaces
distinct = [set() for _ in names]
for _ in range(args.requests):
    namespace = draw(ns_cdf)
    key = draw(key_cdf)
    requests[namespace] += 1
    # A repeat hit on a hot key is answered from memory; everything else costs a query.
    if not (key < args.near_keys and key in distinct[namespace]):
        queries[namespace] += 1
    distinct[namespace].add(key)
entries = [len(keys) for keys in distinct]

def busiest(workers, isolate_top, cost=None):
    cost = cost or requests
    load, stored = [0] * workers, [0] * workers
    for index, name in enumerate(names):
        if isolate_top and index == 0 and workers > 1:
            worker = 0  # the hottest namespace alone on worker 0
        else:
            shard = shard_of(name)
            worker = (1 + shard % (workers - 1)) if (isolate_top and workers > 1) else shard % workers
        load[worker] += cost[index]
        stored[worker] += entries[index]
    return max(load) / sum(load), max(stored) / sum(stored)

top_share = requests[0] / args.requests
print(f"{args.namespaces} namespaces, {args.requests} requests, Zipf s={args.ns_skew} over namespaces, "
      f"s={args.key_skew} over {args.keys} keys each; {args.shards} shards")
print(f"hottest namespace: {top_share:.1%} of requests, {entries[0] / sum(entries):.1%} of entries")
print()
print(f"queries reaching the database with a near-cache of {args.near_keys} keys per namespace: "
      f"{sum(queries) / args.requests:.1%} of requests")
print()
print("| workers | even share | busiest worker: requests | entries | queries behind near-caches | requests, hottest namespace isolated |")
print("| --- | --- | --- | --- | --- | --- |")
for workers in (1, 2, 4, 8, 16):
    load, stored = busiest(workers, False)
    near, _ = busiest(workers, False, queries)
    isolated, _ = busiest(workers, True)
    print(f"| {workers} | {1 / workers:.1%} | {load:.1%} ({load * workers:.2f}× even) | "
          f"{stored:.1%} ({stored * workers:.2f}×) | {near:.1%} ({near * workers:.2f}×) | "
          f"{isolated:.1%} ({isolated * workers:.2f}×) |")
