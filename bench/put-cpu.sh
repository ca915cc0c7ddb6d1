#!/usr/bin/env bash
# Where a PUT's CPU goes: the service's (user and kernel) and PostgreSQL's (the embedded
# cluster's processes, exited backends included), per PUT answered, over ROUNDS runs of
# wrk -c64 (CLIENTS) of bench/lua/put.lua (~2 KB JSON over 100,000 keys); then the same for the plain
# per-call upsert anchor (pgbench -c16, ANCHOR_CLIENTS), per upsert. Noisy: read the rounds' spread first.
# Two more columns say what bounds a round: the writes a group statement carried (the service's
# teamcache_db_write_batch_size), and the share of both cores left idle (/proc/stat): idle
# cores with large groups mean the group statements, one at a time, are the bound, not CPU.
# Beside wrk's p99, the share of PUTs the service itself took over 10 ms (put_durations, lib.sh).
#   ROUNDS=3 BENCH_DURATION=8
#   CLIENTS=64 (wrk's connections), ANCHOR_CLIENTS=16 (pgbench's): compare p99s at one
#   concurrency (CLIENTS=ANCHOR_CLIENTS): every writer in flight waits out a slow WAL flush, so
#   a p99 grows with the writers in flight, whoever serves them.
#   PIN_DATABASE=1: PostgreSQL alone on core 0, the service and the load generators (wrk,
#   pgbench) on core 1: neither side's client takes CPU from the database, which has one
#   core for both (the anchor, which used both cores' worth of database time, slows).
#   BENCH_SQL: statements run on the service's database before it is populated, to measure
#   what a part of the schema costs a PUT (a trigger disabled, an index dropped); the anchor
#   runs on the same database. An experiment only: the service's behaviour changes with it.
#   Each statement runs on its own (psql reading them from its input), so VACUUM and
#   ALTER SYSTEM work too. After ALTER SYSTEM, SELECT pg_reload_conf() applies what a reload can
#   (settings read at a session's start reach only sessions opened later, and some settings
#   need a restart: not these runs).
source "$(dirname "$0")/lib.sh"
need_tools
build_release
CLIENTS=${CLIENTS:-64} ANCHOR_CLIENTS=${ANCHOR_CLIENTS:-16}
start_server
LOAD=()
if [ "${PIN_DATABASE:-0}" = 1 ]; then
  postmaster=$(head -n 1 "$WORK/data/postgres/postmaster.pid")
  # Backends fork from the postmaster later and inherit its core.
  for pid in "$postmaster" $(pgrep -P "$postmaster"); do taskset -a -p -c 0 "$pid" >/dev/null; done
  taskset -a -p -c 1 "$SERVER_PID" >/dev/null
  LOAD=(taskset -c 1)
