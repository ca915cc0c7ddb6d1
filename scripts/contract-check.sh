#!/usr/bin/env bash
# Checks that openapi.yaml is valid and that the live server keeps to it: starts a release
# build on the embedded default with a fresh data folder, makes an admin token, and runs
# schemathesis against it (bounded examples; no 5xx, no response outside the schema).
set -euo pipefail
cd "$(dirname "$0")/.."
examples=${SCHEMATHESIS_EXAMPLES:-25}
port=${CONTRACT_PORT:-18480}
data=$(mktemp -d /tmp/teamcache-contract.XXXXXX)
binary=${TEAMCACHE_BINARY:-.build/release/teamcache}
server=""
upstream=""
cleanup() {
  [ -n "$server" ] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  [ -n "$upstream" ] && kill "$upstream" 2>/dev/null || true
  if [ -n "${KEEP_CONTRACT_LOGS:-}" ]; then cp "$data/serve.err" /tmp/contract-serve.err 2>/dev/null || true; fi
  rm -rf "$data"
}
trap cleanup EXIT

python3 -c "import yaml; from openapi_spec_validator import validate; validate(yaml.safe_load(open('openapi.yaml'))); print('openapi.yaml: valid OpenAPI 3.1')"

# No parked requests: a fuzzed `wait` of up to 60 s on an absent key is the contract working,
# but would hold each such case for as long. With TEAMCACHE_MAX_WAITERS=0 every request is
# answered as if `wait` were 0, in the same shapes. (Waiting has its own tests.)
# The gateway's upstreams, openai and anthropic included, are a local fake: nothing fuzzed
# leaves the machine.
mkfifo "$data/upstream.in"
python3 clients/python/tests/fake_upstream.py <"$data/upstream.in" >"$data/upstream.out" 2>/dev/null &
upstream=$!
exec 9>"$data/upstream.in"  # held open: the fake serves until this script ends
for _ in $(seq 1 50); do grep -q "^port " "$data/upstream.out" 2>/dev/null && break; sleep 0.1; done
upstream_port=$(sed -n 's/^port //p' "$data/upstream.out")
cat >"$data/upstreams.json" <<JSON
{"openai": {"url": "http://127.0.0.1:$upstream_port/v1", "kind": "openai", "first_byte_timeout": 5},
 "anthropic": {"url": "http://127.0.0.1:$upstream_port", "kind": "anthropic", "first_byte_timeout": 5}}
JSON

TEAMCACHE_UPSTREAMS_FILE="$data/upstreams.json" TEAMCACHE_MAX_WAITERS=0 "$binary" serve --listen "127.0.0.1:$port" --data-dir "$data" --log-level warn \
  </dev/null >"$data/serve.out" 2>"$data/serve.err" &
server=$!
for _ in $(seq 1 120); do
  grep -q "listening on" "$data/serve.out" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$data/serve.err"; exit 1; }
  sleep 0.5
done
token=$("$binary" tokens create --name contract --namespaces '*' --scopes read,write,admin --data-dir "$data" | tail -n 1)

# Against the live spec the server serves: it must be the file in the repository.
curl -fsS "http://127.0.0.1:$port/openapi.yaml" | cmp - openapi.yaml

schemathesis run openapi.yaml --url "http://127.0.0.1:$port" -H "Authorization: Bearer $token" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
  --max-examples "$examples" --request-timeout 20 --phases examples,coverage,fuzzing \
  --exclude-operation-id putSettings --exclude-path-regex '/gateway/'
# The gateway on its own: its 5xx are part of its contract (an upstream's 500 relayed as it is,
# 502 and 504 problems when the upstream fails), so not_a_server_error does not apply; every
# answer must still be one the document describes, in its shape and content type.
schemathesis run openapi.yaml --url "http://127.0.0.1:$port" -H "TeamCache-Authorization: Bearer $token" \
  --checks status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
  --max-examples "$examples" --request-timeout 20 --phases examples,coverage,fuzzing \
  --include-path-regex '/gateway/'
# The stateful phase is left out: it stores arbitrary bytes under a Content-Type of its choosing
# (text/json, text/yaml) and then fails to parse those very bytes when GET returns them as
# stored, which is the contract working. putSettings is left out of the fuzzing: a fuzzed tiny quota makes later writes answer 507
# (correct, documented, but a 5xx to not_a_server_error). The settings route has its own tests.

# /metrics through a real Prometheus parser; the counters must move with requests.
python3 - "$port" "$token" <<'PY'
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
port, token = sys.argv[1], sys.argv[2]
def scrape():
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"})
    text = urllib.request.urlopen(request).read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    def total(name, **labels):
        return sum(s.value for s in families[name].samples
                   if s.name == name + "_total" and all(s.labels.get(k) == v for k, v in labels.items()))
    return families, total
def call(method, path, body=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method,
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        urllib.request.urlopen(request).read()
    except urllib.error.HTTPError as error:
        error.read()
families, total = scrape()
for name in ["teamcache_lookups", "teamcache_http_requests", "teamcache_http_request_duration_seconds",
             "teamcache_db_pool_connections_in_use", "process_resident_memory_bytes", "process_cpu_seconds"]:
    assert name in families, f"missing {name}"
before_hits = total("teamcache_lookups", namespace="metrics-check", result="hit")
before_requests = total("teamcache_http_requests")
call("PUT", "/v1/caches/metrics-check/entries/k", b"v")
for _ in range(3):
    call("GET", "/v1/caches/metrics-check/entries/k")
_, total = scrape()
assert total("teamcache_lookups", namespace="metrics-check", result="hit") == before_hits + 3
assert total("teamcache_http_requests") >= before_requests + 4
print(f"/metrics: {len(families)} families parsed by prometheus_client; counters move with requests")
PY
