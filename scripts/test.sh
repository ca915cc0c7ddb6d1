#!/usr/bin/env bash
# The whole test suite: `swift test` (everything against a real PostgreSQL and real listening
# servers), in three runs, then the Python client's tests against a real `teamcache serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
# Suites that run database clusters of their own (a killed primary and its promoted standby,
# a paused standby, a PgBouncer) and block their test threads for seconds at a time: run apart,
# since Swift Testing runs tests on a pool as wide as the cores, and async suites (the Swift
# client's bursts) stall while both threads are held.
own_clusters="FailoverTests|ReadReplicaTests|PoolerTests"
swift test --skip "NearCacheReplicaTests|$own_clusters"
swift test --filter "$own_clusters"
# Alone: it bounds how long a write stays hidden on another replica (50 ms), which measures
# the near-cache only when the other suites are not competing for the two cores.
swift test --filter NearCacheReplicaTests
bash scripts/python-tests.sh
