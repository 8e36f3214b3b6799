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
  command -v timeout >/dev/null || need+=(coreutils)             # bounds the schemathesis run
  command -v python3 >/dev/null || need+=(python3)
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv) # schemathesis lives in a venv
  # scripts/test-ops.sh: systemd-analyze checks ops/systemd/sluice.service
  # offline (the package's binaries only: nothing is started, PID 1 stays).
  command -v systemd-analyze >/dev/null || need+=(systemd)
  type -P kill >/dev/null || need+=(procps)                     # the unit's ExecReload, for verify
fi
# scripts/test-image.sh: buildah builds the image from a root filesystem
# (no registry, no base image); unshare, chroot and pgrep try it.
if [ "${1:-}" = "--image" ]; then
  command -v buildah >/dev/null || need+=(buildah)
  command -v unshare >/dev/null || need+=(util-linux)
  command -v pgrep >/dev/null || need+=(procps)
  command -v strace >/dev/null || need+=(strace)          # the unit's SystemCallFilter against a run
  command -v systemd-analyze >/dev/null || need+=(systemd)
  command -v curl >/dev/null || need+=(curl)
  command -v python3 >/dev/null || need+=(python3)
  command -v git >/dev/null || need+=(git)
fi

# PostgreSQL's server binaries (initdb, pg_ctl), for tests that start a
# throwaway cluster of their own on a free port. Debian's package would
# create and start a `main` cluster on 5432; createcluster.conf stops that,
# so installing it starts no server.
if [ "${1:-}" = "--test" ] && ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  mkdir -p /etc/postgresql-common
  grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf ||
    echo 'create_main_cluster = false' >> /etc/postgresql-common/createcluster.conf
  need+=(postgresql)
fi

# redis-server, for tests that start a throwaway Redis of their own on a
# free port (the machine's own Redis, if any, is never touched).
if [ "${1:-}" = "--test" ] && ! command -v redis-server >/dev/null; then
  need+=(redis-server)
fi

# pgbouncer, for the test that runs the PostgreSQL back end behind a
# transaction-mode pooler of its own on a free port (its Debian service is
# not started: see below).
if [ "${1:-}" = "--test" ] && ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
  need+=(pgbouncer)
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # Packages with a service (redis-server, postgresql, prometheus) must not
  # start it: a policy-rc.d that refuses every start is in place while apt
  # runs, unless the machine already has one.
  own_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    own_policy=1
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  # --no-install-recommends keeps prometheus to its binaries.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  [ -z "$own_policy" ] || $SUDO rm -f /usr/sbin/policy-rc.d
fi
if [ "${1:-}" = "--test" ]; then
  # schemathesis checks docs/openapi.yaml against a running gateway
  # (gateway/tests/openapi.rs). Pinned; in its own venv so no system
  # Python is touched. scripts/test.sh puts the venv on PATH.
  SCHEMATHESIS_VERSION=4.32.5
  venv="${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice-tools}/venv"
  if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
    echo "installing: schemathesis $SCHEMATHESIS_VERSION" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
  fi
  # kubernetes-validate (which ships the Kubernetes schemas: it runs
  # offline) and checkov check ops/kubernetes/ (scripts/test-ops.sh), in a
  # venv of their own: checkov pins many packages. Pinned.
  KUBERNETES_VALIDATE_VERSION=1.37.0
  CHECKOV_VERSION=3.3.30
  ops_venv="${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice-tools}/venv-ops"
  if ! "$ops_venv/bin/kubernetes-validate" --version 2>/dev/null | grep -qx "$KUBERNETES_VALIDATE_VERSION" ||
     ! "$ops_venv/bin/checkov" --version 2>/dev/null | grep -qx "$CHECKOV_VERSION"; then
    echo "installing: kubernetes-validate $KUBERNETES_VALIDATE_VERSION, checkov $CHECKOV_VERSION" >&2
    python3 -m venv "$ops_venv"
    "$ops_venv/bin/pip" install --quiet --disable-pip-version-check \
      "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "checkov==$CHECKOV_VERSION"
  fi
  # cargo deny checks licences, duplicate crates and sources (deny.toml).
  CARGO_DENY_VERSION=0.20.2
  if ! cargo deny --version 2>/dev/null | grep -q "$CARGO_DENY_VERSION"; then
    echo "installing: cargo-deny $CARGO_DENY_VERSION (builds from source, several minutes)" >&2
    cargo install --locked "cargo-deny@$CARGO_DENY_VERSION"
  fi
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt >/dev/null 2>&1 || true