fi
put_store_ready
python3 "$BENCH_DIR/pgbench_sql.py" "$WORK"
psql -h "$(pg_socket)" -U postgres teamcache -qf "$WORK/plain_table.sql"
# The cluster's WAL so far: bytes (the insert position: exact) and full-page images
# (pg_stat_wal: approximate, since a session reports its counts at most once a second, and an
# idle one's last second only after ten: a round's last second may count in the next one).
wal() {
  sleep 1.2
  bench_sql -tAF ' ' \
    -c "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn, wal_fpi FROM pg_stat_wal"
}
# numbers VALUE...: stops the run unless every value is a whole number (a reading that failed
# would otherwise be 0 in the arithmetic, and print wrong figures).
numbers() {
  local value
  for value in "$@"; do [[ $value =~ ^[0-9]+$ ]] || { echo "not a reading: '$value'" >&2; exit 1; }; done
}
# per_put AMOUNT COUNT DECIMALS → AMOUNT / COUNT
per_put() { awk -v a="$1" -v n="$2" -v d="$3" 'BEGIN { if (n > 0) printf "%.*f", d, a / n; else print "?" }'; }
echo "| round | PUT/s | p99 ms | over 10 ms % | service user µs | service kernel µs | PostgreSQL µs | writes a group | idle % |" \
     "WAL bytes a PUT | full-page images a PUT |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for round in $(seq 1 "${ROUNDS:-3}"); do
  read -r sum0 count0 <<<"$(groups)"
  read -r fast0 all0 <<<"$(put_durations)"
  read -r wal0 fpi0 <<<"$(wal)"
  numbers "$wal0" "$fpi0"
  read -r idle0 total0 <<<"$(machine_ticks)"
  service0=$(cpu_ticks "$SERVER_PID") db0=$(postgres_ticks)
  out=$("${LOAD[@]}" wrk -t2 -c"$CLIENTS" -d"${DURATION}s" --latency -s "$BENCH_DIR/lua/put.lua" "http://127.0.0.1:$PORT")
  service1=$(cpu_ticks "$SERVER_PID") db1=$(postgres_ticks)
  read -r idle1 total1 <<<"$(machine_ticks)"
  read -r sum1 count1 <<<"$(groups)"
  read -r fast1 all1 <<<"$(put_durations)"
  read -r wal1 fpi1 <<<"$(wal)"
  numbers "$wal1" "$fpi1"
  echo "$out" | grep -q "Non-2xx" && { echo "$out"; echo "some PUTs failed: not counted as PUTs" >&2; exit 1; }
  puts=$(echo "$out" | awk '/requests in/ {print $1}')
  read -r user kernel <<<"$(cpu_per_request "$service0" "$service1" "$puts")"
  read -r dbu dbs <<<"$(cpu_per_request "$db0" "$db1" "$puts")"
  echo "| $round | $(echo "$out" | awk '/Requests\/sec/ {print $2}') | $(to_ms "$(echo "$out" | awk '/ 99%/ {print $2}')") |" \
       "$(over_share "$fast0" "$all0" "$fast1" "$all1") |" \
       "$user | $kernel | $(awk -v a="$dbu" -v b="$dbs" 'BEGIN { printf "%.1f", a + b }') |" \
       "$(awk -v s0="$sum0" -v s1="$sum1" -v c0="$count0" -v c1="$count1" \
           'BEGIN { if (c1 > c0) printf "%.1f", (s1 - s0) / (c1 - c0); else print "?" }') |" \
       "$(awk -v i=$((idle1 - idle0)) -v t=$((total1 - total0)) 'BEGIN { if (t > 0) printf "%.0f", 100 * i / t; else print "?" }') |" \
       "$(per_put $((wal1 - wal0)) "$puts" 0) | $(per_put $((fpi1 - fpi0)) "$puts" 2) |"
done
read -r wal0 fpi0 <<<"$(wal)"
numbers "$wal0" "$fpi0"
db0=$(postgres_ticks)
out=$(cd "$WORK" && "${LOAD[@]}" pgbench -n -M prepared -c "$ANCHOR_CLIENTS" -j 2 -T "$DURATION" \
      -f "$WORK/plain_upsert.sql" -l \
      -h "$(pg_socket)" -U postgres teamcache 2>&1)
# The 99th percentile of the per-transaction log's latencies (µs), as pgbench_run reads it.
p99=$(cat "$WORK"/pgbench_log.* | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END { printf "%.2f", a[int(NR*0.99)]/1000 }')
rm -f "$WORK"/pgbench_log.*
# pgbench's backends have just exited: their CPU is counted once the postmaster has reaped
# them (read at once, their CPU was in neither reading: 0.2-1.3 µs an upsert; it is ~67).
sleep 2
db1=$(postgres_ticks)
upserts=$(echo "$out" | awk '/number of transactions actually processed/ {split($NF, a, "/"); print a[1]}')
read -r wal1 fpi1 <<<"$(wal)"
numbers "$wal1" "$fpi1"
read -r dbu dbs <<<"$(cpu_per_request "$db0" "$db1" "$upserts")"
echo
echo "plain per-call upsert (pgbench -c$ANCHOR_CLIENTS): $(echo "$out" | awk '/^tps/ {print $3; exit}') TPS, p99 $p99 ms," \
     "PostgreSQL $(awk -v a="$dbu" -v b="$dbs" 'BEGIN { printf "%.1f", a + b }') µs an upsert (pgbench's own CPU not counted)," \
     "WAL $(per_put $((wal1 - wal0)) "$upserts" 0) bytes and $(per_put $((fpi1 - fpi0)) "$upserts" 2) full-page images an upsert"
stop_server
