#!/usr/bin/env bash
# Waiting rooms on Redis ([cluster] redis_url) next to the embedded room, in
# one run, alternating rounds, wrk as the client:
#
#   polls    GET /queue/drop/status with one waiting ticket (HS256), on a
#            gateway with Redis configured and on an embedded one (same
#            config otherwise, 1 worker thread each). The goal is >= 0.9x:
#            a poll is answered from memory and never reaches Redis. The
#            embedded room answers most of these polls 429 (early: one
#            ticket polled in a loop is a refresh storm) and the fleet 200;
#            both counts are printed.
#   joins    POST /queue/drop/join (a new client address each, through a
#            trusted proxy): the embedded gateway alone, and three gateways
#            on one Redis at once (each wrk gets a third of the
#            connections); joins per Redis call from Redis's own INFO
#            commandstats, the background calls (release ticks,
#            heartbeats) measured while idle and taken off.
#   memory   the room's keys in Redis after the joins, and after 1,000,000
#            more places given in one call: bytes per waiting shopper.
#
#   usage: scripts/bench-fleet.sh [rounds=3] [seconds=5] [connections=64]
#   SLUICE_BIN=...: measure that binary (default: the release build, built).
# Needs redis-server, redis-cli, wrk, curl and python3 (installs the missing
# Debian packages). Never touches port 6379.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}; secs=${2:-5}; conns=${3:-64}

. scripts/bench-common.sh
bench_tools wrk curl redis-server redis-cli
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --release -p sluice-gateway --bin sluice >&2
fi
SLUICE_BIN=${SLUICE_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice}

work=$(mktemp -d)
trap bench_cleanup EXIT
mkdir -p "$work/static"; echo shop >"$work/static/index.html"

RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --daemonize yes --pidfile "$work/redis.pid" --logfile "$work/redis.log"
R() { redis-cli -p "$RPORT" "$@"; }
until R PING >/dev/null 2>&1; do sleep 0.05; done

