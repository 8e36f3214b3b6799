#!/usr/bin/env bash
# Requests/s through Sluice and through nginx as a reverse proxy, to the same
# local origin (nginx serving a 1 KiB file), same worker count, same run.
# Rounds alternate so machine noise hits both alike; prints medians.
#   usage: scripts/bench-proxy.sh [rounds=3] [seconds=10] [connections=64]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}; secs=${2:-10}; conns=${3:-64}
command -v wrk >/dev/null && command -v nginx >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk nginx-light >/dev/null; }
cargo build --release -p sluice-gateway --bin sluice >/dev/null

work=$(mktemp -d); chmod 755 "$work"   # nginx workers read it as www-data
trap 'kill $(cat "$work"/*.pid 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ORIGIN=$(free_port); NGX=$(free_port); SLU=$(free_port); ADM=$(free_port)
mkdir -p "$work/www" "$work/static"
chmod 755 "$work/www"; head -c 1024 /dev/zero | tr '\0' 'x' > "$work/www/item.json"

cat > "$work/origin.conf" <<CONF
worker_processes 1; daemon on; pid $work/origin.pid; error_log $work/origin.err;
events { worker_connections 4096; }
http { access_log off; server { listen 127.0.0.1:$ORIGIN; root $work/www; } }
CONF
cat > "$work/proxy.conf" <<CONF
worker_processes 1; daemon on; pid $work/nginx.pid; error_log $work/nginx.err;
events { worker_connections 4096; }
http { access_log off;
  upstream origin { server 127.0.0.1:$ORIGIN; keepalive 128; }
  server { listen 127.0.0.1:$NGX;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; } } }
CONF
cat > "$work/sluice.toml" <<CONF
[gateway]
listen = "127.0.0.1:$SLU"
admin_listen = "127.0.0.1:$ADM"
data_dir = "$work/var"
static_dir = "$work/static"
origin = "http://127.0.0.1:$ORIGIN"
threads = 1
CONF
nginx -c "$work/origin.conf"; nginx -c "$work/proxy.conf"
SLUICE_LOG=warn ./target/release/sluice run --config "$work/sluice.toml" 2>"$work/sluice.err" &
echo $! > "$work/sluice.pid"
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$SLU/item.json" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$NGX/item.json" >/dev/null

run() { wrk -t1 -c"$conns" -d"${secs}s" "$1" | awk '/Requests\/sec/ {print $2}'; }
run "http://127.0.0.1:$SLU/item.json" >/dev/null   # warm-up
run "http://127.0.0.1:$NGX/item.json" >/dev/null
s=(); n=()
for r in $(seq "$rounds"); do
  s+=("$(run "http://127.0.0.1:$SLU/item.json")")
  n+=("$(run "http://127.0.0.1:$NGX/item.json")")
  echo "round $r: sluice ${s[-1]} req/s, nginx ${n[-1]} req/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms=$(median "${s[@]}"); mn=$(median "${n[@]}")
echo "cores: $(nproc); wrk -t1 -c$conns -d${secs}s; 1 worker each"
echo "median: sluice $ms req/s, nginx $mn req/s, ratio $(awk -v a="$ms" -v b="$mn" 'BEGIN {printf "%.2f", a/b}')"
