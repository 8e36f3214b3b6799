#!/usr/bin/env bash
# The hot paths of Sluice next to nginx (and, on the proxied path, a bare
# pingora proxy), in one run, rounds alternating so machine noise hits every
# side alike. Prints each round, then medians, CPU per request and ratios.
#
#   proxy    GET of a 1 KiB file through the proxy to a local origin (nginx):
#            Sluice, nginx (proxy_pass, upstream keepalive), bare pingora
#            (bench/bare-pingora: same pingora, allocator and timeouts)
#   catalog  the same file from Sluice's in-memory catalog, nginx from disk;
#            1 worker each, then 2 workers each
#   status   GET /queue/drop/status with a waiting ticket (HS256) vs nginx
#            `return 200` with a status-sized JSON body. One ticket polled
#            in a loop is the refresh storm: nearly every poll is early
#            (429, `Retry-After`), a few are on time (200).
#   join     POST /queue/drop/join, each from another client address (the
#            gateway trusts 127.0.0.1 as a proxy; X-Forwarded-For cycles
#            through 65,536 addresses) vs nginx `return 200`
#   pass     GET of a protected path with an EdDSA pass vs the same origin
#            file on an unprotected path, both through Sluice
#
# CPU per request is the server's CPU time (utime + stime of every process
# of it, from /proc) over the round, divided by the requests wrk completed.
#
#   usage: scripts/bench-proxy.sh [rounds=5] [seconds=5] [connections=64] [scenarios="proxy catalog status join pass"]
#   SLUICE_BIN=... BARE_BIN=...: measure those binaries instead of building.
#   BEFORE_BIN=...: also measure that sluice binary, alternating, as "sluice-before".
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}; secs=${2:-5}; conns=${3:-64}; scenarios=${4:-"proxy catalog status join pass"}

. scripts/bench-common.sh
bench_tools wrk nginx curl
# SLUICE_BIN / BARE_BIN: measure those binaries instead of building them.
if [ -z "${SLUICE_BIN:-}" ] || [ -z "${BARE_BIN:-}" ]; then
  cargo build --release -p sluice-gateway -p bare-pingora --bin sluice --bin bare-pingora >&2
fi
SLUICE_BIN=${SLUICE_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice}
BARE_BIN=${BARE_BIN:-${CARGO_TARGET_DIR:-target}/release/bare-pingora}

bench_origin
NGX=$(free_port); NGXS=$(free_port); NGXS2=$(free_port); BARE=$(free_port)
# What a waiting ticket's status and a join look like (sizes as Sluice's).
STATUS_JSON='{"ahead":1,"estimated_wait_s":3600,"expires_at":1780000000,"poll_after_s":60,"position":2,"room":"drop","state":"waiting"}'
JOIN_JSON='{"ahead":1,"estimated_wait_s":3600,"expires_at":1780000000,"poll_after_s":60,"position":2,"room":"drop","state":"waiting","ticket":"eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiIsImtpZCI6ImsxIn0.eyJpc3MiOiJzbHVpY2UiLCJhdWQiOiJkcm9wIiwic3ViIjoiMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAiLCJzZXEiOjEsInR5cCI6InRpY2tldCIsImlhdCI6MTc4MDAwMDAwMCwiZXhwIjoxNzgwMDAzNjAwfQ.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}'

cat > "$work/nginx1.conf" <<CONF
worker_processes 1; daemon on; pid $work/nginx1.pid; error_log $work/nginx1.err;
events { worker_connections 4096; }
http { access_log off; include /etc/nginx/mime.types;
  upstream origin { server 127.0.0.1:$ORIGIN; keepalive 128; }
  server { listen 127.0.0.1:$NGX;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; } }
  server { listen 127.0.0.1:$NGXS; root $work/static;
    location = /queue/drop/status { default_type application/json; add_header Cache-Control no-store; return 200 '$STATUS_JSON'; }
    location = /queue/drop/join { default_type application/json; add_header Cache-Control no-store; return 200 '$JOIN_JSON'; } } }
CONF
cat > "$work/nginx2.conf" <<CONF
worker_processes 2; daemon on; pid $work/nginx2.pid; error_log $work/nginx2.err;
events { worker_connections 4096; }
http { access_log off; include /etc/nginx/mime.types; server { listen 127.0.0.1:$NGXS2; root $work/static; } }
CONF

