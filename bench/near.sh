#!/usr/bin/env bash
# Hits answered from the near-cache against nginx serving the same bytes from files
# (gzip_static for gzip clients): 10,000 entries of ~2 KB JSON, random keys, wrk -t2 -c64,
# auth on and access logs on for both; BENCH_ROUNDS (3) alternating rounds, medians. The database's
# transactions per hit during each TeamCache run (pg_stat_database), and the same hits
# with the near-cache off (TEAMCACHE_NEAR_CACHE_BYTES=0) for comparison. For each side, the
# CPU a request cost the server (user and kernel time, from /proc), the database's included
# for TeamCache, so the ratio can be read against where the time goes. BENCH_PIN=1: each
# server on core 0 alone (one event loop, one nginx worker), wrk on core 1 (bench/lib.sh).
# The ratio is also given as each round's own (TeamCache's run and the nginx run after it, a
# minute apart at most), their median and range: the machine's speed drifts between rounds.
source "$(dirname "$0")/lib.sh"
need_tools
build_release
CONNECTIONS=${BENCH_CONNECTIONS:-64}
ROUNDS=${BENCH_ROUNDS:-3}
transactions() {
  psql -h "$(pg_socket)" -U postgres -d teamcache -tAc \
    "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'teamcache'"
}
# The database's CPU for a round's hits is read once the round's last flush is done (FLUSH_WAIT,
# bench/lib.sh): so it counts, and it never falls in the nginx run after it.
# hits GZIP → "RPS P50 P99 TRANSACTIONS_PER_HIT USER_US SYSTEM_US DATABASE_US" (CPU per hit)
hits() {
  local before after out cpu0 cpu1 db0 db1
  settle
  before=$(transactions)
  cpu0=$(cpu_ticks "$SERVER_PID") db0=$(postgres_ticks)
  out=$(GZIP=$1 KEYS=10000 wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua")
  cpu1=$(cpu_ticks "$SERVER_PID")
  sleep "$FLUSH_WAIT"
  db1=$(postgres_ticks)
  after=$(transactions)
  read -r rps p50 p99 _ <<<"$out"
  local requests; requests=$(awk -v r="$rps" -v d="$DURATION" 'BEGIN { printf "%d", r * d }')
  read -r dbuser dbsystem <<<"$(cpu_per_request "$db0" "$db1" "$requests")"
  echo "$rps $p50 $p99 $(awk -v t=$((after - before)) -v n="$requests" 'BEGIN { printf "%.4f", t / n }')" \
    "$(cpu_per_request "$cpu0" "$cpu1" "$requests")" \
    "$([ "$dbuser" = "?" ] && echo "?" || awk -v a="$dbuser" -v b="$dbsystem" 'BEGIN { printf "%.1f", a + b }')"
}
# nginx_hits GZIP → "RPS P50 P99 USER_US SYSTEM_US" (CPU per request of its workers)
nginx_hits() {
  local out cpu0 cpu1 workers
  settle
  workers=$(pgrep -d ' ' -P "$NGINX_PID") || { echo "nginx has no workers" >&2; return 1; }
  cpu0=$(cpu_ticks $workers)
  out=$(GZIP=$1 KEYS=10000 wrk_run "$CONNECTIONS" "http://127.0.0.1:$NGINX_PORT" -s "$BENCH_DIR/lua/get.lua")
  cpu1=$(cpu_ticks $workers)
  read -r rps p50 p99 _ <<<"$out"
  echo "$rps $p50 $p99 $(cpu_per_request "$cpu0" "$cpu1" "$(awk -v r="$rps" -v d="$DURATION" 'BEGIN { printf "%d", r * d }')")"
}

python3 "$BENCH_DIR/mirror_files.py" --root "$WORK/www" --count 10000 >&2
start_nginx
start_server
python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 10000 >&2
# Every key read twice (admitted on its second read), then a short run to settle.
DURATION=5 KEYS=10000 wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua" >/dev/null
sleep "$FLUSH_WAIT"
declare -A ours50 ours99 oursrps ourstx theirs theirs50 theirs99 oursu ourss oursdb theirsu theirss rounds
for gz in 0 1; do
  o=() o50=() o99=() otx=() ou=() os=() odb=() n=() n50=() n99=() nu=() ns=() r=()
  for _ in $(seq 1 "$ROUNDS"); do
    read -r rps p50 p99 tx user system db <<<"$(hits "$gz")"
    o+=("$rps"); o50+=("$p50"); o99+=("$p99"); otx+=("$tx"); ou+=("$user"); os+=("$system"); odb+=("$db")
    read -r rps p50 p99 user system <<<"$(nginx_hits "$gz")"
    n+=("$rps"); n50+=("$p50"); n99+=("$p99"); nu+=("$user"); ns+=("$system")
    r+=("$(ratio "${o[-1]}" "$rps")")
  done
  rounds[$gz]="$(median "${r[@]}") ($(printf '%s\n' "${r[@]}" | sort -g | head -n 1)-$(printf '%s\n' "${r[@]}" | sort -g | tail -n 1))"
  oursrps[$gz]=$(median "${o[@]}"); ours50[$gz]=$(median "${o50[@]}"); ours99[$gz]=$(median "${o99[@]}")
  ourstx[$gz]=$(median "${otx[@]}"); oursu[$gz]=$(median "${ou[@]}"); ourss[$gz]=$(median "${os[@]}")
  oursdb[$gz]=$(median "${odb[@]}")
  theirs[$gz]=$(median "${n[@]}"); theirs50[$gz]=$(median "${n50[@]}"); theirs99[$gz]=$(median "${n99[@]}")
  theirsu[$gz]=$(median "${nu[@]}"); theirss[$gz]=$(median "${ns[@]}")
done
near_bytes=$(curl -s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/metrics" | awk '$1 == "teamcache_near_cache_bytes" {print $2}')
stop_server
start_server TEAMCACHE_NEAR_CACHE_BYTES=0
python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 10000 >&2
DURATION=5 KEYS=10000 wrk_run "$CONNECTIONS" "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/get.lua" >/dev/null
sleep "$FLUSH_WAIT"
read -r off0 off050 off099 offtx0 _ <<<"$(hits 0)"
read -r off1 off150 off199 offtx1 _ <<<"$(hits 1)"
layout=$([ "${BENCH_PIN:-0}" = 1 ] && echo "servers pinned to core 0 (1 loop / 1 worker), wrk -t1 on core 1" \
  || echo "servers and wrk -t2 unpinned on every core")
echo "Layout: $layout."
echo
echo "| hits (-c$CONNECTIONS, median of $ROUNDS) | teamcache req/s | p50 ms | p99 ms | db transactions per hit | nginx req/s | p50 ms | p99 ms | ratio | rounds' ratios: median (range) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for gz in 0 1; do
  label=$([ "$gz" = 1 ] && echo "gzip clients (nginx gzip_static)" || echo "identity clients")
  echo "| $label, near-cache on | ${oursrps[$gz]} | ${ours50[$gz]} | ${ours99[$gz]} | ${ourstx[$gz]} | ${theirs[$gz]} | ${theirs50[$gz]} | ${theirs99[$gz]} | $(ratio "${oursrps[$gz]}" "${theirs[$gz]}") | ${rounds[$gz]} |"
done
echo "| identity clients, near-cache off (one run) | $off0 | $off050 | $off099 | $offtx0 | ${theirs[0]} | | | $(ratio "$off0" "${theirs[0]}") | |"
echo "| gzip clients, near-cache off (one run) | $off1 | $off150 | $off199 | $offtx1 | ${theirs[1]} | | | $(ratio "$off1" "${theirs[1]}") | |"
echo
echo "| CPU per request, µs (median of $ROUNDS) | teamcache user | teamcache kernel | its database | nginx user | nginx kernel |"
echo "| --- | --- | --- | --- | --- | --- |"
for gz in 0 1; do
  label=$([ "$gz" = 1 ] && echo "gzip clients" || echo "identity clients")
  echo "| $label, near-cache on | ${oursu[$gz]} | ${ourss[$gz]} | ${oursdb[$gz]} | ${theirsu[$gz]} | ${theirss[$gz]} |"
done
echo
echo "Near-cache held ${near_bytes%.*} bytes for 10,000 entries (TEAMCACHE_NEAR_CACHE_BYTES default 64 MiB)."
