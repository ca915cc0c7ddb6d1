#!/usr/bin/env bash
# What a hit, a miss, a PUT, the stats, a listing page and one eviction cycle cost as the
# store grows (#32): one store filled in steps to each of GROWTH_SIZES entries (default
# 100,000 and 1,000,000; add 10000000 for the disk-sized run, about 40 minutes more), ~2 KB
# JSON stored gzip (~600 bytes a row), 10% of each step already expired (past the stale
# retention: the eviction cycle's work). Prints markdown: per size, the fill and VACUUM
# times, bytes per entry and each index's size, request rates and latencies (wrk, random
# keys over the whole store, so the near-cache holds a small share at the larger sizes),
# the stats and listing latencies, the eviction cycle's time, and autovacuum's runs.
#
# The fill bypasses the service: rows are inserted by SQL in chunks of 200,000 (the
# statement-level counting and feed triggers fire as for any write), then each live row gets
# its access row as tc_put_entry would give it. What the rows are like, not how they got
# there, is what the requests pay for. (A hit on key-N with N % 10 = 9 finds nothing: one
# request in ten of the hit run is a miss.)
source "$(dirname "$0")/lib.sh"
need_tools
build_release
SIZES=${GROWTH_SIZES:-100000 1000000}
CONNECTIONS=${BENCH_CONNECTIONS:-64}
CHUNK=200000

psql_run() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- psql -h "$(pg_socket)" -U postgres -d teamcache -qAt "$@"
  else psql -h "$(pg_socket)" -U postgres -d teamcache -qAt "$@"; fi
}
seconds() { local started=$1; awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }'; }

# The stored body (gzip of the populate script's JSON) and its sizes, as the fill's SQL values.
read -r BODY_HEX IDENTITY_SIZE STORED_SIZE <<<"$(python3 - <<'PY'
import gzip, json
items = [{"id": j, "name": f"item {j} of 0", "score": j * 7 % 1000, "tags": ["alpha", "beta"], "ok": True}
         for j in range(24)]
identity = json.dumps(items).encode()
stored = gzip.compress(identity, 6)
print(stored.hex(), len(identity), len(stored))
PY
)"

# fill FROM TO: rows FROM..TO-1, each with its access row: key-N, or old-N (expired) for N % 10 = 9.
fill() {
  local from=$1 to=$2 start end
  for ((start = from; start < to; start += CHUNK)); do
    end=$((start + CHUNK < to ? start + CHUNK : to))
    psql_run <<SQL
BEGIN;
WITH new AS (
  INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag, created_at,
                       updated_at, expires_at)
  SELECT 'bench', convert_to(CASE WHEN i % 10 = 9 THEN 'old-' ELSE 'key-' END || i, 'UTF8'), '\\x$BODY_HEX'::bytea,
         'gzip', 'application/json', $IDENTITY_SIZE, $STORED_SIZE, '"g' || i || '"', now(), now(),
         CASE WHEN i % 10 = 9 THEN now() - interval '30 days' ELSE now() + interval '30 days' END
  FROM generate_series($start, $((end - 1))) AS i
  RETURNING id, namespace)
INSERT INTO entry_access (entry_id, namespace, hit_count, last_accessed_at) SELECT id, namespace, 0, now() FROM new;
COMMIT;
SQL
  done
}

# p50 of five timed requests (ms): curl's total time.
timed() {
  local times=()
  for _ in 1 2 3 4 5; do
    times+=("$(curl -s -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT$1")")
  done
  printf '%s\n' "${times[@]}" | sort -g | sed -n 3p | awk '{ printf "%.1f", $1 * 1000 }'
}

# Scheduled eviction out of the way: the cycle is run (and timed) by hand at each size.
start_server TEAMCACHE_EVICTION_INTERVAL=86400
echo "Sizes: $SIZES. Bodies ~$IDENTITY_SIZE bytes of JSON, $STORED_SIZE stored. Requests: wrk -c$CONNECTIONS, ${DURATION}s each."
echo
echo "| entries | fill s | VACUUM ANALYZE s | heap+TOAST B/entry | indexes B/entry | hit req/s | hit p99 ms | miss req/s | miss p99 ms | PUT req/s | PUT p99 ms | stats ms | listing page ms | eviction cycle s (evicted) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
filled=0
index_rows=()
for size in $SIZES; do
  started=$(date +%s.%N); fill "$filled" "$size"; fill_s=$(seconds "$started")
  started=$(date +%s.%N); psql_run -c "VACUUM ANALYZE entries" -c "VACUUM ANALYZE entry_access"; vacuum_s=$(seconds "$started")
  filled=$size
  read -r rows heap indexes <<<"$(psql_run -F ' ' -c "SELECT count(*), pg_total_relation_size('entries') - pg_indexes_size('entries'),
    pg_indexes_size('entries') + pg_indexes_size('entry_access') FROM entries")"
  index_rows+=("$size $(psql_run -F ' ' -c "SELECT string_agg(indexrelname || '=' || round(pg_relation_size(indexrelid)::numeric / $rows, 1), ' ' ORDER BY indexrelname)
    FROM pg_stat_user_indexes WHERE relname IN ('entries', 'entry_access')")")
  live=$((size - size / 10))
  # Hits over every live key (key-N with N % 10 != 9 exist; the rest answer 404: one in ten).
  read -r hit hit99 _ <<<"$(KEYS="$live" wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
  read -r miss miss99 _ <<<"$(KEYS="$live" KEY_PREFIX=absent- wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")"
  read -r put put99 _ <<<"$(wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/put.lua")"
  stats_ms=$(timed "/v1/caches/bench/stats")
  listing_ms=$(timed "/v1/caches/bench/entries?after=key-5&limit=50")
  started=$(date +%s.%N)
  evicted=$("$BIN" evict --data-dir "$WORK/data" 2>&1 | tee -a "$WORK/evict.log" | awk '$1 == "expired:" { print $2 }')
  evict_s=$(seconds "$started")
  per_heap=$(awk -v b="$heap" -v n="$rows" 'BEGIN { printf "%d", b / n }')
  per_index=$(awk -v b="$indexes" -v n="$rows" 'BEGIN { printf "%d", b / n }')
  echo "| $size | $fill_s | $vacuum_s | $per_heap | $per_index | $hit | $hit99 | $miss | $miss99 | $put | $put99 | $stats_ms | $listing_ms | $evict_s (${evicted:-?}) |"
done
echo
echo "Index bytes per entry (entries and entry_access, after each step's VACUUM):"
echo
for row in "${index_rows[@]}"; do echo "- ${row%% *} entries: ${row#* }"; done
echo
echo "Autovacuum and autoanalyze runs over the whole run (besides the VACUUM at each step):"
echo
psql_run -F ' ' -c "SELECT relname, autovacuum_count, autoanalyze_count, n_dead_tup FROM pg_stat_user_tables
  WHERE autovacuum_count + autoanalyze_count > 0 ORDER BY relname" | awk '{ printf "- %s: %s autovacuum, %s autoanalyze, %s dead rows now\n", $1, $2, $3, $4 }'
