#!/usr/bin/env bash
# Runs the demo store: gateway on http://127.0.0.1:8080, admin and metrics
# on http://127.0.0.1:9090. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cargo build --release -p sluice-gateway --bin sluice
echo "Sluice demo: open http://127.0.0.1:8080/  (metrics: http://127.0.0.1:9090/metrics, state: http://127.0.0.1:9090/admin/state)"
exec ./target/release/sluice run --config policies/demo.toml "$@"
