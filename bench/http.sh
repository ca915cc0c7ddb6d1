#!/usr/bin/env bash
# The HTTP floor: wrk against GET /healthz and, in the same run, nginx serving the same
# bytes; at 64 and 256 connections. Then 10,000 idle keep-alive connections and the
# server's resident memory while it holds them.
source "$(dirname "$0")/lib.sh"
need_tools
build_release
start_server
printf '{"status":"ok"}' > "$WORK/healthz.body"
mkdir -p "$WORK/www" && cp "$WORK/healthz.body" "$WORK/www/healthz"
start_nginx

echo "| workload | connections | teamcache req/s | p50 ms | p99 ms | nginx req/s | p50 ms | p99 ms | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for connections in 64 256; do
  read -r ours ours50 ours99 _ <<<"$(wrk_run "$connections" "http://127.0.0.1:$PORT/healthz")"
  read -r theirs theirs50 theirs99 _ <<<"$(wrk_run "$connections" "http://127.0.0.1:$NGINX_PORT/healthz")"
  echo "| GET /healthz vs nginx static | $connections | $ours | $ours50 | $ours99 | $theirs | $theirs50 | $theirs99 | $(ratio "$ours" "$theirs") |"
done

before=$(server_rss_mb)
python3 "$BENCH_DIR/idle_connections.py" --port "$PORT" --count 10000 --hold 20 > "$WORK/idle.out" &
idle=$!
for _ in $(seq 1 150); do grep -q ready "$WORK/idle.out" 2>/dev/null && break; sleep 0.2; done
held=$(awk '{print $2}' "$WORK/idle.out")
during=$(server_rss_mb)
probe=$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT/healthz")
kill "$idle" 2>/dev/null; wait "$idle" 2>/dev/null || true
echo
echo "| idle keep-alive connections held | RSS before MB | RSS holding MB | /healthz while holding |"
echo "| --- | --- | --- | --- |"
echo "| $held | $before | $during | ${probe}s |"
