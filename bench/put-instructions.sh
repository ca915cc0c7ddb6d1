#!/usr/bin/env bash
# Instructions the service executes per PUT (~2 KB JSON, upserts over 100,000 keys), counted by
# callgrind: every thread of the server (parsing, gzip, the ETag, the group write's own work,
# the answer, the access line), not PostgreSQL's nor the kernel's. Like hit-instructions.sh,
# it repeats to within a few percent on a busy machine.
#   SECONDS_MEASURED=15 CONNECTIONS=16   the measured run under callgrind
#   KEEP_DUMP=FILE TOP=40                keep the callgrind dump; list more parts
source "$(dirname "$0")/lib.sh"
need_tools
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; }
build_release
start_server
python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 1000 >/dev/null
stop_server
valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out.%p" \
  "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" </dev/null >"$WORK/serve.out" 2>"$WORK/serve.log" &
SERVER_PID=$!
wait_listening 480  # callgrind starts slowly
wrk -t1 -c8 -d10s -s "$BENCH_DIR/lua/put.lua" "http://127.0.0.1:$PORT" >/dev/null
callgrind_control -z "$SERVER_PID" >/dev/null
out=$(wrk -t1 -c"${CONNECTIONS:-16}" -d"${SECONDS_MEASURED:-15}s" -s "$BENCH_DIR/lua/put.lua" "http://127.0.0.1:$PORT")
callgrind_control -d "$SERVER_PID" >/dev/null
stop_server
echo "$out" | grep -q "Non-2xx" && { echo "$out"; echo "some PUTs failed"; exit 1; }
puts=$(echo "$out" | awk '/requests in/ {print $1}')
dump=$(ls "$WORK"/callgrind.out.*.1 | head -n 1)
[ -n "${KEEP_DUMP:-}" ] && cp "$dump" "$KEEP_DUMP"
total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "| PUTs counted | instructions | per PUT |"
echo "| --- | --- | --- |"
echo "| $puts | $total | $((total / puts)) |"
echo
echo "Inclusive instructions per PUT of the largest parts:"
callgrind_parts "$dump" "$puts" 10000
