#!/usr/bin/env bash
# The numbers behind docs/scaling.md: bytes per stored entry (~2 KB JSON bodies, gzip-stored,
# every index counted) measured on the embedded PostgreSQL, and the Zipf load split over N
# Citus workers (bench/shard_sim.py). Prints markdown. About a minute.
source "$(dirname "$0")/lib.sh"
COUNT=${SCALING_ENTRIES:-20000}
[ -x "$BIN" ] || build_release
start_server
python3 "$BENCH_DIR/populate.py" --port "$PORT" --count "$COUNT" --namespace scaling >/dev/null
# The embedded cluster, over its private socket (as postgres when root, like the service).
psql_run() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- psql -h "$(pg_socket)" -U postgres -d teamcache -At -c "$1"
  else psql -h "$(pg_socket)" -U postgres -d teamcache -At -c "$1"; fi
}
psql_run "VACUUM ANALYZE entries" >/dev/null
read -r entries heap toast indexes identity stored <<<"$(psql_run "SELECT count(*), pg_relation_size('entries'),
  pg_total_relation_size('entries') - pg_relation_size('entries') - pg_indexes_size('entries'),
  pg_indexes_size('entries'), sum(identity_size), sum(octet_length(body)) FROM entries" | tr '|' ' ')"
echo "| entries | body as sent (avg) | body stored, gzip (avg) | heap + TOAST per entry | indexes per entry | total per entry |"
echo "| --- | --- | --- | --- | --- | --- |"
echo "| $entries | $((identity / entries)) B | $((stored / entries)) B | $(((heap + toast) / entries)) B | $((indexes / entries)) B | $(((heap + toast + indexes) / entries)) B |"
echo
python3 "$BENCH_DIR/shard_sim.py"
