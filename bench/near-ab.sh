#!/usr/bin/env bash
# Two builds of the service side by side on near-cache hits, pinned as `BENCH_PIN=1
# bench/near.sh` is (each server alone on core 0 with one event loop, wrk -t1 on core 1):
# rounds alternate A, B, then B, A…, so the machine's drift (this one's speed moves ±10% over
# minutes) falls on both. A step on the hit path is kept when B beats A here, not when one
# near.sh run beats an older one.
#   BIN_A=path BIN_B=path (default B: this tree's release build)  ROUNDS=4  BENCH_DURATION=10
#   GZIP=0|1 (default: both)
BENCH_PIN=1
source "$(dirname "$0")/lib.sh"
need_tools
[ -n "${BIN_A:-}" ] || { echo "BIN_A (the build to compare against) is required" >&2; exit 2; }
if [ -z "${BIN_B:-}" ]; then build_release >/dev/null; BIN_B=$BIN; fi
ROUNDS=${ROUNDS:-4}
declare -A PIDS PORTS TOKENS

# start SIDE BINARY PORT: a server with its own cluster under $WORK/SIDE, filled and warmed.
start() {
  local side=$1 port=$3
  launch_server "$2" "$WORK/$side" "$port"
  PIDS[$side]=$LAUNCHED_PID PORTS[$side]=$port TOKENS[$side]=$LAUNCHED_TOKEN
  TOKEN=${TOKENS[$side]} python3 "$BENCH_DIR/populate.py" --port "$port" --count 10000 >&2
  TOKEN=${TOKENS[$side]} DURATION=5 KEYS=10000 wrk_run 64 "http://127.0.0.1:$port" -s "$BENCH_DIR/lua/get.lua" >/dev/null
  sleep "$FLUSH_WAIT"
}

# Each run (and warm-up) waits for its side's last flush (FLUSH_WAIT, bench/lib.sh), which would
# otherwise fall in the other side's next run, on the same core.

# run SIDE GZIP → "RPS USER_US SYSTEM_US", after the last run's tail has settled.
run() {
  local side=$1 cpu0 cpu1 out rps
  settle
  cpu0=$(cpu_ticks "${PIDS[$side]}")
  out=$(TOKEN=${TOKENS[$side]} GZIP=$2 KEYS=10000 wrk_run 64 "http://127.0.0.1:${PORTS[$side]}" -s "$BENCH_DIR/lua/get.lua")
  cpu1=$(cpu_ticks "${PIDS[$side]}")
  sleep "$FLUSH_WAIT"
  rps=${out%% *}
  # Errors are not hits: a run with any is not counted (the caller stops on empty fields).
  [ -z "$(echo "$out" | awk '{print $4}')" ] || { echo "$side answered errors: $out" >&2; return; }
  echo "$rps $(cpu_per_request "$cpu0" "$cpu1" "$(awk -v r="$rps" -v d="$DURATION" 'BEGIN { printf "%d", r * d }')")"
}


start a "$BIN_A" "$PORT"
start b "$BIN_B" "$((PORT + 2))"
echo "A: $BIN_A"
echo "B: $BIN_B"
echo
echo "| clients | round | A req/s | B req/s | B/A | A user µs | B user µs | A kernel µs | B kernel µs |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for gz in ${GZIP:-0 1}; do
  label=$([ "$gz" = 1 ] && echo gzip || echo identity)
  ratios=()
  for round in $(seq 1 "$ROUNDS"); do
    # Which side goes first alternates too: a run right after the other side's may differ.
    if [ $((round % 2)) = 1 ]; then
      read -r ra ua sa <<<"$(run a "$gz")"; read -r rb ub sb <<<"$(run b "$gz")"
    else
      read -r rb ub sb <<<"$(run b "$gz")"; read -r ra ua sa <<<"$(run a "$gz")"
    fi
    [ -n "${ra:-}" ] && [ -n "${rb:-}" ] && [ -n "${ub:-}" ] && [ -n "${ua:-}" ] || { echo "round $round failed" >&2; exit 1; }
    ratios+=("$(ratio "$rb" "$ra")")
    echo "| $label | $round | $ra | $rb | ${ratios[-1]} | $ua | $ub | $sa | $sb |"
  done
  echo "| $label | median B/A | | | $(middle "${ratios[@]}") | | | | |"
done
