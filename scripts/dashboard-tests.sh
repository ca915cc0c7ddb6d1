#!/usr/bin/env bash
# The dashboard's browser tests (tests/dashboard): Debian's Chromium driven by Playwright from
# the checkout's .venv, against a real `teamcache serve` on its embedded PostgreSQL. Needs the
# `chromium` package (no browser is downloaded: Playwright launches the system's) and psql
# (the tests seed history rows through the cluster's private socket). Screenshots of each page
# go to $DASHBOARD_SCREENSHOTS (default build/dashboard-screenshots), listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$PWD/.venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
python="$venv/bin/python"
if ! "$python" -c "import playwright, httpx, pytest" 2>/dev/null; then
  "$python" -m pip install -q --disable-pip-version-check -r tests/dashboard/requirements.txt
fi
chromium=${CHROMIUM:-$(command -v chromium || true)}
[ -n "$chromium" ] || { echo "dashboard tests: no chromium (apt-get install chromium)" >&2; exit 1; }
export CHROMIUM="$chromium"
if [ -z "${TEAMCACHE_BINARY:-}" ]; then
  newest=$(ls -t .build/release/teamcache .build/debug/teamcache 2>/dev/null | head -n 1 || true)
  [ -n "$newest" ] || { swift build --product teamcache; newest=.build/debug/teamcache; }
  export TEAMCACHE_BINARY="$PWD/$newest"
fi
export DASHBOARD_SCREENSHOTS=${DASHBOARD_SCREENSHOTS:-$PWD/build/dashboard-screenshots}
status=0
"$python" -m pytest -q -p no:cacheprovider tests/dashboard "$@" || status=$?
echo "dashboard screenshots in $DASHBOARD_SCREENSHOTS:"
ls -1 "$DASHBOARD_SCREENSHOTS" 2>/dev/null | sed 's/^/  /' || true
exit $status
