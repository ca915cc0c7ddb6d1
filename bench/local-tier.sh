#!/usr/bin/env bash
# The Python client's local tier beside the service (bench/local_tier.py): a local hit against
# a service hit on the same entry (the issue's goal: ≥ 100× faster), the change feed's lag over
# 1,000 writes, the share of a fresh copy's reads answered locally while other clients write
# (its follower must stay live), and what one follower costs the service per 1,000 changes.
source "$(dirname "$0")/lib.sh"
build_release
start_server
[ -x "$REPO/.venv/bin/python" ] || (cd "$REPO" && bash scripts/python-tests.sh --collect-only -q >/dev/null)
"$REPO/.venv/bin/python" "$BENCH_DIR/local_tier.py" --url "http://127.0.0.1:$PORT" --token "$TOKEN" \
  --server-pid "$SERVER_PID" --pg-socket "$(pg_socket)" --writes "${LOCAL_TIER_WRITES:-1000}"
