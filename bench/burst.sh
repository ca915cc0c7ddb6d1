#!/usr/bin/env bash
# One paid call per burst (issue 14): CLIENTS callers (default 64) ask the same new prompt at
# once against two replicas on one database, each doing lookup → call the model → upsert;
# the model is a stub that sleeps 500 ms and counts its calls. With leases and waiting
# (single-flight) against the same burst without. Then 10,000 parked waiters: the service's
# RSS, and a hit benchmark's throughput beside the same without waiters.
source "$(dirname "$0")/lib.sh"
need_tools
build_release
CLIENTS=${BURST_CLIENTS:-64}
SECOND_PORT=$((PORT + 10))
start_server
# The second replica: the same database (the first one's embedded cluster), its own port.
url="postgresql:///teamcache?host=$(pg_socket)&user=postgres"
TEAMCACHE_LOG_LEVEL=warn "$BIN" serve --listen "127.0.0.1:$SECOND_PORT" --database-url "$url" \
  </dev/null >"$WORK/serve2.out" 2>"$WORK/serve2.log" &
SECOND_PID=$!
trap 'kill -TERM "$SECOND_PID" 2>/dev/null || true; bench_cleanup' EXIT
for _ in $(seq 1 120); do grep -q "listening on" "$WORK/serve2.out" 2>/dev/null && break; sleep 0.25; done

burst() {
  python3 "$BENCH_DIR/burst.py" --ports "$PORT,$SECOND_PORT" --token "$TOKEN" --clients "$CLIENTS" "$@"
}
echo "| burst of $CLIENTS identical new prompts, 2 replicas | model calls per burst (3 rounds) | p50 ms | p99 ms | max ms | errors |"
echo "| --- | --- | --- | --- | --- | --- |"
for mode in leases plain; do
  calls=() p50s=() p99s=() maxes=() errors=0
  while read -r c p50 p99 max failed; do
    calls+=("$c"); p50s+=("$p50"); p99s+=("$p99"); maxes+=("$max"); errors=$((errors + failed))
  done < <(if [ "$mode" = leases ]; then burst --leases; else burst; fi)
  label=$([ "$mode" = leases ] && echo "with lease + wait (single-flight)" || echo "plain lookups (no leases)")
  echo "| $label | ${calls[*]} | ${p50s[*]} | ${p99s[*]} | ${maxes[*]} | $errors |"
done
kill -TERM "$SECOND_PID" 2>/dev/null; wait "$SECOND_PID" 2>/dev/null || true

# 10,000 parked waiters against hits.
python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 10000 >&2
metric() { curl -s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/metrics" | awk -v name="$1" '$1 == name {print $2}'; }
KEYS=10000 wrk_run 64 "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua" >/dev/null  # warm-up
read -r base_rps _ base_p99 _ <<<"$(KEYS=10000 wrk_run 64 "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
base_rss=$(server_rss_mb)
python3 "$BENCH_DIR/park_waiters.py" --port "$PORT" --token "$TOKEN" --count 10000 --hold 40 >"$WORK/park.out" &
PARK_PID=$!
for _ in $(seq 1 120); do
  parked=$(metric teamcache_waiters); [ "${parked%.*}" -ge 10000 ] 2>/dev/null && break; sleep 0.25
done
parked_rss=$(server_rss_mb)
read -r park_rps _ park_p99 _ <<<"$(KEYS=10000 wrk_run 64 "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
still=$(metric teamcache_waiters)
kill "$PARK_PID" 2>/dev/null; wait "$PARK_PID" 2>/dev/null || true
sleep 1
after=$(metric teamcache_waiters)
read -r again_rps _ again_p99 _ <<<"$(KEYS=10000 wrk_run 64 "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
again_rss=$(server_rss_mb)
echo
echo "| hits (-c64) | req/s | p99 ms | RSS MB | waiters parked |"
echo "| --- | --- | --- | --- | --- |"
echo "| without waiters | $base_rps | $base_p99 | $base_rss | 0 |"
echo "| with 10,000 parked waiters | $park_rps | $park_p99 | $parked_rss | ${parked%.*} (still ${still%.*} after the run) |"
echo "| without waiters, again (after they left) | $again_rps | $again_p99 | $again_rss | ${after%.*} |"
best=$(awk -v a="$base_rps" -v b="$again_rps" 'BEGIN {print (a > b ? a : b)}')
echo "| ratio to the better run without / extra RSS | $(ratio "$park_rps" "$best") | | +$(awk -v a="$parked_rss" -v b="$base_rss" 'BEGIN {printf "%.1f", a - b}') | |"
