# Shared by the benchmark scripts: build, start and stop the service and the anchors, parse
# wrk and pgbench output. Every run is side by side with its anchor on this same machine,
# and results are reported as ratios (machines here are noisy: compare within one run).
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
export PATH="$PATH:/opt/swift/usr/bin"
WORK=$(mktemp -d /tmp/teamcache-bench.XXXXXX)
chmod 755 "$WORK"
SERVER_PID=""
NGINX_PID=""
DURATION=${BENCH_DURATION:-10}
PORT=${BENCH_PORT:-18580}
NGINX_PORT=${BENCH_NGINX_PORT:-18581}
BIN="${BENCH_BIN:-$REPO/.build/release/teamcache}"
# BENCH_PIN=1: the servers (TeamCache with one event loop, nginx with one worker) on core 0,
# the load generator (wrk, one thread) on core 1, so the ratio is the servers' CPU ratio and
# not a share of cores fought over with wrk. Unset: everything on every core.
if [ "${BENCH_PIN:-0}" = 1 ]; then
  PIN_SERVER=(taskset -c 0) PIN_LOAD=(taskset -c 1) WRK_THREADS=1 NGINX_WORKERS=1 SERVER_LOOPS=(TEAMCACHE_EVENT_LOOPS=1)
else
  PIN_SERVER=() PIN_LOAD=() WRK_THREADS=2 NGINX_WORKERS=2 SERVER_LOOPS=()
fi

LAUNCHED=()
bench_cleanup() {
  local pid
  # SERVER_PID too: the callgrind benches start theirs by hand.
  for pid in $SERVER_PID "${LAUNCHED[@]}"; do kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; done
  [ -n "$NGINX_PID" ] && kill -QUIT "$NGINX_PID" 2>/dev/null || true
  sleep 0.3
  rm -rf "$WORK"
}
trap bench_cleanup EXIT
trap "exit 130" INT TERM

