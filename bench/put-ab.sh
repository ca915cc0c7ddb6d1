#!/usr/bin/env bash
# Two builds of the service side by side on durable PUTs (bench/lua/put.lua, ~2 KB JSON over
# 100,000 keys, wrk -c64 as bench/put-cpu.sh runs them), each with its own cluster made ready as
# put-cpu.sh's is (WAL segments ahead, a warm-up, VACUUM ANALYZE). Rounds alternate A, B, then
# B, A…: this machine's speed moves by a fifth within minutes (PostgreSQL's CPU a PUT read 68-107
# µs in one afternoon's runs of one build), more than most changes to the write path, so a
# change is judged by B/A within a round pair, not by one put-cpu.sh run against another.
#   BIN_A=path BIN_B=path (default B: this tree's release build)  ROUNDS=6  BENCH_DURATION=8
#   CLIENTS=64
#   ENV_A / ENV_B: settings for one side's server ("TEAMCACHE_COMPRESSION_LEVEL=3 …"): one build,
#   two settings. BIN_A=BIN_B with no settings (A against itself) shows the bench's own spread.
#   SQL_A / SQL_B: statements run on one side's database before it is made ready, one at a time
#   (as BENCH_SQL, which runs on both): "ALTER SYSTEM SET …; SELECT pg_reload_conf()" compares two
#   database settings under one build.
# Per round and side: PUTs a second, p99 (wrk's), the share of PUTs the service itself took over
# 10 ms (its request histogram: see put_durations in lib.sh), the service's and PostgreSQL's CPU a
# PUT, the writes a group carried, and the machine's idle share (both cores).
source "$(dirname "$0")/lib.sh"
need_tools
[ -n "${BIN_A:-}" ] || { echo "BIN_A (the build to compare against) is required" >&2; exit 2; }
if [ -z "${BIN_B:-}" ]; then build_release >/dev/null; BIN_B=$BIN; fi
ROUNDS=${ROUNDS:-6} CLIENTS=${CLIENTS:-64} DURATION=${BENCH_DURATION:-8}
declare -A PIDS PORTS TOKENS

# use SIDE: the lib's helpers (bench_sql, put_store_ready, postgres_ticks) work on SIDE's server.
use() { PORT=${PORTS[$1]} TOKEN=${TOKENS[$1]} PG_DATA="$WORK/$1/data" SERVER_PID=${PIDS[$1]}; export TOKEN; }

# start SIDE BINARY PORT [settings…]: a server with its own cluster under $WORK/SIDE, ready for PUTs.
start() {
  local side=$1 binary=$2 port=$3
  shift 3
  launch_server "$binary" "$WORK/$side" "$port" "$@"
  PIDS[$side]=$LAUNCHED_PID PORTS[$side]=$port TOKENS[$side]=$LAUNCHED_TOKEN
  use "$side"
  local sql="SQL_${side^^}"
  [ -n "${!sql:-}" ] && bench_sql -o /dev/null <<<"${!sql}"
  put_store_ready
}

# run SIDE → "PUT/S P99_MS OVER_10MS_% SERVICE_US POSTGRES_US WRITES_A_GROUP IDLE_%", after a settling pause.
run() {
  local side=$1 out puts sum0 count0 sum1 count1 idle0 total0 idle1 total1 service0 service1 db0 db1 fast0 all0 fast1 all1
  use "$side"
  settle
  read -r sum0 count0 <<<"$(groups)"
  read -r fast0 all0 <<<"$(put_durations)"
  read -r idle0 total0 <<<"$(machine_ticks)"
  service0=$(cpu_ticks "$SERVER_PID") db0=$(postgres_ticks)
  out=$("${PIN_LOAD[@]}" wrk -t"$WRK_THREADS" -c"$CLIENTS" -d"${DURATION}s" --latency -s "$BENCH_DIR/lua/put.lua" \
        "http://127.0.0.1:$PORT")
  service1=$(cpu_ticks "$SERVER_PID") db1=$(postgres_ticks)
  read -r idle1 total1 <<<"$(machine_ticks)"
  read -r sum1 count1 <<<"$(groups)"
  read -r fast1 all1 <<<"$(put_durations)"
  grep -q "Non-2xx" <<<"$out" && { echo "$side: some PUTs failed" >&2; return; }
  puts=$(echo "$out" | awk '/requests in/ {print $1}')
  read -r user kernel <<<"$(cpu_per_request "$service0" "$service1" "$puts")"
  read -r dbu dbs <<<"$(cpu_per_request "$db0" "$db1" "$puts")"
  echo "$(echo "$out" | awk '/Requests\/sec/ {printf "%.0f", $2}') $(to_ms "$(echo "$out" | awk '/ 99%/ {print $2}')")" \
       "$(over_share "$fast0" "$all0" "$fast1" "$all1")" \
       "$(awk -v a="$user" -v b="$kernel" 'BEGIN { printf "%.1f", a + b }')" \
       "$(awk -v a="$dbu" -v b="$dbs" 'BEGIN { printf "%.1f", a + b }')" \
       "$(awk -v s=$((sum1 - sum0)) -v c=$((count1 - count0)) 'BEGIN { if (c > 0) printf "%.1f", s / c; else print "?" }')" \
       "$(awk -v i=$((idle1 - idle0)) -v t=$((total1 - total0)) 'BEGIN { if (t > 0) printf "%.0f", 100 * i / t; else print "?" }')"
}

read -r -a env_a <<<"${ENV_A:-}"
read -r -a env_b <<<"${ENV_B:-}"
start a "$BIN_A" "$PORT" "${env_a[@]}"
start b "$BIN_B" "$((PORT + 2))" "${env_b[@]}"
echo "A: $BIN_A ${ENV_A:-} ${SQL_A:-}"
echo "B: $BIN_B ${ENV_B:-} ${SQL_B:-}"
echo
echo "| round | A PUT/s | B PUT/s | B/A | A p99 ms | B p99 ms | A over 10 ms % | B over 10 ms % | A service µs | B service µs |" \
     "A PostgreSQL µs | B PostgreSQL µs | A writes a group | B writes a group | A idle % | B idle % |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
ratios=()
for round in $(seq 1 "$ROUNDS"); do
  # Which side goes first alternates too: a run right after the other side's may differ.
  if [ $((round % 2)) = 1 ]; then
    read -r ra pa oa sa da ga ia <<<"$(run a)"; read -r rb pb ob sb db gb ib <<<"$(run b)"
  else
    read -r rb pb ob sb db gb ib <<<"$(run b)"; read -r ra pa oa sa da ga ia <<<"$(run a)"
  fi
  [ -n "${ia:-}" ] && [ -n "${ib:-}" ] || { echo "round $round failed" >&2; exit 1; }
  ratios+=("$(ratio "$rb" "$ra")")
  echo "| $round | $ra | $rb | ${ratios[-1]} | $pa | $pb | $oa | $ob | $sa | $sb | $da | $db | $ga | $gb | $ia | $ib |"
  ia="" ib=""
done
echo
echo "median B/A over $ROUNDS rounds: $(middle "${ratios[@]}") (each: $(echo "${ratios[@]}"))"
