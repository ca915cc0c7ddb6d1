#!/usr/bin/env bash
# Builds the release binary and lays out what the container ships, under PREFIX:
#   PREFIX/bin/teamcache, PREFIX/share/teamcache/{migrations,openapi.yaml,ui}
# Used by deploy/Dockerfile and by CI, so CI runs exactly the container's build.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/out}
swift build -c release --product teamcache --static-swift-stdlib
install -D -m 0755 .build/release/teamcache "$prefix/bin/teamcache"
install -d "$prefix/share/teamcache"
cp -R migrations openapi.yaml ui "$prefix/share/teamcache/"
