#!/usr/bin/env bash
# Checkouts through HTTP while the payment provider is slow (issue 11
# item 2): `sluice-load capacity` against one gateway on SQLite paying
# `paysim` over HTTP, every provider call answered after LATENCY_MS, and
# the gateway process's threads sampled every 100 ms (the peak and the
# median of the samples). Give it two gateway binaries to compare them in
# one run, alternating A, B, A, B ... ROUNDS times.
#
#   usage: scripts/bench-provider-wait.sh SLUICE_A [SLUICE_B] [latency_ms=100] [rounds=2]
#   LOAD_BIN: the sluice-load binary (paysim beside it); default
#   target/release/sluice-load. STEPS: the capacity steps (default
#   "--start-per-s 25 --step-factor 1.5 --steps-max 8").
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1; b=${2:-}; latency=${3:-100}; rounds=${4:-2}
load=${LOAD_BIN:-target/release/sluice-load}

# run_one BIN: the capacity table, then the gateway's thread samples.
run_one() {
  local bin=$1 out samples pid
  out=$(mktemp); samples=$(mktemp)
  # shellcheck disable=SC2086 # STEPS is a list of arguments
  "$load" capacity --sluice "$bin" --paysim-latency-ms "$latency" \
    ${STEPS:---start-per-s 25 --step-factor 1.5 --steps-max 8} --step-s 5 --p99-ms-max 1000 >"$out" 2>&1 &
  local load_pid=$!
  pid=""
  while kill -0 "$load_pid" 2>/dev/null; do
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || pid=$(pgrep -n -f "^$bin " || true)
    if [ -n "$pid" ] && [ -r "/proc/$pid/status" ]; then
      awk '/^Threads:/ {print $2}' "/proc/$pid/status" >>"$samples" 2>/dev/null || true
    fi
    sleep 0.1
  done
  wait "$load_pid" || true
  grep -E "^ +[0-9]|^stopped|^capacity|^at half" "$out" || cat "$out"
  sort -n "$samples" | awk '{v[NR]=$1} END {if (NR) printf "gateway threads: peak %d, median %d (%d samples)\n", v[NR], v[int((NR+1)/2)], NR; else print "gateway threads: no samples"}'
  rm -f "$out" "$samples"
}

echo "cores: $(nproc); provider latency ${latency} ms; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  echo "== round $r: A = $a"; run_one "$a"
  if [ -n "$b" ]; then echo "== round $r: B = $b"; run_one "$b"; fi
done
