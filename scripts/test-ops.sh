#!/usr/bin/env bash
# The deployment files, checked offline in seconds (./scripts/test.sh runs
# this; the image's slow build and run is scripts/test-image.sh):
# - ops/systemd/sluice.service: `systemd-analyze verify` says nothing, and
#   `systemd-analyze security --offline=true` scores it at most 2.0;
# - ops/kubernetes/: every manifest validates against the Kubernetes
#   schemas (kubernetes-validate --strict, the oldest version the manifests
#   need and the newest it knows), the kustomization lists every manifest,
#   and checkov fails no check (the ones skipped say why in the file).
# The policies these files ship are checked by `cargo test` (gateway/tests/deploy.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
tools="${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice-tools}/venv-ops/bin"
fail() { echo "FAIL: $*" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- systemd ---------------------------------------------------------------
unit=ops/systemd/sluice.service
# verify checks that the commands exist: a root holding systemd's own units,
# /bin/kill and a stand-in at the unit's binary path.
root="$work/root"
mkdir -p "$root/usr/lib" "$root/usr/bin" "$root/usr/local/bin" "$root/etc/systemd/system"
ln -s usr/bin "$root/bin"
cp -a /usr/lib/systemd "$root/usr/lib/"
cp "$(type -P kill)" "$root/usr/bin/kill"
printf '#!/bin/sh\n' >"$root/usr/local/bin/sluice"
chmod +x "$root/usr/local/bin/sluice"
cp "$unit" "$root/etc/systemd/system/sluice.service"
# It exits 0 on unknown keys and bad values, and says so: any output fails.
out="$(systemd-analyze verify --man=no --root="$root" sluice.service 2>&1)" || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify $unit:
$out"
echo "ok: systemd-analyze verify $unit"

security="$(systemd-analyze security --offline=true --no-pager "$unit" 2>&1)" || fail "systemd-analyze security: $security"
score="$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) .*/\1/p' <<<"$security")"
[ -n "$score" ] || fail "no exposure level in:
$security"
awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' ||
  fail "systemd-analyze security --offline=true $unit: exposure $score, at most 2.0 allowed:
$(grep '✗' <<<"$security")"
echo "ok: systemd-analyze security --offline=true $unit: exposure $score"

# --- Kubernetes --------------------------------------------------------------
cd ops/kubernetes
manifests=()
for f in *.yaml; do
  [ "$f" = kustomization.yaml ] || manifests+=("$f")
done
# Every manifest is one the kustomization applies, and its generator's
# files exist (kubectl is not needed to check that).
"$tools/python" - "${manifests[@]}" <<'EOF'
import os, sys, yaml
k = yaml.safe_load(open("kustomization.yaml"))
assert k["kind"] == "Kustomization", k["kind"]
listed = set(k.get("resources", []))
missing = sorted(set(sys.argv[1:]) - listed)
absent = sorted(r for r in listed if not os.path.exists(r))
files = [f for g in k.get("configMapGenerator", []) for f in g.get("files", [])]
absent += [f for f in files if not os.path.exists(f)]
if missing or absent:
    sys.exit(f"kustomization.yaml: not listed {missing}, listed but absent {absent}")
EOF
echo "ok: kustomization.yaml lists ${manifests[*]}"
# 1.30: the preStop sleep action is on by default from there.
for version in 1.30.0 1.37.0; do
  out="$("$tools/kubernetes-validate" --strict -k "$version" "${manifests[@]}" 2>&1)" ||
    fail "kubernetes-validate $version:
$out"
  ! grep -v '^INFO .* passed ' <<<"$out" | grep -q . || fail "kubernetes-validate $version:
$out"
done
echo "ok: kubernetes-validate --strict (1.30, 1.37) ${manifests[*]}"

# --skip-download: no call to Prisma Cloud (offline).
out="$("$tools/checkov" -d . --framework kubernetes --skip-download --quiet --compact 2>&1)" ||
  fail "checkov:
$out"
grep -q 'Failed checks: 0,' <<<"$out" || fail "checkov:
$out"
echo "ok: checkov: $(grep -o 'Passed checks: .*' <<<"$out")"
