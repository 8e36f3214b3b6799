#!/usr/bin/env bash
# CPU per confirmed checkout (issue 29): a fixed offered rate of checkouts
# through HTTP (claim, reserve, order, authorize and capture against the
# in-process simulator) for a fixed time, and the CPU the system spent over
# exactly that span — `utime + stime` from /proc of the gateway process(es)
# and, for the PostgreSQL setups, of the server (postmaster and every
# backend, ended ones included) — divided by the checkouts answered
# `confirmed` in it. `sluice-load capacity --cpu` does the measuring and
# checks the books after each run (stock conserved, every order final,
# confirmed ≤ committed units ≤ confirmed + unanswered, `sluice audit` for SQLite); a run
# whose books do not balance stops the script.
#
# Setups: one gateway on SQLite; one gateway on PostgreSQL; three gateways
# on one PostgreSQL (and one Redis for the line). With BEFORE_BIN, each
# round runs that sluice binary too, the order of the two alternating from
# round to round; the medians of the rounds are printed per side.
#
#   usage: scripts/bench-checkout-cpu.sh [rounds=3] [seconds=20] [sqlite_rate=200] [pg_rate=100] [setups="sqlite pg pg3"]
#   SLUICE_BIN / LOAD_BIN: those binaries (default: release builds, built).
#   BEFORE_BIN: a sluice binary to measure alternately as "before".
# Needs initdb/pg_ctl (PostgreSQL server binaries) and redis-server (the
# harness starts throwaway ones on free ports). Linux only (/proc).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}; secs=${2:-20}; sqlite_rate=${3:-200}; pg_rate=${4:-100}; setups=${5:-"sqlite pg pg3"}

if [ -z "${SLUICE_BIN:-}" ] || [ -z "${LOAD_BIN:-}" ]; then
  cargo build --release -p sluice-gateway -p sluice-loadtest --bin sluice --bin sluice-load >&2
fi
SLUICE_BIN=${SLUICE_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice}
LOAD_BIN=${LOAD_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice-load}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "cores: $(nproc); ${secs} s per run; $rounds rounds; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
sides="after"; [ -z "${BEFORE_BIN:-}" ] || sides="after before"

args_of() { # setup -> capacity arguments
  case $1 in
    sqlite) echo "--start-per-s $sqlite_rate" ;;
    pg) echo "--postgres --start-per-s $pg_rate" ;;
    pg3) echo "--postgres --gateways 3 --start-per-s $pg_rate" ;;
    *) echo "unknown setup $1" >&2; exit 2 ;;
  esac
}

: >"$work/results"
for r in $(seq "$rounds"); do
  # Alternate which side goes first, so drift hits both alike.
  order=$sides
  [ $((r % 2)) -eq 0 ] && [ -n "${BEFORE_BIN:-}" ] && order="before after"
  for setup in $setups; do
    for side in $order; do
      bin=$SLUICE_BIN; [ "$side" = after ] || bin=$BEFORE_BIN
      load=$(cut -d' ' -f1 /proc/loadavg)
      # shellcheck disable=SC2046
      if ! "$LOAD_BIN" capacity --sluice "$bin" --cpu --steps-max 1 --step-s "$secs" \
          --p99-ms-max 100000 --error-rate-max 1 $(args_of "$setup") \
          >"$work/out" 2>"$work/err"; then
        echo "round $r $setup $side: sluice-load failed (books or start):" >&2
        cat "$work/out" >&2; tail -5 "$work/err" >&2
        exit 1
      fi
      line=$(grep '^cpu:' "$work/out")
      # cpu: offered R/s, N confirmed in S s; gateways G s, postgres P s; per confirmed checkout: gateways X us, postgres Y us
      set -- $(sed -E 's/.* ([0-9]+) confirmed in ([0-9.]+) s;.*gateways ([0-9]+) us, postgres ([0-9]+) us/\1 \2 \3 \4/' <<<"$line")
      printf 'round %s %-6s %-6s confirmed %5s in %6s s: gateway %5s us, postgres %5s us per confirmed checkout (load %s)\n' \
        "$r" "$setup" "$side" "$1" "$2" "$3" "$4" "$load"
      echo "$setup $side $3 $4 $1 $load" >>"$work/results"
    done
  done
done

median() { sort -n | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo
echo "| setup | side | gateway CPU µs per confirmed checkout | PostgreSQL CPU µs per confirmed checkout | confirmed per run | load average (1 min) at the runs |"
echo "| --- | --- | --- | --- | --- | --- |"
for setup in $setups; do
  for side in $sides; do
    g=$(awk -v s="$setup" -v d="$side" '$1 == s && $2 == d {print $3}' "$work/results" | median)
    p=$(awk -v s="$setup" -v d="$side" '$1 == s && $2 == d {print $4}' "$work/results" | median)
    n=$(awk -v s="$setup" -v d="$side" '$1 == s && $2 == d {print $5}' "$work/results" | median)
    l=$(awk -v s="$setup" -v d="$side" '$1 == s && $2 == d {printf "%s%s", sep, $6; sep = " "}' "$work/results")
    echo "| $setup | $side | $g | $p | $n | $l |"
  done
done
