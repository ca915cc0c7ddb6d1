#!/usr/bin/env bash
# Runs the HTTP parser under libFuzzer with AddressSanitizer for SECONDS (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
swift build -c release --product HTTPParserFuzz --scratch-path .build-fuzz \
  -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING -Xswiftc -use-ld=lld 2>&1 | tail -n 1
work=$(mktemp -d /tmp/teamcache-fuzz.XXXXXX)
cp fuzz/corpus/http/* "$work/"
# The Swift backtracer collides with ASan's reports.
SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0 \
  .build-fuzz/release/HTTPParserFuzz "$work" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$work/" 2>&1 | tail -n 12
rm -rf "$work"
