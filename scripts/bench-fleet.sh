#!/usr/bin/env bash
# What a gateway on Redis ([cluster] redis_url) asks of Redis: a throwaway
# redis-server on a free loopback port and one `sluice run` on it, then
#
#   joins    JOINS joins from THREADS keep-alive clients: joins/s, and
#            FCALLs per join from Redis's own INFO commandstats (the release
#            tick's 10 calls/s and the heartbeat's 1/s are taken off)
#   polls    POLLS status polls of one waiting ticket: polls/s, FCALLs per
#            poll (the goal is 0: polls answer from memory)
#   memory   the room's keys after the joins, and after one more batch of
#            1,000,000 places: bytes per waiting shopper
#
#   usage: scripts/bench-fleet.sh [joins=6400] [polls=9600] [threads=64]
#   SLUICE_BIN=...: measure that binary (default: target/debug/sluice, built).
# Needs redis-server, redis-cli and python3. Never touches port 6379.
set -euo pipefail
cd "$(dirname "$0")/.."
joins=${1:-6400}; polls=${2:-9600}; threads=${3:-64}
bin=${SLUICE_BIN:-}
if [[ -z "$bin" ]]; then
  cargo build -q -p sluice-gateway --bin sluice
  bin="${CARGO_TARGET_DIR:-target}/debug/sluice"
fi
dir=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port); gport=$(free_port); aport=$(free_port)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
pids+=($!)
R() { redis-cli -p "$rport" "$@"; }
until R PING >/dev/null 2>&1; do sleep 0.05; done
mkdir -p "$dir/static" "$dir/var"; echo shop >"$dir/static/index.html"
cat >"$dir/sluice.toml" <<EOF
[gateway]
listen = "127.0.0.1:$gport"
admin_listen = "127.0.0.1:$aport"
data_dir = "$dir/var"
static_dir = "$dir/static"

[cluster]
redis_url = "redis://127.0.0.1:$rport/"

[[keys]]
kid = "bench"
alg = "HS256"
secret = "c2x1aWNlLWZsZWV0LXRlc3Qta2V5LTMyLWJ5dGVzLW9r"

[[rooms]]
name = "drop"
release_per_second = 1
max_active = 10
queue_capacity = 10000000
joins_per_minute_per_client = 100000
EOF
SLUICE_LOG=warn "$bin" run --config "$dir/sluice.toml" >"$dir/sluice.log" 2>&1 &
pids+=($!)
until curl -sf -o /dev/null "http://127.0.0.1:$gport/queue/drop/watermark"; do sleep 0.1; done
sleep 2.5 # the room's warm-up (WARM_UP_MS)

python3 - "$gport" "$threads" "$joins" "$polls" "$rport" <<'EOF'
import http.client, json, subprocess, sys, threading, time
port, threads, joins, polls, rport = (int(a) for a in sys.argv[1:])
def fcalls():
    out = subprocess.run(["redis-cli", "-p", str(rport), "INFO", "commandstats"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("cmdstat_fcall:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0
def storm(n, req):
    codes, lock = {}, threading.Lock()
    def run(k):
        c = http.client.HTTPConnection("127.0.0.1", port)
        for _ in range(k):
            status = req(c)
            with lock:
                codes[status] = codes.get(status, 0) + 1
    per = n // threads
    ts = [threading.Thread(target=run, args=(per,)) for _ in range(threads)]
    t = time.time(); [x.start() for x in ts]; [x.join() for x in ts]
    return codes, time.time() - t
def join(c):
    c.request("POST", "/queue/drop/join"); r = c.getresponse(); r.read(); return r.status
before = fcalls()
codes, secs = storm(joins, join)
calls = fcalls() - before - round(secs * 11)
n = sum(codes.values())
print(f"joins: {codes} {n / secs:.0f}/s over {secs:.1f} s; {calls} join FCALLs, {n / max(calls, 1):.1f} joins per call")
c = http.client.HTTPConnection("127.0.0.1", port)
c.request("POST", "/queue/drop/join"); r = c.getresponse(); ticket = json.loads(r.read())["ticket"]
def poll(c):
    c.request("GET", "/queue/drop/status", headers={"Authorization": "Bearer " + ticket})
    r = c.getresponse(); r.read(); return r.status
before = fcalls()
codes, secs = storm(polls, poll)
calls = fcalls() - before - round(secs * 11)
n = sum(codes.values())
print(f"polls: {codes} {n / secs:.0f}/s over {secs:.1f} s; {max(calls, 0)} FCALLs beyond the ticks ({max(calls, 0) / n:.4f} per poll)")
EOF

given=$(R HGET 'sluice2:{drop}' next)
room=$(R MEMORY USAGE 'sluice2:{drop}')
slots=$(R MEMORY USAGE 'sluice2:{drop}:slots' || echo 0)
R FCALL sluice_2_join 1 'sluice2:{drop}' 1000000 100000000 0 >/dev/null
given2=$(R HGET 'sluice2:{drop}' next)
room2=$(R MEMORY USAGE 'sluice2:{drop}')
echo "memory: room hash $room B with $given places given, $room2 B with $given2; slots zset $slots B (bounded by max_active)"
