#!/usr/bin/env bash
# The gateway beside its anchors, in one run on this machine (issue 28), against one fake
# model upstream (clients/python/tests/fake_upstream.py):
#   1. gateway hits vs descriptor-lookup hits of the same entry (wrk -c64);
#   2. gateway hits vs nginx proxy_cache caching the same POST in front of the same upstream,
#      and vs LiteLLM's proxy with its in-memory cache (one worker; BENCH_LITELLM=0 skips it:
#      it is installed into its own virtual environment on first use);
#   3. what a miss adds to a call straight to the upstream (whole, and streamed: first event);
#   4. a burst of 64 identical new calls over two replicas: upstream calls (LiteLLM's beside);
#   5. 2,000 streamed calls in flight through the gateway: the service's threads and RSS.
source "$(dirname "$0")/lib.sh"
need_tools
build_release
CLIENTS=${BURST_CLIENTS:-64}
INFLIGHT=${GATEWAY_INFLIGHT:-2000}
SECOND_PORT=$((PORT + 10))
LITELLM_PORT=$((PORT + 20))
LITELLM_VENV=${LITELLM_VENV:-/tmp/teamcache-litellm-venv}
ulimit -n "$(ulimit -Hn)"

# The fake upstream, serving until this script's end (its standard input is a FIFO held here).
mkfifo "$WORK/upstream.in"
python3 "$REPO/clients/python/tests/fake_upstream.py" <"$WORK/upstream.in" >"$WORK/upstream.out" 2>&1 &
UPSTREAM_PID=$!
exec 8>"$WORK/upstream.in"
for _ in $(seq 1 50); do grep -q "^port " "$WORK/upstream.out" 2>/dev/null && break; sleep 0.1; done
UPSTREAM_PORT=$(sed -n 's/^port //p' "$WORK/upstream.out")
UPSTREAM="http://127.0.0.1:$UPSTREAM_PORT"
cat >"$WORK/upstreams.json" <<JSON
{"openai": {"url": "$UPSTREAM/v1", "kind": "openai"}}
JSON
SECOND_PID="" LITELLM_PID=""
trap 'kill -TERM $SECOND_PID $LITELLM_PID $UPSTREAM_PID 2>/dev/null || true; bench_cleanup' EXIT
start_server TEAMCACHE_UPSTREAMS_FILE="$WORK/upstreams.json" TEAMCACHE_LOG_LEVEL=warn

GATEWAY="/v1/caches/bench/gateway/openai"
# One chat completion (~300 B), asked once so it is stored; then every run repeats it.
printf '%s' '{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Name three primary colours."}],"temperature":0}' >"$WORK/chat.json"
printf '%s' '{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Name three primary colours."}],"params":{"temperature":0,"endpoint":"/chat/completions"}}' >"$WORK/lookup.json"
curl -fsS -o /dev/null -H "TeamCache-Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  --data-binary @"$WORK/chat.json" "http://127.0.0.1:$PORT$GATEWAY/chat/completions"
sleep 0.5
curl -fsS -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' --data-binary @"$WORK/lookup.json" \
  "http://127.0.0.1:$PORT/v1/caches/bench/lookup" | grep -q '"hit":true' || { echo "the lookup does not find the gateway's entry" >&2; exit 1; }

post() {  # post URL BODY_FILE HEADERS → wrk_run's "RPS P50 P99 NON2XX"
  BODY_FILE=$2 HEADERS=$3 wrk_run 64 "$1" -s "$BENCH_DIR/lua/post.lua"
}
post "http://127.0.0.1:$PORT$GATEWAY/chat/completions" "$WORK/chat.json" "TeamCache-Authorization: Bearer $TOKEN" >/dev/null
read -r gw_rps _ gw_p99 gw_bad <<<"$(post "http://127.0.0.1:$PORT$GATEWAY/chat/completions" "$WORK/chat.json" "TeamCache-Authorization: Bearer $TOKEN")"
read -r lk_rps _ lk_p99 lk_bad <<<"$(post "http://127.0.0.1:$PORT/v1/caches/bench/lookup" "$WORK/lookup.json" "Authorization: Bearer $TOKEN")"

