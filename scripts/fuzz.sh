#!/usr/bin/env bash
# Runs each libFuzzer target under AddressSanitizer for SECONDS (default 60) apiece:
#   HTTPParserFuzz  the HTTP/1.1 parser, whole and split (framing must not depend on arrival);
#   ResponseParserFuzz  the HTTP client's response parser, whole and split, then the input's end;
#   RequestFuzz     bytes → parser → router → the real handlers over an unreachable database
#                   (header, query and JSON parsers; any 500 or failed helper contract traps).
# A crash, a trap or an ASan report fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
for spec in HTTPParserFuzz:http:4096 ResponseParserFuzz:response:4096 RequestFuzz:request:65536; do
  IFS=: read -r target corpus max_len <<<"$spec"
  echo "--- $target (${seconds}s)"
  swift build -c release --product "$target" --scratch-path .build-fuzz \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING -Xswiftc -use-ld=lld 2>&1 | tail -n 1
  work=$(mktemp -d /tmp/teamcache-fuzz.XXXXXX)
  cp fuzz/corpus/"$corpus"/* "$work/"
  dictionary=()
  [ -f "fuzz/$corpus.dict" ] && dictionary=(-dict="fuzz/$corpus.dict")
  # The Swift backtracer collides with ASan's reports.
  status=0
  SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0 \
    ".build-fuzz/release/$target" "$work" "${dictionary[@]}" -max_total_time="$seconds" -max_len="$max_len" \
    -print_final_stats=1 -artifact_prefix="$work/" > "$work.log" 2>&1 || status=$?
  tail -n 12 "$work.log"
  if [ "$status" -ne 0 ]; then
    echo "$target failed (exit $status); the input that broke it:"
    ls "$work"/crash-* "$work"/oom-* "$work"/timeout-* 2>/dev/null | head -n 3
    exit 1
  fi
  rm -rf "$work" "$work.log"
done
