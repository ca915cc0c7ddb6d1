#!/usr/bin/env bash
# The Python OpenAI transport's cost per call, beside the same call straight to the upstream
# (bench/transport.py): hits, misses, and a frozen TeamCache with and without the breaker.
source "$(dirname "$0")/lib.sh"
build_release
start_server
[ -x "$REPO/.venv/bin/python" ] || (cd "$REPO" && bash scripts/python-tests.sh --collect-only -q >/dev/null)
"$REPO/.venv/bin/python" "$BENCH_DIR/transport.py" --url "http://127.0.0.1:$PORT" --token "$TOKEN" \
  --calls "${TRANSPORT_CALLS:-300}"
