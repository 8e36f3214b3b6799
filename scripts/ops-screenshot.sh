#!/usr/bin/env bash
# Makes docs/img/dashboard.png from real data: a release gateway under the
# flash-crowd scenario, scraped by a throwaway Prometheus (Debian's
# `prometheus` package) that loads ops/prometheus/sluice-rules.yml, and
# Prometheus's own graph page rendered by headless Chromium with the
# dashboard's main queries. Everything listens on free loopback ports and
# is stopped at the end; nothing touches a Prometheus on :9090.
#
#   ./scripts/ops-screenshot.sh [OUT.png]      (default docs/img/dashboard.png)
#
# Needs: prometheus, chromium (scripts/deps.sh --test), python3, curl.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${1:-docs/img/dashboard.png}
bin=${SLUICE_BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}
shoppers=${SHOPPERS:-2500}

if [ ! -x "$bin/sluice" ] || [ ! -x "$bin/sluice-load" ]; then
  cargo build --release -p sluice-gateway -p sluice-loadtest
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {
  for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.2; done
  echo "$1 did not answer" >&2; return 1
}

listen=$(free_port); admin=$(free_port); prom=$(free_port)
cat >"$work/sluice.toml" <<EOF
[gateway]
listen = "127.0.0.1:$listen"
admin_listen = "127.0.0.1:$admin"
data_dir = "$work/var"
static_dir = "$root/static"
region = "sa-east-1"

[[rooms]]
name = "drop"
protect = ["/checkout", "/orders/*"]
release_per_second = 50
max_active = 2000
queue_capacity = 100000
pass_ttl_s = 120
poll_min_s = 3
poll_max_s = 10
idle_timeout_s = 20
joins_per_minute_per_client = 100000   # every shopper comes from 127.0.0.1

[[products]]
sku = "sneaker-42"
stock = 2000
price_cents = 19900
room = "drop"

[[products]]
sku = "hoodie-m"
stock = 800
price_cents = 24900
room = "drop"

[[products]]
sku = "cap-one"
stock = 500
price_cents = 7900
room = "drop"

[payments]
provider = "simulated"
simulated_latency_ms = 40

[payments.webhooks.simulated]
secrets = ["screenshot-only-webhook-secret"]
EOF
"$bin/sluice" run --config "$work/sluice.toml" >"$work/sluice.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$admin/readyz"

cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 2s
  evaluation_interval: 5s
rule_files: ["$root/ops/prometheus/sluice-rules.yml"]
scrape_configs:
  - job_name: sluice
    static_configs:
      - targets: ["127.0.0.1:$admin"]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom" >"$work/prometheus.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$prom/-/ready"

start=$(date +%s)
"$bin/sluice-load" run loadtest/scenarios/flash-crowd.toml --shoppers "$shoppers" \
  --target "http://127.0.0.1:$listen" --admin "http://127.0.0.1:$admin" \
  --config "$work/sluice.toml" --data-dir "$work/var" --out "$work/load" \
  | tail -n 5 || echo "the load run's verdict is in $work/load (kept only for this run)" >&2
sleep 6   # two more scrapes after the last shopper
range_s=$(( $(date +%s) - start + 20 ))

# The dashboard's main panels, as Prometheus graph-page panels.
exprs=(
  'sum(rate(sluice_admissions_total[30s])) or sum by (result) (rate(sluice_queue_joins_total[30s]))'
  'sum by (room) (sluice_queue_waiting)'
  '{__name__=~"sluice_release_rate|sluice_release_rate_limit"}'
  'sum by (result) (rate(sluice_checkout_total[30s]))'
  'histogram_quantile(0.99, sum by (le) (rate(sluice_checkout_seconds_bucket[30s])))'
  'sum by (sku, state) (sluice_inventory_units)'
  'sum by (result) (rate(sluice_webhook_events_total[30s]))'
  'sluice_outbox_lag_seconds'
)
query="http://127.0.0.1:$prom/graph?"
for i in "${!exprs[@]}"; do
  enc=$(python3 -c 'import sys,urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "${exprs[$i]}")
  query+="g$i.expr=$enc&g$i.tab=0&g$i.range_input=${range_s}s&"
done
mkdir -p "$(dirname "$out")"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$(mktemp -d -p "$work")" --hide-scrollbars \
  --virtual-time-budget=15000 --window-size=1400,6150 \
  --screenshot="$root/$out" "$query" 2>/dev/null
echo "wrote $out (Prometheus $(prometheus --version 2>&1 | head -1 | cut -d' ' -f3) graph page, $shoppers shoppers, region sa-east-1)"
