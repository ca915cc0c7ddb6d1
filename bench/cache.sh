#!/usr/bin/env bash
# Cache workloads side by side with pgbench running the service's own SQL on the same table:
# hits (identity and gzip clients) and misses vs the point select, upserts vs a plain
# per-call upsert and vs tc_put_entry (with the write group sizes and commits per second),
# Redis with an fsync per write as a peer; and hits with access tracking off, to show what
# tracking costs.
source "$(dirname "$0")/lib.sh"
need_tools
build_release
CONNECTIONS=${BENCH_CONNECTIONS:-64}
PG_CLIENTS=${BENCH_PG_CLIENTS:-16}


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
  # rounds, medians of each column. Two anchors on the same cluster, synchronous commit on
  # for all: the service's own SQL (tc_put_entry, one per transaction), and what a user
  # would write without a cache service (one plain INSERT … ON CONFLICT DO UPDATE of the
  # same JSON into a keyed table per transaction). Same key distribution (100,000 keys).
  psql -h "$(pg_socket)" -U postgres teamcache -qf "$WORK/plain_table.sql"
  local anchors=() anchor99s=() plains=() plain99s=() rates=() p50s=() p99s=()
  local commits_before batches_before writes_before started
  commits_before=$(db_commits); read -r batches_before writes_before <<<"$(write_batches)"; started=$(date +%s.%N)
  local put_seconds=0
  for _ in 1 2 3; do
    read -r upsert upsert99 <<<"$(pgbench_run "$PG_CLIENTS" "$WORK/upsert.sql")"
    read -r plain_tps plain_p99 <<<"$(pgbench_run "$PG_CLIENTS" "$WORK/plain_upsert.sql")"
    local before_commits; before_commits=$(db_commits)
    read -r rps p50 p99 _ <<<"$(wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/put.lua")"
    put_commits=$(( ${put_commits:-0} + $(db_commits) - before_commits ))
    put_seconds=$((put_seconds + DURATION))
    anchors+=("$upsert"); anchor99s+=("$upsert99"); plains+=("$plain_tps"); plain99s+=("$plain_p99")
    rates+=("$rps"); p50s+=("$p50"); p99s+=("$p99")
  done
  upsert=$(median "${anchors[@]}"); plain_tps=$(median "${plains[@]}"); rps=$(median "${rates[@]}")
  echo "| upsert ~2 KB JSON (median of 3) | $rps | $(median "${p50s[@]}") | $(median "${p99s[@]}") | pgbench plain INSERT … ON CONFLICT (-c$PG_CLIENTS) | $plain_tps | $(median "${plain99s[@]}") | $(ratio "$rps" "$plain_tps") |"
  echo "| upsert ~2 KB JSON (median of 3) | $rps | $(median "${p50s[@]}") | $(median "${p99s[@]}") | pgbench tc_put_entry (-c$PG_CLIENTS) | $upsert | $(median "${anchor99s[@]}") | $(ratio "$rps" "$upsert") |"
  read -r batches writes <<<"$(write_batches)"
  WRITE_SUMMARY="| $(awk -v w="$((writes - writes_before))" -v b="$((batches - batches_before))" 'BEGIN { if (b > 0) printf "%.1f", w / b; else print "?" }') | $(awk -v c="$put_commits" -v s="$put_seconds" 'BEGIN { printf "%.0f", c / s }') |"
}

# Database commits so far (all sessions), for commits per second during the PUT runs.
db_commits() {
  psql -h "$(pg_socket)" -U postgres teamcache -Atc \
    "SELECT xact_commit FROM pg_stat_database WHERE datname = 'teamcache'"
}

# "BATCHES WRITES" from the service's teamcache_db_write_batch_size histogram.
write_batches() {
  curl -s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/metrics" | awk '
    /^teamcache_db_write_batch_size_count/ {c=$2} /^teamcache_db_write_batch_size_sum/ {s=$2}
    END {printf "%d %d\n", c, s}'
}

# Redis SET of the same ~2 KB value with appendfsync always (an fsync per write), -c64,
# 100,000 random keys: the durable peer a team could pick instead.
redis_peer() {
  command -v redis-server >/dev/null || { echo "| Redis SET, appendfsync always | (redis-server not installed) | | |"; return; }
  local port=$((PORT + 7))
  mkdir -p "$WORK/redis"
  redis-server --port "$port" --dir "$WORK/redis" --appendonly yes --appendfsync always --save '' \
    --daemonize yes --pidfile "$WORK/redis/pid" --logfile "$WORK/redis/log" >/dev/null
  sleep 0.5
  local out rps p99
  out=$(redis-benchmark -p "$port" -t set -d 2000 -c "$CONNECTIONS" -r 100000 -n $((DURATION * 5000)) --csv 2>/dev/null | tail -n 1)
  rps=$(echo "$out" | awk -F'","' '{print $2}')
  p99=$(echo "$out" | awk -F'","' '{print $7}')
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill "$(cat "$WORK/redis/pid")" 2>/dev/null || true
  echo "| Redis SET ~2 KB, appendfsync always (-c$CONNECTIONS) | ${rps:-?} | ${p99%\"} |"
}

start_server
cache_workloads
stop_server
echo
echo "| write groups: writes per commit | commits per second during the PUT runs |"
echo "| --- | --- |"
echo "$WRITE_SUMMARY"
echo
echo "| peer | writes/s | p99 ms |"
echo "| --- | --- | --- |"
redis_peer

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

# Hits on an encrypted namespace (AES-256-GCM at rest, opened on every read from the
# database) beside a plain one, same server, same 10,000 ~2 KB entries, three alternating
# rounds (medians); with the near-cache on (the default: hot entries are kept opened) and
# off (every hit reads and opens the sealed row).
"$BIN" keys generate > "$WORK/master.key"
ENCRYPTED_ROWS=""
for near in default 0; do
  settings=(TEAMCACHE_MASTER_KEY_FILE="$WORK/master.key")
  [ "$near" = 0 ] && settings+=(TEAMCACHE_NEAR_CACHE_BYTES=0)
  start_server "${settings[@]}"
  TEAMCACHE_MASTER_KEY_FILE="$WORK/master.key" "$BIN" namespaces set sealed --encrypt --settle 0 \
    --data-dir "$WORK/data" >/dev/null 2>&1
  python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 10000 --namespace bench >/dev/null
  python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 10000 --namespace sealed >/dev/null
  plain=(); sealed=()
  for _ in 1 2 3; do
    read -r rps _ _ _ <<<"$(NS=bench KEYS=10000 wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
    plain+=("$rps")
    read -r rps _ _ _ <<<"$(NS=sealed KEYS=10000 wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
    sealed+=("$rps")
  done
  stop_server
  ENCRYPTED_ROWS+="| hits, near-cache ${near/0/off} | ${sealed[*]} | ${plain[*]} | $(ratio "$(median "${sealed[@]}")" "$(median "${plain[@]}")") |"$'\n'
done
echo
echo "| encrypted namespace (3 runs, req/s) | encrypted | plain | median encrypted / median plain |"
echo "| --- | --- | --- | --- |"
printf '%s' "$ENCRYPTED_ROWS"
