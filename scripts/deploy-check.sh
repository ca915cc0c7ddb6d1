#!/usr/bin/env bash
# Checks deploy/ and docker-compose.yml as far as this machine allows without a Docker engine:
# YAML parses, the compose file against the Compose specification's JSON schema, Prometheus
# rules and config with promtool, Kubernetes manifests against Kubernetes schemas, and the
# container's build (deploy/build-release.sh, as the Dockerfile runs it) with its layout.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/teamcache-deploy.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # the embedded PostgreSQL runs as the postgres user

python3 - <<'PY'
import glob, yaml
files = ["docker-compose.yml", "openapi.yaml"] + glob.glob("deploy/**/*.y*ml", recursive=True)
for path in files:
    list(yaml.safe_load_all(open(path)))
print(f"YAML parses: {len(files)} files")
PY

# The Compose specification's schema, as shipped in the docker-compose package on PyPI.
python3 -m pip download -q --no-deps -d "$work/compose" docker-compose==1.29.2 2>&1 | grep -v "root" || true
python3 - "$work/compose" <<'PY'
import glob, json, sys, yaml, zipfile, jsonschema
wheel = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0])
schema = json.loads(wheel.read("compose/config/compose_spec.json"))
jsonschema.validate(yaml.safe_load(open("docker-compose.yml")), schema)
print("docker-compose.yml: valid against the Compose specification schema")
PY

promtool check rules deploy/prometheus/alerts.yml
# The scrape's token file lives in the compose volume; promtool checks that it exists.
echo "tc_$(openssl rand -hex 32)" > "$work/metrics.token"
sed -e "s|/etc/prometheus/alerts.yml|$PWD/deploy/prometheus/alerts.yml|" \
    -e "s|/var/lib/teamcache/secrets/metrics.token|$work/metrics.token|" \
    deploy/prometheus/prometheus.yml > "$work/prometheus.yml"
promtool check config "$work/prometheus.yml"
python3 -c "import json; d = json.load(open('deploy/grafana/teamcache.json')); assert d['panels']; print('grafana dashboard: valid JSON,', len(d['panels']), 'panels')"

# Kubernetes schemas (the ServiceMonitor is a Prometheus Operator CRD, checked for shape only).
python3 -m pip install -q --disable-pip-version-check kubernetes-validate 2>&1 | grep -v "root" || true
for manifest in deploy/kubernetes/*.yaml; do
  case "$manifest" in
    */kustomization.yaml) continue ;;
    */servicemonitor.yaml)
      python3 -c "import yaml,sys; d=yaml.safe_load(open('$manifest')); assert d['kind']=='ServiceMonitor' and d['spec']['endpoints']; print('$manifest: ServiceMonitor shape ok')" ;;
    *) kubernetes-validate --strict -k 1.29.0 "$manifest" ;;
  esac
done

# The container's build, exactly as the Dockerfile runs it, and its file layout: run from /
# so the binary must find migrations and the spec under ../share/teamcache.
deploy/build-release.sh "$work/prefix" 2>&1 | tail -n 1
if ldd "$work/prefix/bin/teamcache" | grep -q libswiftCore; then echo "Swift runtime is not static"; exit 1; fi
echo "runtime libraries: $(ldd "$work/prefix/bin/teamcache" | awk '{print $1}' | tr '\n' ' ')"
"$work/prefix/bin/teamcache" version
mkdir -m 755 "$work/data"
(cd / && "$work/prefix/bin/teamcache" migrate --dry-run --data-dir "$work/data")
