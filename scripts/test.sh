#!/usr/bin/env bash
# The whole test suite: `swift test` (everything against a real PostgreSQL and real listening
# servers; the cross-replica near-cache test on its own after the rest), then the Python
# client's tests against a real `teamcache serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
swift test --skip NearCacheReplicaTests
# Alone: it bounds how long a write stays hidden on another replica (50 ms), which measures
# the near-cache only when the other suites are not competing for the two cores.
swift test --filter NearCacheReplicaTests
bash scripts/python-tests.sh