need_tools() {
  local missing=()
  command -v wrk >/dev/null || missing+=(wrk)
  command -v nginx >/dev/null || missing+=(nginx-light)
  command -v pgbench >/dev/null || missing+=(postgresql-contrib)
  command -v redis-server >/dev/null || missing+=(redis-server)
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

build_release() {
  (cd "$REPO" && swift build -c release --product teamcache 2>&1 | tail -n 1)
}

# launch_server BINARY DIR PORT [extra env assignments...]: a server with its own embedded
# PostgreSQL under DIR/data, auth on, listening on PORT; sets LAUNCHED_PID and LAUNCHED_TOKEN.
# The cleanup stops every server launched (started or not).
launch_server() {
  local binary=$1 dir=$2 port=$3
  shift 3
  rm -rf "$dir/data"
  mkdir -p "$dir"
  # Every bench client comes from 127.0.0.1 (http.sh holds 10,000 idle connections). The log
  # level before the caller's settings, so a caller's own (gateway.sh: warn) wins.
  "${PIN_SERVER[@]}" env TEAMCACHE_MAX_CONNECTIONS_PER_CLIENT=100000 "${SERVER_LOOPS[@]}" \
    TEAMCACHE_LOG_LEVEL="${BENCH_LOG_LEVEL:-info}" "$@" "$binary" serve --listen "127.0.0.1:$port" \
    --data-dir "$dir/data" </dev/null >"$dir/serve.out" 2>"$dir/serve.log" &
  LAUNCHED_PID=$!
  LAUNCHED+=("$LAUNCHED_PID")
  wait_listening 240 "$dir" "$LAUNCHED_PID"
  LAUNCHED_TOKEN=$("$binary" tokens create --name bench --namespaces '*' --scopes read,write,admin \
                   --data-dir "$dir/data" | tail -n 1)
}

# start_server [extra env assignments...]: the bench's server ($BIN under $WORK on $PORT).
start_server() {
  launch_server "$BIN" "$WORK" "$PORT" "$@"
  SERVER_PID=$LAUNCHED_PID TOKEN=$LAUNCHED_TOKEN
  export TOKEN
}

# Before each measured run of hits: a TeamCache run's access counts are flushed to PostgreSQL
# (~0.1 s of its CPU, unpinned) in the second after it ends, which fell on the run after it.
settle() { sleep "${BENCH_SETTLE:-2}"; }

# wait_listening TRIES [DIR] [PID]: until the server started as PID ($SERVER_PID) with its
# output in DIR ($WORK) says it listens (0.25 s a try).
wait_listening() {
  local dir=${2:-$WORK} pid=${3:-$SERVER_PID}
  for _ in $(seq 1 "$1"); do
    grep -q "listening on" "$dir/serve.out" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$dir/serve.log"; return 1; }
    sleep 0.25
  done
  echo "the server did not start listening" >&2
  return 1
}

stop_server() {
  [ -n "$SERVER_PID" ] && kill -TERM "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# The embedded cluster's folder: the bench's server's ($WORK/data), or PG_DATA's (put-ab.sh runs
# two servers, each with its own).
pg_data() { echo "${PG_DATA:-$WORK/data}"; }

# The embedded cluster's socket folder, for pgbench.
pg_socket() { echo "$(pg_data)/run"; }

# bench_sql ARGS...: psql on the service's database as its superuser, stopping at the first error.
bench_sql() { psql -X -h "$(pg_socket)" -U postgres teamcache -v ON_ERROR_STOP=1 -q "$@"; }

# put_store_ready: the PUT benches' store: BENCH_SQL's statements run one by one on the service's
# database (an index dropped, a trigger disabled, ALTER SYSTEM…), 10,000 entries, a warm-up of
# bench/lua/put.lua, then VACUUM ANALYZE. The warm-up's tens of thousands of new rows start the
# first autovacuum of entries (it sets every page's visibility), which fell on the first measured
# round (96-138 µs of PostgreSQL CPU a PUT against 52-86 after): done before anything is measured.
# Before the warm-up, WAL segments are made ahead (wal_segments_ready).
put_store_ready() {
  [ -n "${BENCH_SQL:-}" ] && bench_sql -o /dev/null <<<"$BENCH_SQL"
  python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 10000 >/dev/null
  # Before the warm-up: after its checkpoints, the first write to each page logs the whole page,
  # which the warm-up pays instead of the first measured round.
  wal_segments_ready
  wrk_run 64 "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/put.lua" >/dev/null
  bench_sql -c "VACUUM ANALYZE entries, entry_access, entry_changes, counter_deltas"
}

# wal_segments_ready: WAL segments made ahead, so the measured writes reuse them as a running
# cluster does. A fresh cluster has none: the commit that needs the next 16 MB segment creates
# it and fills it with zeros, holding every other commit meanwhile (about one a second at this
# machine's PUT rate, bench/results/2026-12-06-writes-7.md). Writing ~1 GB of WAL (max_wal_size)
# and checkpointing leaves those segments to be recycled: enough for the warm-up, three rounds and
# the anchor at this machine's rates.
wal_segments_ready() {
  bench_sql -c "CREATE TABLE bench_wal_warmup AS SELECT repeat('x', 1000) AS x FROM generate_series(1, 1000000)" \
    -c "DROP TABLE bench_wal_warmup" -c "CHECKPOINT"
}

# start_nginx: serves the files under $WORK/www, 2 workers (1 when pinned), buffered access log,
# and open file descriptors cached, as a production static server runs: without the cache every
# request opens, stats and closes its file, which cost nginx 15-20% of its rate on ~2 KB files
# here (bench/results/2026-12-07-anchor.md). BENCH_NGINX_UNCACHED=1 gives the anchor the results
# before that file used, for comparison. sendfile stays off (nginx's default): for these sizes it
# was slower than a read and a write.
start_nginx() {
  local file_cache="open_file_cache max=65536 inactive=300s; open_file_cache_valid 300s;"
  [ "${BENCH_NGINX_UNCACHED:-0}" = 1 ] && file_cache=""
  mkdir -p "$WORK/www" "$WORK/nginx"
  cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes $NGINX_WORKERS;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 16384; }
http {
  access_log $WORK/nginx/access.log combined buffer=64k;
  default_type application/json;
  keepalive_requests 100000;
  gzip_static on;
  $file_cache
  server {
    listen 127.0.0.1:$NGINX_PORT reuseport backlog=4096;
    root $WORK/www;
  }
}
CONF
  "${PIN_SERVER[@]}" nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
  sleep 0.3
  NGINX_PID=$(cat "$WORK/nginx/nginx.pid")
}

# wrk_run CONNECTIONS URL [wrk args...] → prints "RPS P50_MS P99_MS"
wrk_run() {
  local connections=$1 url=$2
  shift 2
  local out
  out=$(ulimit -n "$(ulimit -Hn)"; "${PIN_LOAD[@]}" wrk -t"$WRK_THREADS" -c"$connections" -d"${DURATION}s" --latency "$@" "$url" 2>&1)
  echo "$out" >> "$WORK/wrk.log"
  local rps p50 p99
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  p50=$(echo "$out" | awk '$1=="50%" {print $2}')
  p99=$(echo "$out" | awk '$1=="99%" {print $2}')
  echo "$rps $(to_ms "$p50") $(to_ms "$p99") $(echo "$out" | awk '/Non-2xx/ {print $4}')"
}

to_ms() {
  local value=$1
  case "$value" in
    *ms) echo "${value%ms}" ;;
    *us) awk -v v="${value%us}" 'BEGIN { printf "%.3f", v / 1000 }' ;;
    *s) awk -v v="${value%s}" 'BEGIN { printf "%.1f", v * 1000 }' ;;
    *) echo "?" ;;
  esac
}

