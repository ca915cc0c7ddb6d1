#!/usr/bin/env bash
# Cache workloads side by side with pgbench running the service's own SQL on the same table:
# hits (identity and gzip clients) and misses vs the point select, upserts vs tc_put_entry;
# and hits with access tracking off, to show what tracking costs.
source "$(dirname "$0")/lib.sh"
need_tools
build_release
CONNECTIONS=${BENCH_CONNECTIONS:-64}
PG_CLIENTS=${BENCH_PG_CLIENTS:-16}

median() { printf '%s\n' "$@" | sort -g | sed -n 2p; }

cache_workloads() {
  python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 10000 >&2
  python3 "$BENCH_DIR/pgbench_sql.py" "$WORK"
  echo "| workload | teamcache req/s | p50 ms | p99 ms | anchor | anchor TPS | anchor p99 ms | ratio |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  # Three alternating rounds (anchor, identity hits, gzip hits); medians of each column.
  local selects=() select99s=() plain=() plain50=() plain99=() gz=() gz50=() gz99=()
  for _ in 1 2 3; do
    read -r select select99 <<<"$(pgbench_run "$PG_CLIENTS" "$WORK/select.sql")"
    selects+=("$select"); select99s+=("$select99")
    read -r rps p50 p99 _ <<<"$(KEYS=10000 wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
    plain+=("$rps"); plain50+=("$p50"); plain99+=("$p99")
    read -r rps p50 p99 _ <<<"$(GZIP=1 KEYS=10000 wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
    gz+=("$rps"); gz50+=("$p50"); gz99+=("$p99")
  done
  select=$(median "${selects[@]}"); select99=$(median "${select99s[@]}")
  rps=$(median "${plain[@]}")
  echo "| hit, identity clients (-c$CONNECTIONS, median of 3) | $rps | $(median "${plain50[@]}") | $(median "${plain99[@]}") | pgbench point select (-c$PG_CLIENTS) | $select | $select99 | $(ratio "$rps" "$select") |"
  rps=$(median "${gz[@]}")
  echo "| hit, gzip clients (median of 3) | $rps | $(median "${gz50[@]}") | $(median "${gz99[@]}") | pgbench point select | $select | $select99 | $(ratio "$rps" "$select") |"
  read -r miss miss99 <<<"$(pgbench_run "$PG_CLIENTS" "$WORK/miss.sql")"
  read -r rps p50 p99 _ <<<"$(KEY_PREFIX=absent- wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
  echo "| miss | $rps | $p50 | $p99 | pgbench select of absent keys | $miss | $miss99 | $(ratio "$rps" "$miss") |"
  # Writes swing with WAL and checkpoint timing far more than reads: three alternating
  # rounds, medians of each column.
  local anchors=() anchor99s=() rates=() p50s=() p99s=()
  for _ in 1 2 3; do
    read -r upsert upsert99 <<<"$(pgbench_run "$PG_CLIENTS" "$WORK/upsert.sql")"
    read -r rps p50 p99 _ <<<"$(wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/put.lua")"
    anchors+=("$upsert"); anchor99s+=("$upsert99"); rates+=("$rps"); p50s+=("$p50"); p99s+=("$p99")
  done
  upsert=$(median "${anchors[@]}"); rps=$(median "${rates[@]}")
  echo "| upsert ~2 KB JSON (median of 3) | $rps | $(median "${p50s[@]}") | $(median "${p99s[@]}") | pgbench tc_put_entry (-c$PG_CLIENTS) | $upsert | $(median "${anchor99s[@]}") | $(ratio "$rps" "$upsert") |"
}

start_server
cache_workloads
stop_server

# Access tracking on vs off: three alternating rounds, medians (one pair alone is noise).
tracked=(); untracked=()
for round in 1 2 3; do
  for mode in on off; do
    start_server TEAMCACHE_ACCESS_TRACKING=$mode
    python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 10000 >/dev/null
    read -r rps _ _ _ <<<"$(KEYS=10000 wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
    if [ "$mode" = on ]; then tracked+=("$rps"); else untracked+=("$rps"); fi
    stop_server
  done
done
echo
echo "| hits with access tracking on (3 runs) | off (3 runs) | median on / median off |"
echo "| --- | --- | --- |"
echo "| ${tracked[*]} | ${untracked[*]} | $(ratio "$(median "${tracked[@]}")" "$(median "${untracked[@]}")") |"
