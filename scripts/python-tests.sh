#!/usr/bin/env bash
# The Python client's tests (clients/python/tests) against a real `teamcache serve` on its
# embedded PostgreSQL, with the real libraries the client adapts (openai, httpx2, httpx,
# langchain-core, langchain-tests) at the versions pinned in the package's `test` extra.
# Installs the package and that extra into .venv when they are missing. Uses TEAMCACHE_BINARY, else the
# newer of the release and debug builds (`swift test` leaves a debug one), else builds one.
set -euo pipefail
cd "$(dirname "$0")/.."
# A virtual environment inside this checkout (ignored by git): the machine's Python stays as
# it was, and the editable `teamcache` it holds is this checkout's, whichever ran first.
venv="$PWD/.venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
python="$venv/bin/python"
if ! "$python" -c "import teamcache.openai, teamcache.langchain, langchain_tests, httpx2, anthropic, pytest_asyncio, mypy, ruff" 2>/dev/null \
   || [ "$("$python" -c 'import teamcache, os; print(os.path.realpath(teamcache.__file__))')" \
        != "$(realpath clients/python/src/teamcache/__init__.py)" ]; then
  "$python" -m pip install -q --disable-pip-version-check -e "clients/python[test,lint]"
fi
if [ -z "${TEAMCACHE_BINARY:-}" ]; then
  # The newer of the two builds: the one that has this tree's changes.
  newest=$(ls -t .build/release/teamcache .build/debug/teamcache 2>/dev/null | head -n 1 || true)
  [ -n "$newest" ] && export TEAMCACHE_BINARY="$PWD/$newest"
fi
if [ -z "${TEAMCACHE_BINARY:-}" ]; then
  swift build --product teamcache
  export TEAMCACHE_BINARY="$PWD/.build/debug/teamcache"
fi
# The tests run from the package's folder: the binary's path must not be relative.
TEAMCACHE_BINARY=$(realpath "$TEAMCACHE_BINARY")
export TEAMCACHE_BINARY
cd clients/python
# Style and types first (ruff, mypy --strict, as pyproject.toml configures them): a loose type
# or an unsorted import fails here in seconds, before the tests start a server.
"$venv/bin/ruff" check src tests
"$venv/bin/mypy"
exec "$python" -m pytest -q -p no:cacheprovider tests "$@"
