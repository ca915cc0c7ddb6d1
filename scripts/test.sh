#!/usr/bin/env bash
# The whole test suite: `swift test` (everything against a real PostgreSQL and real listening
# servers), then the Python client's tests against a real `teamcache serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
swift test
bash scripts/python-tests.sh
