#!/usr/bin/env bash
# The whole test suite: `swift test` (everything against a real PostgreSQL and real listening
# servers), with runs of their own for the suites that must not share the two cores, then the
# Python client's tests against a real `teamcache serve`, then the dashboard's in a real browser.
# Every stage runs even when one before it failed (a flaky Swift test must not hide the
# Python results); the outcome of each is listed at the end, and the exit status is non-zero
# when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
outcomes=()
failed=0
# Each stage's output is kept too: a failed stage's failing tests are printed again at the very
# end, where a record that keeps only the tail of a long log still shows them (CI's record of a
# failed run once showed only "FAILED  swift test: the Swift client's suites", not which test).
stage_logs=$(mktemp -d /tmp/teamcache-test-stages.XXXXXX) || exit 1
trap 'rm -rf "$stage_logs"' EXIT
failures=()
stage() {
    local name=$1
    shift
    local log="$stage_logs/${#outcomes[@]}.log"
    printf '\n=== test stage: %s\n' "$name"
    if "$@" 2>&1 | tee "$log"; then
        outcomes+=("passed  $name")
    else
        outcomes+=("FAILED  $name (exit $?)")
        failed=1
        failures+=("$log")
    fi
}
# A failed stage's lines that name what failed: Swift Testing's ✘ lines (a test, its recorded
# issues, the run), pytest's FAILED and ERROR lines, a crash. Cut short, a stage's first few.
failing_lines() {
    # Taken whole, then cut: `head` closing the pipe early must not read as "nothing found".
    local found
    found=$(grep -aE '✘|^(FAILED|ERROR) |Fatal error|error: Exited|Segmentation fault|Aborted' "$1" | cut -c1-400) || true
    if [ -n "$found" ]; then
        printf '%s\n' "$found" | head -n 12
    else
        echo "(no failing test named; the stage's log above says why)"
    fi
}
# Every process the stages start (the Swift tests, the `teamcache serve` processes they and the
# Python and dashboard tests start) appends a wait that ran on an event loop thread to this
# file (Sources/Locking/LoopThreads.swift): the last stage fails when it is not empty.
export TEAMCACHE_LOOP_WAITS_REPORT=${TEAMCACHE_LOOP_WAITS_REPORT:-$(mktemp /tmp/teamcache-loop-waits.XXXXXX)}
# A stage names its suites exactly: `swift test --filter` matches a regular expression against
# "Module.Suite/test", and a bare "ClientTests" also matched the HTTPClientTests module (whose
# blocking suites then ran beside the Swift client's async ones, which this split exists to
# prevent), "BudgetTests" BodyBudgetTests.
suites() { local IFS='|'; printf '\\.(%s)/' "$*"; }
# Suites that run database clusters of their own (a killed primary and its promoted standby,
# a paused standby, a PgBouncer) and block their test threads for seconds at a time: run apart,
# since Swift Testing runs tests on a pool as wide as the cores, and async suites (the Swift
# client's bursts) stall while both threads are held.
own_clusters=$(suites FailoverTests ReadReplicaTests PoolerTests)
# The Swift client's suites are async: they run on the cooperative pool, which the blocking
# suites hold for seconds at a time on two cores; a burst's lookups then time out and, not
# being idempotent (they may be granted a lease), are not retried, and a local tier's feed
# follower falls behind its one-second promise. Run apart, as a backend's client runs: beside
# a service that has the cores it needs.
async_client=$(suites ClientTests ClientRetryTests ClientFailOpenTests ClientChangeFeedTests ClientLocalTierTests)
# The outgoing HTTP client's suites (the gateway's upstream side): blocking, with servers of
# their own; apart from the async client's, and from the main suite as they always ran.
http_client='^HTTPClientTests\.'
# Alone: NearCacheReplicaTests bounds how long a write stays hidden on another replica (50 ms),
# which measures the near-cache only when the other suites are not competing for the two cores.
# FeedBacklogTests compares PUT+GET latency with and without a feed backlog. The budget suites
# compare a neighbour's latency beside a held flood with a server without one; with the whole
# suite on two cores a burst elsewhere decided it (67 ms against 1.9 ms once).
near_replica=$(suites NearCacheReplicaTests)
feed_backlog=$(suites FeedBacklogTests)
budgets=$(suites BudgetTests BodyBudgetTests UnverifiedBodyTests)
stage "swift test: the main suite" swift test \
    --skip "$near_replica|$feed_backlog|$budgets|$own_clusters|$async_client|$http_client"
stage "swift test: the Swift client's suites" swift test --filter "$async_client"
stage "swift test: the outgoing HTTP client's suites" swift test --filter "$http_client"
stage "swift test: suites with clusters of their own" swift test --filter "$own_clusters"
stage "swift test: NearCacheReplicaTests" swift test --filter "$near_replica"
stage "swift test: FeedBacklogTests" swift test --filter "$feed_backlog"
stage "swift test: BudgetTests" swift test --filter "$budgets"
stage "python client (pytest)" bash scripts/python-tests.sh
# The dashboard in a real Chromium (Debian's), against a real `teamcache serve`.
stage "dashboard (Chromium via Playwright)" bash scripts/dashboard-tests.sh
stage "no wait ran on an event loop thread" bash scripts/no-loop-waits.sh
printf '\n=== test stages\n'
printf '%s\n' "${outcomes[@]}"
for log in "${failures[@]}"; do
    printf '\n=== what failed in: %s\n' "${outcomes[$(basename "$log" .log)]}"
    failing_lines "$log"
done
exit $failed