hs256=$("$SLUICE_BIN" keygen --alg hs256 | grep -v '^#')
# gateway NAME CLUSTER: writes NAME.toml (PORT_NAME), starts it.
gateway() {
  local name=$1 cluster=$2 port
  port=$(free_port); eval "PORT_$name=$port"
  cat >"$work/$name.toml" <<CONF
[gateway]
listen = "127.0.0.1:$port"
admin_listen = "127.0.0.1:$(free_port)"
data_dir = "$work/var-$name"
static_dir = "$work/static"
threads = 1
trusted_proxies = ["127.0.0.1"]
$cluster
$hs256
[[rooms]]
name = "drop"
release_per_second = 1
max_active = 1
queue_capacity = 50000000
pass_ttl_s = 86400
poll_min_s = 1
joins_per_minute_per_client = 100000
CONF
  SLUICE_LOG=warn "$SLUICE_BIN" run --config "$work/$name.toml" 2>"$work/$name.err" &
  echo $! >"$work/$name.pid"
}
cluster="[cluster]
redis_url = \"redis://127.0.0.1:$RPORT/\""
gateway E ""
for f in F1 F2 F3; do gateway "$f" "$cluster"; done
up() { for _ in $(seq 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "not up: $1" >&2; exit 1; }
for g in E F1 F2 F3; do eval "up http://127.0.0.1:\$PORT_$g/queue/drop/watermark"; done

# The polled ticket waits: the first joiner collects the room's only active
# slot (its pass lives a day), the second is polled.
for g in E F1; do
  eval "url=http://127.0.0.1:\$PORT_$g"
  bench_pass "$url" drop >/dev/null
  eval "ticket_$g=\$(bench_join \"\$url\" drop)"
done

cat >"$work/join.lua" <<'LUA'
wrk.method = "POST"
local n = math.random(0, 1000000)
request = function()
  n = n + 1
  local ip = string.format("10.%d.%d.%d", math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
  return wrk.format(nil, nil, { ["X-Forwarded-For"] = ip })
end
LUA

fcalls() { R INFO commandstats | awk -F'[=,]' '/^cmdstat_fcall:/ {print $2}'; }
# Redis's CPU in FCALLs so far, in microseconds.
fcall_usec() { R INFO commandstats | awk -F'[=,]' '/^cmdstat_fcall:/ {print $4}'; }
# Redis calls per second the fleet makes on its own (ticks, heartbeats).
idle_rate() { local a b; a=$(fcalls); sleep 2; b=$(fcalls); awk -v d=$((b - a)) 'BEGIN {printf "%.2f", d / 2}'; }
# wrk_run URL CONNS [args]: prints "requests non2xx".
wrk_run() {
  local url=$1 c=$2 out reqs bad; shift 2
  out=$(wrk -t1 -c"$c" -d"${secs}s" "$@" "$url")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  bad=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  echo "$reqs ${bad:-0}"
}

: >"$work/polls"; : >"$work/joins"
for r in $(seq "$rounds"); do
  for g in E F1; do
    eval "url=http://127.0.0.1:\$PORT_$g tk=\$ticket_$g"
    idle=$(idle_rate); a=$(fcalls)
    read -r reqs bad < <(wrk_run "$url/queue/drop/status" "$conns" -H "Authorization: Bearer $tk")
    b=$(fcalls)
    calls=$(awk -v d=$((b - a)) -v i="$idle" -v s="$secs" 'BEGIN {c = d - i * s; printf "%d", c < 0 ? 0 : c}')
    echo "$g $reqs $bad $calls" >>"$work/polls"
    printf 'round %d polls %-3s %8.0f /s  %s non-2xx  %s Redis calls beyond the background\n' \
      "$r" "$g" "$(awk -v n="$reqs" -v s="$secs" 'BEGIN {print n / s}')" "$bad" "$calls"
  done
  read -r reqs bad < <(wrk_run "http://127.0.0.1:$PORT_E/queue/drop/join" "$conns" -s "$work/join.lua")
  echo "E $reqs $bad 0" >>"$work/joins"
  printf 'round %d joins E   %8.0f /s  %s non-2xx\n' "$r" "$(awk -v n="$reqs" -v s="$secs" 'BEGIN {print n / s}')" "$bad"
  idle=$(idle_rate); a=$(fcalls); ua=$(fcall_usec)
  runs=()
  for g in F1 F2 F3; do
    eval "url=http://127.0.0.1:\$PORT_$g"
    wrk_run "$url/queue/drop/join" $((conns / 3)) -s "$work/join.lua" >"$work/join.$g" &
    runs+=($!)
  done
  wait "${runs[@]}"
  b=$(fcalls); ub=$(fcall_usec)
  reqs=0; bad=0
  for g in F1 F2 F3; do read -r n k <"$work/join.$g"; reqs=$((reqs + n)); bad=$((bad + k)); done
  calls=$(awk -v d=$((b - a)) -v i="$idle" -v s="$secs" 'BEGIN {printf "%d", d - i * s}')
  # Redis CPU per join: all FCALLs of the round (the background's too, a
  # few percent) over the joins.
  upj=$(awk -v u=$((ub - ua)) -v n="$reqs" 'BEGIN {printf "%.2f", u / (n > 0 ? n : 1)}')
  echo "F $reqs $bad $calls $upj" >>"$work/joins"
  printf 'round %d joins 3xF %8.0f /s  %s non-2xx  %.1f joins per Redis call  %s us of Redis CPU per join\n' "$r" \
    "$(awk -v n="$reqs" -v s="$secs" 'BEGIN {print n / s}')" "$bad" \
    "$(awk -v n="$reqs" -v c="$calls" 'BEGIN {print n / (c > 0 ? c : 1)}')" "$upj"
done

median() { sort -n | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
pe=$(awk -v s="$secs" '$1 == "E" {print $2 / s}' "$work/polls" | median)
pf=$(awk -v s="$secs" '$1 == "F1" {print $2 / s}' "$work/polls" | median)
je=$(awk -v s="$secs" '$1 == "E" {print $2 / s}' "$work/joins" | median)
jf=$(awk -v s="$secs" '$1 == "F" {print $2 / s}' "$work/joins" | median)
jpc=$(awk '$1 == "F" && $4 > 0 {print $2 / $4}' "$work/joins" | median)
ppc=$(awk '$1 == "F1" {print $4 / $2}' "$work/polls" | median)
upj=$(awk '$1 == "F" {print $5}' "$work/joins" | median)

lib=$(R FUNCTION LIST | awk '/^library_name$/ {getline; print; exit}')
join_fn=$(R FUNCTION LIST | grep -o "${lib}_join\b" | head -1 || true)
# The room's hash: the one key that is neither the fleet list nor a part.
key=$(R --scan --pattern '*{drop}' | head -1)
given=$(R HGET "$key" next || echo "?")
room=$(R MEMORY USAGE "$key")
slots=$(R MEMORY USAGE "$key:slots" || echo 0); slots=${slots:-0}
extra=""
if [ -n "$join_fn" ]; then
  # One more batch of 1,000,000 places, as the join function gives them.
  # (sluice_5_join: n capacity hw_next period_us burst, no client indices:
  # none limited.)
  if R FCALL "$join_fn" 1 "$key" 1000000 100000000 0 600 100000 >/dev/null 2>&1; then
    extra=", $(R MEMORY USAGE "$key") B with $(R HGET "$key" next) given"
  fi
fi
keys=$(R DBSIZE)

echo
echo "cores: $(nproc); wrk -t1 -c$conns -d${secs}s; $rounds rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf 'polls/s  embedded %.0f  redis %.0f  ratio %.2f  (Redis calls per poll %s)\n' "$pe" "$pf" \
  "$(awk -v a="$pf" -v b="$pe" 'BEGIN {print a / b}')" "$ppc"
awk '$1 == "E" {e += $3; n += $2} $1 == "F1" {f += $3; m += $2} END {printf "  non-2xx share: embedded %.2f, redis %.2f\n", e / n, f / m}' "$work/polls"
printf 'joins/s  embedded (1 gateway) %.0f  three gateways on one Redis %.0f  (%s joins per Redis call, %s us of Redis CPU per join)\n' "$je" "$jf" "$jpc" "$upj"
echo "memory: room hash $room B with $given places given$extra; slots $slots B (bounded by max_active); $keys keys in Redis"
