#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh --test
export SLUICE_REQUIRE_TOOLS=1   # tests that need promtool or schemathesis fail instead of skipping
export PATH="${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice-tools}/venv/bin:$PATH"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# No circle of modules inside a crate (docs/architecture.md).
python3 scripts/circles.py
# Licences, duplicate majors and sources (deny.toml). Advisories need the
# RustSec database from GitHub, which CI cannot reach: docs/operations.md.
cargo deny check bans licenses sources
# The deployment files, offline: systemd-analyze on the unit,
# kubernetes-validate and checkov on the manifests (seconds). The image's
# build and run is slow: scripts/test-image.sh, not run here.
./scripts/test-ops.sh
cargo test --workspace
