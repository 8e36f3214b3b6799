#!/usr/bin/env bash
# Instructions per request on Sluice's hot paths, counted by callgrind:
# repeatable on a shared machine, where req/s is not. One gateway (1
# worker) runs under `valgrind --tool=callgrind`; for each path the counters
# are zeroed, wrk sends requests for a while, and the counts are dumped.
# Prints instructions per request (Ir / requests wrk completed, the
# gateway's background threads included) and each path's top functions
# (self cost).
#
#   proxy    GET of a 1 KiB file through the gateway to a local nginx
#   catalog  the same file from the in-memory catalog
#   status   GET /queue/drop/status with one waiting HS256 ticket (early polls)
#   join     POST /queue/drop/join (HS256 ticket signed per join)
#   pass     GET of a protected path with an EdDSA pass (second gateway)
#   open     the same origin file on an unprotected path (second gateway)
#   idle     no requests: what the background threads cost per second
#
#   usage: scripts/bench-profile.sh [seconds=5] [top=12] [out-dir]
#   SLUICE_BIN=path/to/sluice profiles that binary instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; top=${2:-12}; out=${3:-$(mktemp -d)}
mkdir -p "$out"
. scripts/bench-common.sh
bench_tools wrk nginx curl valgrind callgrind_annotate
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --release -p sluice-gateway --bin sluice >&2
  SLUICE_BIN=${CARGO_TARGET_DIR:-target}/release/sluice
fi
bench_origin

# gateway NAME KEY-ALG ROOM PROTECT RELEASE: starts one under callgrind; sets PORT.
gateway() {
  local name=$1 alg=$2 room=$3 protect=$4 release=$5
  PORT=$(free_port)
  cat > "$work/$name.toml" <<CONF
[gateway]
listen = "127.0.0.1:$PORT"
admin_listen = "127.0.0.1:$(free_port)"
data_dir = "$work/var-$name"
static_dir = "$work/static"
origin = "http://127.0.0.1:$ORIGIN"
threads = 1
$("$SLUICE_BIN" keygen --alg "$alg" | grep -v '^#')
[[rooms]]
name = "$room"
protect = ["$protect"]
release_per_second = $release
max_active = $release
queue_capacity = 1000000
pass_ttl_s = 86400
joins_per_minute_per_client = 100000
CONF
  SLUICE_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$out/$name.%p.out" \
    "$SLUICE_BIN" run --config "$work/$name.toml" 2>"$work/$name.err" &
  echo $! > "$work/$name.pid"
  for _ in $(seq 600); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/item.json" && return 0; sleep 0.2; done
  echo "$name did not come up" >&2; cat "$work/$name.err" >&2; exit 1
}
# profile NAME GATEWAY URL [wrk args]: zero, load, dump. URL "idle": no
# load, and the rate of instructions per second it measures is taken off
# the paths measured after it (the background threads: release worker,
# orders worker, timers), so Ir per request is the requests' own.
idle_ir_per_s=0
profile() {
  local name=$1 gw=$2 url=$3; shift 3
  local pid reqs t0 t1 file ir
  pid=$(cat "$work/$gw.pid")
  callgrind_control -z "$pid" >/dev/null
  t0=$(date +%s.%N)
  if [ "$url" = idle ]; then
    sleep "$secs"; reqs=0
  else
    reqs=$(wrk -t1 -c4 -d"${secs}s" "$@" "$url" | awk '/requests in/ {print $1}')
  fi
  callgrind_control -d "$name" "$pid" >/dev/null
  t1=$(date +%s.%N)
  file=$(ls -t "$out/$gw.$pid.out".* | head -1)
  mv "$file" "$out/$name.callgrind"
  ir=$(callgrind_annotate "$out/$name.callgrind" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
  if [ "$reqs" = 0 ]; then
    idle_ir_per_s=$(awk -v i="$ir" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", i / (b - a)}')
    printf '%-8s %14s Ir per second with no requests (taken off the paths below)\n' "$name" "$idle_ir_per_s"
  else
    printf '%-8s %10s requests %10s Ir per request (%s Ir in all)\n' "$name" "$reqs" \
      "$(awk -v i="$ir" -v r="$idle_ir_per_s" -v a="$t0" -v b="$t1" -v n="$reqs" 'BEGIN {printf "%.0f", (i - r * (b - a)) / n}')" "$ir"
    echo "$name $reqs" >> "$out/paths"
  fi
}

gateway hs hs256 drop "/drop/*" 1
G=http://127.0.0.1:$PORT
curl -sf -X POST "$G/queue/drop/join" >/dev/null
ticket=$(curl -sf -X POST "$G/queue/drop/join" | json ticket)
wrk -t1 -c4 -d2s "$G/item.json" >/dev/null   # warm the origin connections
profile idle hs idle
profile proxy hs "$G/item.json"
profile catalog hs "$G/cat/item.json"
profile status hs "$G/queue/drop/status" -H "Authorization: Bearer $ticket"
cat > "$work/join.lua" <<'LUA'
wrk.method = "POST"
LUA
profile join hs "$G/queue/drop/join" -s "$work/join.lua"
kill "$(cat "$work/hs.pid")"; rm "$work/hs.pid"

gateway ed eddsa shop "/p/*" 1000
G=http://127.0.0.1:$PORT
pass=$(bench_pass "$G" shop)
wrk -t1 -c4 -d2s "$G/item.json" >/dev/null
profile idle-ed ed idle
profile pass ed "$G/p/item.json" -H "Authorization: Bearer $pass"
profile open ed "$G/item.json"

echo
while read -r name reqs <&3; do
  [ "$reqs" != 0 ] || continue
  echo "== $name: top $top functions by own instructions, per request (background threads included;"
  echo "   functions on every thread's stack when the counts were dumped, 50 % and more, left out)"
  callgrind_annotate --auto=no --threshold=100 "$out/$name.callgrind" 2>/dev/null \
    | awk -v top="$top" '/^-+$/ {n++; next} n >= 6 && NF && $2 !~ /^\((100|[5-9][0-9])\./ && shown++ < top' \
    | awk -v n="$reqs" '{ir = $1; gsub(",", "", ir); $1 = ""; $2 = ""; printf "%9.0f %s\n", ir / n, substr($0, 3)}' \
    | cut -c1-200
done 3< "$out/paths"
echo "callgrind files: $out"
