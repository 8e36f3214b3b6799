#!/usr/bin/env bash
# Installs what building and testing Sluice needs on a fresh Debian machine
# with only the Rust toolchain. Idempotent: does nothing when all is there.
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(build-essential)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v promtool >/dev/null || need+=(prometheus)   # promtool checks /metrics
command -v curl >/dev/null || need+=(curl)
if [ "${1:-}" = "--test" ]; then
  command -v chromium >/dev/null || need+=(chromium)            # the queue page's browser test
  command -v chromedriver >/dev/null || need+=(chromium-driver)
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # --no-install-recommends keeps prometheus to its binaries; the package's
  # service is never started by us.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt >/dev/null 2>&1 || true
