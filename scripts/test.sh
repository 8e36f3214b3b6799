#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh --test
export SLUICE_REQUIRE_TOOLS=1   # tests that need promtool fail instead of skipping
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
