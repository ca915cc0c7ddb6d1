#!/usr/bin/env bash
# What the change feed costs and gives: HTTP PUTs (~2 KB JSON, wrk -c64) and pgbench's
# tc_put_entry (-c16) with the feed triggers on and off, three alternating rounds each on the
# same cluster (medians; off/on is the ratio to read), then how fast a follower drains a
# backlog: /changes pages of 1,000 read from cursor 0 after the writes, changes per second.
source "$(dirname "$0")/lib.sh"
need_tools
build_release
CONNECTIONS=${BENCH_CONNECTIONS:-64}
PG_CLIENTS=${BENCH_PG_CLIENTS:-16}
TRIGGERS="entries_feed_insert entries_feed_update entries_feed_delete"

sql() { psql -h "$(pg_socket)" -U postgres teamcache -qAtc "$1"; }
feed() {
  local verb=$1 statement=""
  for trigger in $TRIGGERS; do statement+="ALTER TABLE entries $verb TRIGGER $trigger; "; done
  sql "$statement"
}

start_server
python3 "$BENCH_DIR/pgbench_sql.py" "$WORK"
declare -A http pg
for _ in 1 2 3; do
  for mode in ENABLE DISABLE; do
    feed "$mode"
    read -r rps _ _ _ <<<"$(wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/put.lua")"
    read -r tps _ <<<"$(pgbench_run "$PG_CLIENTS" "$WORK/upsert.sql")"
    http[$mode]+="$rps "; pg[$mode]+="$tps "
  done
done
feed ENABLE
# shellcheck disable=SC2086
on_http=$(median ${http[ENABLE]}); off_http=$(median ${http[DISABLE]})
# shellcheck disable=SC2086
on_pg=$(median ${pg[ENABLE]}); off_pg=$(median ${pg[DISABLE]})
echo "| writes | feed on (median of 3) | feed off (median of 3) | on / off |"
echo "| --- | --- | --- | --- |"
echo "| HTTP PUT ~2 KB JSON, req/s (-c$CONNECTIONS) | $on_http | $off_http | $(ratio "$on_http" "$off_http") |"
echo "| pgbench tc_put_entry, TPS (-c$PG_CLIENTS) | $on_pg | $off_pg | $(ratio "$on_pg" "$off_pg") |"

# The follower: every change of the bench namespace from cursor 0, 1,000 a page, over one
# kept-alive connection (a Python loop, as a client would follow).
namespace=$(sql "SELECT namespace FROM entry_changes GROUP BY namespace ORDER BY count(*) DESC LIMIT 1")
read -r total seconds <<<"$(python3 - "$PORT" "$namespace" <<'PY'
import http.client, json, os, sys, time
port, namespace = int(sys.argv[1]), sys.argv[2]
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
cursor, total, started = "0", 0, time.monotonic()
while True:
    connection.request("GET", f"/v1/caches/{namespace}/changes?since={cursor}&limit=1000",
                       headers={"Authorization": "Bearer " + os.environ["TOKEN"]})
    page = json.loads(connection.getresponse().read())
    total += len(page["changes"])
    cursor = page["next"]
    if not page["more"]:
        break
print(total, f"{time.monotonic() - started:.2f}")
PY
)"
echo
echo "| follower from cursor 0 | changes | seconds | changes/s |"
echo "| --- | --- | --- | --- |"
echo "| pages of 1,000, no bodies, one connection | $total | $seconds | $(awk -v n="$total" -v s="$seconds" 'BEGIN { printf "%.0f", n / s }') |"
stop_server