# nginx caching the same POST in front of the same upstream (the request body in the key).
mkdir -p "$WORK/nginx/cache"
cat >"$WORK/nginx/proxy.conf" <<CONF
worker_processes 2;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 16384; }
http {
  access_log $WORK/nginx/access.log combined buffer=64k;
  proxy_cache_path $WORK/nginx/cache keys_zone=models:10m;
  server {
    listen 127.0.0.1:$NGINX_PORT reuseport backlog=4096;
    client_body_buffer_size 64k;
    location / {
      proxy_pass $UPSTREAM;
      proxy_http_version 1.1;
      proxy_cache models;
      proxy_cache_methods POST;
      proxy_cache_key "\$request_uri|\$request_body";
      proxy_cache_valid 200 10m;
      proxy_cache_lock on;
      add_header X-Cache \$upstream_cache_status;
    }
  }
}
CONF
nginx -c "$WORK/nginx/proxy.conf" -p "$WORK/nginx"
sleep 0.3
NGINX_PID=$(cat "$WORK/nginx/nginx.pid")
curl -fsS -o /dev/null -H 'Content-Type: application/json' --data-binary @"$WORK/chat.json" "http://127.0.0.1:$NGINX_PORT/v1/chat/completions"
post "http://127.0.0.1:$NGINX_PORT/v1/chat/completions" "$WORK/chat.json" "Authorization: Bearer sk-bench" >/dev/null
read -r ng_rps _ ng_p99 ng_bad <<<"$(post "http://127.0.0.1:$NGINX_PORT/v1/chat/completions" "$WORK/chat.json" "Authorization: Bearer sk-bench")"

# LiteLLM's proxy, its in-memory cache on, one worker, the same upstream and request.
lt_rps="" lt_p99="" lt_bad="" lt_burst="not run"
LITELLM_KEY="sk-bench-master-$(openssl rand -hex 8)"
if [ "${BENCH_LITELLM:-1}" = 1 ]; then
  [ -x "$LITELLM_VENV/bin/litellm" ] || { python3 -m venv "$LITELLM_VENV" &&
    "$LITELLM_VENV/bin/pip" install -q --disable-pip-version-check 'litellm[proxy]' >&2; } || true
fi
if [ "${BENCH_LITELLM:-1}" = 1 ] && [ -x "$LITELLM_VENV/bin/litellm" ]; then
  cat >"$WORK/litellm.yaml" <<YAML
model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: $UPSTREAM/v1
      api_key: sk-bench
general_settings:
  master_key: $LITELLM_KEY
litellm_settings:
  cache: true
  cache_params:
    type: local
YAML
  "$LITELLM_VENV/bin/litellm" --config "$WORK/litellm.yaml" --port "$LITELLM_PORT" --num_workers 1 \
    </dev/null >"$WORK/litellm.log" 2>&1 &
  LITELLM_PID=$!
  for _ in $(seq 1 240); do
    curl -fsS -o /dev/null "http://127.0.0.1:$LITELLM_PORT/health/liveliness" 2>/dev/null && break; sleep 0.5
  done
  curl -fsS -o /dev/null -H 'Content-Type: application/json' -H "Authorization: Bearer $LITELLM_KEY" \
    --data-binary @"$WORK/chat.json" "http://127.0.0.1:$LITELLM_PORT/chat/completions" || true
  read -r lt_rps _ lt_p99 lt_bad <<<"$(post "http://127.0.0.1:$LITELLM_PORT/chat/completions" "$WORK/chat.json" "Authorization: Bearer $LITELLM_KEY")"
  read -r made failed <<<"$(python3 "$BENCH_DIR/gateway.py" burst --ports "$LITELLM_PORT" --clients "$CLIENTS" \
    --header "Authorization: Bearer $LITELLM_KEY" --upstream "$UPSTREAM")"
  lt_burst="$made (failed: $failed)"
  kill -TERM "$LITELLM_PID" 2>/dev/null; wait "$LITELLM_PID" 2>/dev/null || true
  LITELLM_PID=""
