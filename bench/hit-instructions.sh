#!/usr/bin/env bash
# Instructions the service executes per cache hit, counted by callgrind: unlike req/s this
# repeats to within a few percent on a busy machine, so it shows what a change to the hit
# path saves before a noisy throughput run can. Counts every thread of the server (the
# access-tracker flush included), not the kernel's work nor PostgreSQL's.
#   GZIP=1 bash bench/hit-instructions.sh      gzip clients (default: identity clients)
#   SECONDS_MEASURED=15 CONNECTIONS=16         the measured wrk run under callgrind
#   KEYS=1000 WARM=20                          the defaults: few enough keys and a long enough
#                                              warm-up under callgrind that every key is in the
#                                              near-cache (read twice) before counting
#   TEAMCACHE_NEAR_CACHE_BYTES=0               hits read from the database instead
#   KEEP_DUMP=FILE TOP=60                      keep the callgrind dump; list more parts
source "$(dirname "$0")/lib.sh"
need_tools
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; }
build_release
measured=${SECONDS_MEASURED:-15}
connections=${CONNECTIONS:-16}

# Populate with a normal server, then restart the same data folder under callgrind.
start_server
python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 10000 >/dev/null
stop_server
TEAMCACHE_LOG_LEVEL=info valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out.%p" \
  "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" </dev/null >"$WORK/serve.out" 2>"$WORK/serve.log" &
SERVER_PID=$!
wait_listening 480  # callgrind starts slowly

requests_total() {
  curl -s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/metrics" | awk '/^teamcache_http_requests_total/ {s += $2} END {print s + 0}'
}
# Warm up (token cache, read connections, inflated bodies), then count from zero.
KEYS=${KEYS:-1000} wrk -t1 -c8 -d${WARM:-20}s -s "$BENCH_DIR/lua/get.lua" "http://127.0.0.1:$PORT" >/dev/null
callgrind_control -z "$SERVER_PID" >/dev/null
before=$(requests_total)
out=$(KEYS=${KEYS:-1000} wrk -t1 -c"$connections" -d"${measured}s" -s "$BENCH_DIR/lua/get.lua" "http://127.0.0.1:$PORT")
callgrind_control -d "$SERVER_PID" >/dev/null
after=$(requests_total)
stop_server
echo "$out" | grep -q "Non-2xx" && { echo "$out"; echo "some hits failed"; exit 1; }

# The metrics request between the two readings counts once; it is not a hit.
hits=$((after - before - 1))
dump=$(ls "$WORK"/callgrind.out.*.1 | head -n 1)
[ -n "${KEEP_DUMP:-}" ] && cp "$dump" "$KEEP_DUMP"
total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "| clients | hits counted | instructions | per hit |"
echo "| --- | --- | --- | --- |"
echo "| $([ "${GZIP:-}" = 1 ] && echo gzip || echo identity) | $hits | $total | $((total / hits)) |"
echo
echo "Inclusive instructions per hit of the largest parts:"
callgrind_parts "$dump" "$hits" 2000