# pgbench_run CLIENTS SCRIPT → prints "TPS P99_MS" (latency from the per-transaction log)
pgbench_run() {
  local clients=$1 script=$2
  local out
  out=$(cd "$WORK" && pgbench -n -M prepared -c "$clients" -j 2 -T "$DURATION" -f "$script" -l \
        -h "$(pg_socket)" -U postgres teamcache 2>&1)
  echo "$out" >> "$WORK/pgbench.log"
  local tps p99
  tps=$(echo "$out" | awk '/^tps/ {print $3; exit}')
  p99=$(cat "$WORK"/pgbench_log.* 2>/dev/null | awk '{print $3}' | sort -n |
        awk '{a[NR]=$1} END { if (NR) printf "%.2f", a[int(NR*0.99)]/1000; else print "?" }')
  rm -f "$WORK"/pgbench_log.*
  echo "$tps $p99"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }'; }

# median VALUE... → the middle one in numeric order (the lower middle of an even count): the
# rounds' figure the benches report, where one round alone is noise.
median() { printf '%s\n' "$@" | sort -g | sed -n "$((($# + 1) / 2))p"; }

# middle RATIO... → the median of the A/B benches' ratios (the mean of the two middle ones of an
# even count: the lower one would lean towards A).
middle() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {printf "%.2f", (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# Under load the access tracker puts its flush off for up to two ticks (AccessTracker.flushIfDue),
# so a round's hit counts are written up to three flush intervals (6 s at the default 2 s) after
# it: hit benches wait this long after a run, so that flush is counted with it and never falls in
# the next run (on the same core when pinned).
FLUSH_WAIT=${BENCH_FLUSH_WAIT:-8}

# groups → "SUM COUNT": the write groups' sizes so far, from the metrics of the server on $PORT.
groups() {
  curl -s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/metrics" |
    awk '/^teamcache_db_write_batch_size_sum/ {s = $2} /^teamcache_db_write_batch_size_count/ {c = $2} END {print s + 0, c + 0}'
}

# put_durations → "UNDER_10MS TOTAL": PUTs of an entry the service has answered so far, and those
# it took under 10 ms for, from its own request histogram (a complete request to its queued
# response). wrk's p99 also counts wrk's own waits for a core: on this 2-core machine the load
# generator shares the cores with the service and PostgreSQL, and a round whose p99 read 50 ms
# had 0.3% of its PUTs over 10 ms by the service's count. The two side by side say which it was.
put_durations() {
  curl -s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/metrics" |
    awk -v r='{route="/v1/caches/{ns}/entries/{key}",method="PUT"' '
      index($0, "teamcache_http_request_duration_seconds_bucket" r ",le=\"0.01\"} ") == 1 {u = $2}
      index($0, "teamcache_http_request_duration_seconds_count" r "} ") == 1 {c = $2}
      END {print u + 0, c + 0}'
}

# over_share UNDER0 TOTAL0 UNDER1 TOTAL1 → the % of the PUTs between two readings over 10 ms
over_share() {
  awk -v u=$(($3 - $1)) -v t=$(($4 - $2)) 'BEGIN { if (t > 0) printf "%.2f", 100 * (t - u) / t; else print "?" }'
}

# machine_ticks → "IDLE TOTAL": the machine's idle and total ticks so far (all cores).
machine_ticks() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; print $5 + $6, t}' /proc/stat; }

server_rss_mb() { awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$SERVER_PID/status"; }

# cpu_ticks [--children] PID... → "USER SYSTEM": clock ticks the processes (all their
# threads) have run, from /proc/PID/stat; with --children, also what their children that
# have exited ran (a backend gone meanwhile is counted by its postmaster). Fails when no
# process given is alive.
cpu_ticks() {
  local user=0 system=0 pid fields alive=0 children=0
  local -a f
  [ "${1:-}" = --children ] && { children=1; shift; }
  for pid in "$@"; do
    fields=$(sed -E 's/^.*\) //' "/proc/$pid/stat" 2>/dev/null) || continue
    read -r -a f <<<"$fields"
    user=$((user + f[11])) system=$((system + f[12])) alive=$((alive + 1))
    [ "$children" = 1 ] && user=$((user + f[13])) system=$((system + f[14]))
  done
  [ "$alive" -gt 0 ] || { echo "no process alive among: $*" >&2; return 1; }
  echo "$user $system"
}

# postgres_ticks → "USER SYSTEM" of the embedded cluster: the postmaster with what its exited
# children ran, and its live backends (whose titles do not name the folder). A backend the
# postmaster reaps between the two readings is in neither: read right after a client exits,
# its backend's whole run went missing (an import's PostgreSQL CPU read 4-6 µs an entry for
# ~40, two rounds in sixteen). So the postmaster's own reading is taken again after the
# backends', and all of it again if a reap came between.
postgres_ticks() {
  local postmaster; postmaster=$(head -n 1 "$(pg_data)/postgres/postmaster.pid")
  local -a own live again
  local try
  for try in 1 2 3 4 5 6 7 8 9 10; do
    read -r -a own <<<"$(cpu_ticks --children "$postmaster")"
    read -r -a live <<<"$(cpu_ticks $(pgrep -d ' ' -P "$postmaster") 2>/dev/null || echo 0 0)"
    read -r -a again <<<"$(cpu_ticks --children "$postmaster")"
    [ "${own[*]}" = "${again[*]}" ] && break
  done
  echo "$((own[0] + live[0])) $((own[1] + live[1]))"
}

# cpu_per_request BEFORE AFTER REQUESTS → "USER_US SYSTEM_US": microseconds of CPU each
# request cost, from two cpu_ticks readings.
cpu_per_request() {
  local -a before=($1) after=($2)
  [ ${#before[@]} -eq 2 ] && [ ${#after[@]} -eq 2 ] || { echo "? ?"; return; }
  awk -v u=$((after[0] - before[0])) -v s=$((after[1] - before[1])) -v n="$3" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { if (n > 0) printf "%.1f %.1f", u / hz / n * 1e6, s / hz / n * 1e6; else print "? ?" }'
}

# callgrind_parts DUMP COUNT FLOOR: the service's own functions (under Sources/) costing at
# least FLOOR inclusive instructions per request of COUNT, largest first (TOP of them),
# demangled. Shared by hit-instructions.sh and put-instructions.sh.
callgrind_parts() {
  local dump=$1 count=$2 floor=$3
  callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$dump" 2>/dev/null | sed -E 's/ \[[^]]*\]$//' |
    awk -v n="$count" -v floor="$floor" '$1 ~ /^[0-9,]+$/ && match($0, /Sources\/[^ ]*/) {
      name = substr($0, RSTART, RLENGTH); gsub(",", "", $1)
      if ($1 / n >= floor && !seen[name]++) printf "%8d  %s\n", $1 / n, name }' |
    head -n "${TOP:-30}" | swift demangle --simplified --compact | cut -c1-160
}
