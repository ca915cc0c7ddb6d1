#!/usr/bin/env bash
# Fails when a process of the test run reported a wait on an event loop thread: each appends
# its first five to the file TEAMCACHE_LOOP_WAITS_REPORT names (Sources/Locking/LoopThreads.swift),
# which scripts/test.sh and .ci/run set for every process they start.
set -uo pipefail
report=${TEAMCACHE_LOOP_WAITS_REPORT:?set TEAMCACHE_LOOP_WAITS_REPORT to the report file}
# The reports are written from a utility thread: give a last one a moment.
sleep 1
if [ -s "$report" ]; then
    cat "$report"
    echo "a blocking wait ran on an event loop thread"
    exit 1
fi
