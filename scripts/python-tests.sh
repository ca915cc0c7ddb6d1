#!/usr/bin/env bash
# The Python client's tests (clients/python/tests) against a real `teamcache serve` on its
# embedded PostgreSQL, with the real libraries the client adapts (openai, httpx2, httpx,
# langchain-core, langchain-tests) at the versions pinned in the package's `test` extra.
# Installs the package and that extra when they are missing. Uses TEAMCACHE_BINARY, else the
# release build, else the debug build (what `swift test` leaves).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import teamcache.openai, teamcache.langchain, langchain_tests, httpx2, pytest_asyncio" 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check -e "clients/python[test]" 2>&1 \
    | grep -v "Running pip as the 'root' user" || true
fi
if [ -z "${TEAMCACHE_BINARY:-}" ]; then
  for build in release debug; do
    if [ -x ".build/$build/teamcache" ]; then export TEAMCACHE_BINARY=".build/$build/teamcache"; break; fi
  done
fi
[ -n "${TEAMCACHE_BINARY:-}" ] || swift build --product teamcache
cd clients/python
exec python3 -m pytest -q -p no:cacheprovider tests "$@"