fi

echo "| gateway hits, the same ~300 B chat completion (wrk -c64) | req/s | p99 ms | non-2xx | gateway / this |"
echo "| --- | --- | --- | --- | --- |"
echo "| TeamCache gateway | $gw_rps | $gw_p99 | ${gw_bad:-0} | 1.00 |"
echo "| TeamCache descriptor lookup of the same entry | $lk_rps | $lk_p99 | ${lk_bad:-0} | $(ratio "$gw_rps" "$lk_rps") |"
echo "| nginx proxy_cache, the same POST (request body in the key) | $ng_rps | $ng_p99 | ${ng_bad:-0} | $(ratio "$gw_rps" "$ng_rps") |"
if [ -n "$lt_rps" ]; then
  echo "| LiteLLM proxy, in-memory cache, 1 worker | $lt_rps | $lt_p99 | ${lt_bad:-0} | $(ratio "$gw_rps" "$lt_rps") |"
fi
echo
echo "| a miss (each call a new prompt, stored), p50 over ${GATEWAY_CALLS:-200} calls | direct to the upstream ms | through the gateway ms | added ms |"
echo "| --- | --- | --- | --- |"
python3 "$BENCH_DIR/gateway.py" latency --gateway "http://127.0.0.1:$PORT$GATEWAY" --direct "$UPSTREAM/v1" \
  --token "$TOKEN" --calls "${GATEWAY_CALLS:-200}"

# The second replica, on the first one's database.
url="postgresql:///teamcache?host=$(pg_socket)&user=postgres"
TEAMCACHE_UPSTREAMS_FILE="$WORK/upstreams.json" TEAMCACHE_LOG_LEVEL=warn TEAMCACHE_MAX_CONNECTIONS_PER_CLIENT=100000 \
  "$BIN" serve --listen "127.0.0.1:$SECOND_PORT" --database-url "$url" </dev/null >"$WORK/serve2.out" 2>"$WORK/serve2.log" &
SECOND_PID=$!
for _ in $(seq 1 120); do grep -q "listening on" "$WORK/serve2.out" 2>/dev/null && break; sleep 0.25; done
echo
echo "| a burst of $CLIENTS identical new calls (upstream answers in 300 ms) | upstream calls | failed callers |"
echo "| --- | --- | --- |"
for stream in "" --stream; do
  read -r made failed <<<"$(python3 "$BENCH_DIR/gateway.py" burst --ports "$PORT,$SECOND_PORT" --prefix "$GATEWAY" \
    --header "TeamCache-Authorization: Bearer $TOKEN" --clients "$CLIENTS" --upstream "$UPSTREAM" $stream)"
  echo "| TeamCache gateway, 2 replicas${stream:+, streamed} | $made | $failed |"
done
echo "| LiteLLM proxy, 1 worker, in-memory cache | $lt_burst | |"
kill -TERM "$SECOND_PID" 2>/dev/null; wait "$SECOND_PID" 2>/dev/null || true
SECOND_PID=""

echo
echo "| $INFLIGHT streamed calls in flight through the gateway (uncached, each held 5 s by the upstream) | threads | RSS MB |"
echo "| --- | --- | --- |"
read -r threads_before rss_before threads_during rss_during ok <<<"$(python3 "$BENCH_DIR/gateway.py" inflight \
  --port "$PORT" --path "$GATEWAY/chat/completions" --token "$TOKEN" --pid "$SERVER_PID" --count "$INFLIGHT")"
echo "| before | $threads_before | $rss_before |"
echo "| with $ok of $INFLIGHT streaming | $threads_during | $rss_during |"