hs256=$("$SLUICE_BIN" keygen --alg hs256 | grep -v '^#')
eddsa=$("$SLUICE_BIN" keygen --alg eddsa | grep -v '^#')
# sluice_config NAME THREADS STATIC KEYS EXTRA_GATEWAY ROOMS: writes NAME.toml, sets PORT_NAME.
sluice_config() {
  local name=$1 threads=$2 static=$3 keys=$4 extra=$5 rooms=$6 port
  port=$(free_port); eval "PORT_$name=$port"
  cat > "$work/$name.toml" <<CONF
[gateway]
listen = "127.0.0.1:$port"
admin_listen = "127.0.0.1:$(free_port)"
data_dir = "$work/var-$name"
static_dir = "$static"
origin = "http://127.0.0.1:$ORIGIN"
threads = $threads
$extra
$keys
$rooms
CONF
}
room() { # name protect release_per_second max_active
  printf '[[rooms]]\nname = "%s"\nprotect = [%s]\nrelease_per_second = %s\nmax_active = %s\nqueue_capacity = 50000000\npass_ttl_s = 86400\njoins_per_minute_per_client = 100000\n' "$@"
}
# Each gateway: S1 proxy, catalog and status (1 worker); S2 catalog (2
# workers); SJ joins (trusts 127.0.0.1 as a proxy); SE EdDSA passes. With
# BEFORE_BIN the same four again (suffix b) run that binary: "sluice-before".
variants=""; [ -z "${BEFORE_BIN:-}" ] || variants="b"
up() { for _ in $(seq 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "not up: $1" >&2; exit 1; }
for v in "" $variants; do
  sluice_config "S1$v" 1 "$work/static" "$hs256" "" "$(room drop '"/drop/*"' 1 1)"
  sluice_config "S2$v" 2 "$work/static" "$hs256" "" ""
  sluice_config "SJ$v" 1 "$work/empty" "$hs256" 'trusted_proxies = ["127.0.0.1"]' "$(room drop '"/drop/*"' 1 1)"
  sluice_config "SE$v" 1 "$work/empty" "$eddsa" "" "$(room shop '"/p/*"' 1000 1000)"
  gateway_bin=$SLUICE_BIN; [ -z "$v" ] || gateway_bin=$BEFORE_BIN
  for s in S1 S2 SJ SE; do
    SLUICE_LOG=warn "$gateway_bin" run --config "$work/$s$v.toml" 2>"$work/$s$v.err" &
    echo $! > "$work/$s$v.pid"
  done
done
nginx -c "$work/nginx1.conf"; nginx -c "$work/nginx2.conf"
"$BARE_BIN" "127.0.0.1:$BARE" "127.0.0.1:$ORIGIN" 1 2>"$work/bare.err" &
echo $! > "$work/bare.pid"
for v in "" $variants; do
  for s in S1 S2 SJ SE; do eval "up http://127.0.0.1:\$PORT_$s$v/item.json"; done
  # The status ticket waits: the first joiner holds the room's only active
  # slot for the whole run (it collects its pass, or it would be a no-show
  # and the second let in), the second is polled.
  eval "g=http://127.0.0.1:\$PORT_S1$v"
  first=$(curl -sf -X POST "$g/queue/drop/join" | json ticket)
  for _ in $(seq 100); do
    curl -sf -H "Authorization: Bearer $first" "$g/queue/drop/status" | grep -q '"admitted"' && break
    sleep 0.1
  done
  eval "ticket$v=\$(curl -sf -X POST \"\$g/queue/drop/join\" | json ticket)"
  eval "g=http://127.0.0.1:\$PORT_SE$v"
  eval "pass$v=\$(bench_pass \"\$g\" shop)"
done
up "http://127.0.0.1:$NGX/item.json"; up "http://127.0.0.1:$NGXS/cat/item.json"
up "http://127.0.0.1:$NGXS2/cat/item.json"; up "http://127.0.0.1:$BARE/item.json"

cat > "$work/join.lua" <<'LUA'
wrk.method = "POST"
local n = 0
request = function()
  n = n + 1
  local ip = string.format("10.9.%d.%d", math.floor(n / 256) % 256, n % 256)
  return wrk.format(nil, nil, { ["X-Forwarded-For"] = ip })
end
LUA

tck=$(getconf CLK_TCK)
pids_of() { # the processes of one server: a pid file's process and its children
  local p; p=$(cat "$work/$1.pid"); echo "$p $(pgrep -P "$p" | tr '\n' ' ')"
}
cpu_ticks() { local t=0 p f; for p in "$@"; do read -r -a f < "/proc/$p/stat"; t=$((t + f[13] + f[14])); done; echo "$t"; }
# measure SCENARIO SIDE SERVER URL [wrk args...]: one wrk run; appends "req/s µs-cpu/req non-2xx" to a file.
measure() {
  local scenario=$1 side=$2 server=$3 url=$4; shift 4
  local pids before after out reqs rps bad cpu
  pids=$(pids_of "$server"); before=$(cpu_ticks $pids)
  out=$(wrk -t1 -c"$conns" -d"${secs}s" "$@" "$url")
  after=$(cpu_ticks $pids)
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  bad=$(awk '/Non-2xx/ {print $5}' <<<"$out"); bad=${bad:-0}
  cpu=$(awk -v t=$((after - before)) -v hz="$tck" -v n="$reqs" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
  echo "$rps $cpu $bad" >> "$work/res.$scenario.$side"
  printf '  %-8s %-18s %10s req/s %8s µs CPU/req%s\n' "$scenario" "$side" "$rps" "$cpu" \
    "$([ "$bad" = 0 ] || echo ", $bad non-2xx")"
}
# sluice_side SCENARIO V: the gateway (variant V: "" or "b") on SCENARIO.
sluice_side() {
  local scenario=$1 v=$2 side=sluice; [ -z "$v" ] || side=sluice-before
  local s1 s2 sj se tk ps
  eval "s1=http://127.0.0.1:\$PORT_S1$v s2=http://127.0.0.1:\$PORT_S2$v sj=http://127.0.0.1:\$PORT_SJ$v se=http://127.0.0.1:\$PORT_SE$v tk=\$ticket$v ps=\$pass$v"
  case $scenario in
    proxy) measure proxy "$side" "S1$v" "$s1/item.json" ;;
    catalog1) measure catalog1 "$side" "S1$v" "$s1/cat/item.json" ;;
    catalog2) measure catalog2 "$side" "S2$v" "$s2/cat/item.json" ;;
    status) measure status "$side" "S1$v" "$s1/queue/drop/status" -H "Authorization: Bearer $tk" ;;
    join) measure join "$side" "SJ$v" "$sj/queue/drop/join" -s "$work/join.lua" ;;
    pass)
      measure pass "eddsa-pass${v:+-before}" "SE$v" "$se/p/item.json" -H "Authorization: Bearer $ps"
      measure pass "unprotected${v:+-before}" "SE$v" "$se/item.json" ;;
  esac
}
both() { local v; for v in "" $variants; do sluice_side "$1" "$v"; done; }
round() {
  for s in $scenarios; do case $s in
    proxy)
      both proxy
      measure proxy nginx nginx1 "http://127.0.0.1:$NGX/item.json"
      measure proxy bare-pingora bare "http://127.0.0.1:$BARE/item.json" ;;
    catalog)
      both catalog1
      measure catalog1 nginx nginx1 "http://127.0.0.1:$NGXS/cat/item.json"
      both catalog2
      measure catalog2 nginx nginx2 "http://127.0.0.1:$NGXS2/cat/item.json" ;;
    status)
      both status
      measure status nginx nginx1 "http://127.0.0.1:$NGXS/queue/drop/status" -H "Authorization: Bearer $ticket" ;;
    join)
      both join
      measure join nginx nginx1 "http://127.0.0.1:$NGXS/queue/drop/join" -s "$work/join.lua" ;;
    pass) both pass ;;
  esac; done
}
echo "warm-up (not counted)"
round >/dev/null
rm -f "$work"/res.*
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$rounds"); do echo "round $r"; round; done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
col() { awk -v c="$3" '{print $c}' "$work/res.$1.$2" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
echo
echo "cores: $(nproc); wrk -t1 -c$conns -d${secs}s; $rounds rounds; load average before $load_before, after $load_after"
printf '%-34s %12s %12s %7s %14s %14s %9s\n' "median" "req/s" "baseline" "ratio" "µs CPU/req" "baseline CPU" "CPU ratio"
row() { # label scenario side baseline-side
  local a b ca cb
  a=$(col "$2" "$3" 1); b=$(col "$2" "$4" 1); ca=$(col "$2" "$3" 2); cb=$(col "$2" "$4" 2)
  printf '%-34s %12s %12s %7s %14s %14s %9s\n' "$1" "$a" "$b" "$(ratio "$a" "$b")" "$ca" "$cb" "$(ratio "$ca" "$cb")"
}
for s in $scenarios; do case $s in
  proxy)
    row "proxy: sluice vs nginx" proxy sluice nginx
    row "proxy: sluice vs bare pingora" proxy sluice bare-pingora
    row "proxy: bare pingora vs nginx" proxy bare-pingora nginx ;;
  catalog)
    row "catalog, 1 worker: sluice vs nginx" catalog1 sluice nginx
    row "catalog, 2 workers: sluice vs nginx" catalog2 sluice nginx ;;
  status)
    row "status poll vs nginx return 200" status sluice nginx
    echo "  (sluice status answers not 2xx per round, early polls: $(awk '{printf "%s ", $3}' "$work/res.status.sluice"))" ;;
  join) row "join vs nginx return 200" join sluice nginx ;;
  pass) row "EdDSA pass vs unprotected" pass eddsa-pass unprotected ;;
esac; done
if [ -n "$variants" ]; then
  echo
  echo "this build against BEFORE_BIN ($BEFORE_BIN), same run:"
  for s in $scenarios; do case $s in
    catalog) row "catalog1: sluice vs before" catalog1 sluice sluice-before
             row "catalog2: sluice vs before" catalog2 sluice sluice-before ;;
    pass) row "pass: sluice vs before" pass eddsa-pass eddsa-pass-before
          row "before: EdDSA pass vs unprotected" pass eddsa-pass-before unprotected-before ;;
    *) row "$s: sluice vs before" "$s" sluice sluice-before ;;
  esac; done
fi
for v in "" $variants; do
  errors=$(cat "$work"/S?$v.err | grep -c ERROR || true)
  echo "ERROR lines in the logs of ${SLUICE_BIN}${v:+ (before: $BEFORE_BIN)} at SLUICE_LOG=warn: $errors"
done
