#!/usr/bin/env bash
# Confirmed checkouts end to end, in one run (issue 11):
#
#   naive    the baseline: CLIENTS PostgreSQL clients each running
#            `UPDATE stock SET available = available - 1 WHERE sku = 'hot'
#            AND available >= 1` in autocommit on one row (pgbench), on a
#            throwaway PostgreSQL (fsync on) started in a temp dir
#   lua      Redis Lua check-and-decrement of one key by CLIENTS clients
#            (redis-benchmark), on a throwaway redis-server (no persistence)
#   sluice   `sluice-load capacity`: confirmed checkouts per second through
#            HTTP (claim, reserve, order, authorize and capture against the
#            in-process simulator), the offered rate stepped up open loop
#            until p99 > P99_MS or errors > 1 %, then a step at half the
#            capacity found; for one gateway on SQLite, one on PostgreSQL,
#            and three on one PostgreSQL (and one Redis for the line) with
#            the SKU in 1 and in 8 partitions
#
#   usage: scripts/bench-checkout.sh [clients=64] [seconds=5] [p99_ms=250]
#   SLUICE_BIN / LOAD_BIN: those binaries (default: release builds, built).
# Needs initdb/pg_ctl (PostgreSQL server binaries), pgbench, redis-server,
# redis-benchmark. Never touches ports 5432 or 6379.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-64}; secs=${2:-5}; p99=${3:-250}

. scripts/bench-common.sh
bench_tools pgbench psql redis-server redis-benchmark redis-cli
if [ -z "${SLUICE_BIN:-}" ] || [ -z "${LOAD_BIN:-}" ]; then
  cargo build --release -p sluice-gateway -p sluice-loadtest --bin sluice --bin sluice-load >&2
fi
SLUICE_BIN=${SLUICE_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice}
LOAD_BIN=${LOAD_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice-load}
pgbin=$(dirname "$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb | tail -1)")

work=$(mktemp -d)
trap 'pg_stop; bench_cleanup' EXIT
pg_stop() { [ -d "$work/pg" ] && "$pgbin/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true; }

echo "cores: $(nproc); clients $clients; ${secs} s per measure; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# naive: one hot row, one statement per reservation, autocommit.
PGPORT=$(free_port)
[ "$(id -u)" -ne 0 ] || chown -R postgres "$work"
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
as_pg "$pgbin/initdb" -D "$work/pg" -A trust -U bench >/dev/null
as_pg "$pgbin/pg_ctl" -D "$work/pg" -o "-p $PGPORT -k $work -c listen_addresses=''" -l "$work/pg.log" -w start >/dev/null
psql -h "$work" -p "$PGPORT" -U bench -d postgres -qc \
  "CREATE TABLE stock (sku text PRIMARY KEY, available bigint NOT NULL CHECK (available >= 0)); INSERT INTO stock VALUES ('hot', 1000000000);"
echo "UPDATE stock SET available = available - 1 WHERE sku = 'hot' AND available >= 1;" >"$work/naive.sql"
naive=$(pgbench -h "$work" -p "$PGPORT" -U bench -n -c "$clients" -j 2 -T "$secs" -f "$work/naive.sql" postgres 2>/dev/null |
  awk '/^tps/ {print $3; exit}')
naive_lat=$(pgbench -h "$work" -p "$PGPORT" -U bench -n -c "$clients" -j 2 -T "$secs" -r -f "$work/naive.sql" postgres 2>/dev/null |
  awk '/latency average/ {print $4; exit}')
pg_stop
printf 'naive PostgreSQL, one row per statement: %.0f reservations/s (mean latency %s ms)\n' "$naive" "$naive_lat"

# lua: check and decrement in one script.
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
  --daemonize yes --pidfile "$work/redis.pid" --logfile "$work/redis.log"
until redis-cli -p "$RPORT" PING >/dev/null 2>&1; do sleep 0.05; done
redis-cli -p "$RPORT" SET stock 1000000000 >/dev/null
n=$((clients * 5000))
lua=$(redis-benchmark -p "$RPORT" -c "$clients" -n "$n" -q \
  EVAL "local n = tonumber(redis.call('GET', KEYS[1])) if n >= 1 then return redis.call('DECR', KEYS[1]) end return -1" 1 stock |
  tr '\r' '\n' | awk '/requests per second/ {for (i = 2; i <= NF; i++) if ($i == "requests") v = $(i - 1)} END {print v}')
printf 'Redis Lua check-and-decrement: %s reservations/s\n' "$lua"

# sluice: confirmed checkouts through HTTP.
run() { # label, capacity args...
  local label=$1; shift
  echo "== $label"
  # A setup that misses the bar at its first step exits non-zero: its
  # capacity is then 0 and the other setups still run.
  "$LOAD_BIN" capacity --sluice "$SLUICE_BIN" --step-s "$secs" --p99-ms-max "$p99" "$@" 2>"$work/cap.err" | tee "$work/cap.out" ||
    { echo "($label: capacity exited non-zero; its stderr:)"; tail -5 "$work/cap.err"; }
  local cap half
  cap=$(awk '/^capacity:/ {print $2}' "$work/cap.out")
  half=$(awk '/^at half capacity/ {for (i = 1; i <= NF; i++) if ($i == "p99") print $(i + 1)}' "$work/cap.out")
  cap=${cap:-0}; half=${half:--}
  echo "$label|$cap|$half" >>"$work/results"
}
: >"$work/results"
run "1 gateway, SQLite"
run "1 gateway, PostgreSQL" --postgres
run "3 gateways, PostgreSQL, 1 partition" --postgres --gateways 3
run "3 gateways, PostgreSQL, 8 partitions" --postgres --gateways 3 --partitions 8

echo
echo "| setup | confirmed checkouts/s | p99 at half capacity (ms) | vs naive PostgreSQL |"
echo "| --- | --- | --- | --- |"
while IFS='|' read -r label cap half; do
  printf '| %s | %s | %s | %s |\n' "$label" "$cap" "$half" \
    "$(awk -v c="$cap" -v b="$naive" 'BEGIN {printf "%.2fx", c / b}')"
done <"$work/results"
printf '| naive PostgreSQL, one row per statement, %s clients | %.0f | | 1x |\n' "$clients" "$naive"
printf '| Redis Lua check-and-decrement, %s clients | %s | | %s |\n' "$clients" "$lua" \
  "$(awk -v c="$lua" -v b="$naive" 'BEGIN {printf "%.1fx", c / b}')"
