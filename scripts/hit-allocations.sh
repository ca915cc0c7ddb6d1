#!/usr/bin/env bash
# Heap allocations per near-cache hit (release build), counted by HitAllocations: the
# allocator's entry points are defined in that executable and count while a kept-alive
# client reads one ~2 KB JSON entry 20,000 times (identity, then gzip). Fails when either
# count passes its ceiling: a change that adds allocations to the hit path is seen here, not
# in a noisy throughput run. Ceilings are the counts measured when they were last lowered.
#   HITS=20000                      reads counted per encoding
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
ceiling_identity=9.5
ceiling_gzip=9.5
swift build -c release --product HitAllocations 2>&1 | tail -n 1
out=$(.build/release/HitAllocations "${HITS:-20000}" 2>/dev/null)
echo "| encoding | allocations per hit | allocations | hits | ceiling |"
echo "| --- | --- | --- | --- | --- |"
status=0
while read -r encoding per total hits; do
  ceiling=$([ "$encoding" = gzip ] && echo "$ceiling_gzip" || echo "$ceiling_identity")
  echo "| $encoding | $per | $total | $hits | $ceiling |"
  if awk -v per="$per" -v ceiling="$ceiling" 'BEGIN { exit !(per > ceiling) }'; then
    echo "allocations per $encoding hit: $per, past the ceiling of $ceiling" >&2
    status=1
  fi
done <<<"$out"
[ "$(wc -l <<<"$out")" = 2 ] || { echo "HitAllocations did not report both encodings: $out" >&2; exit 1; }
exit $status
