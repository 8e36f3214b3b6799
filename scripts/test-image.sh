#!/usr/bin/env bash
# The container image, built and tried (slow: a release build; not part of
# ./scripts/test.sh). Builds the image with ops/container/build-image.sh,
# checks its configuration (non-root user, STOPSIGNAL, ports, volume,
# labels), exports its root filesystem from the OCI archive and runs the
# image's own entry point in it under unshare + chroot, as the image's user,
# with a read-only root but for the data_dir volume, the way a container
# runtime would (no runtime runs here: crun's setrlimit is refused in this
# sandbox): `sluice check` on the image's policy, then `sluice run`, which
# must answer /healthz, /readyz, a catalog GET, a join and /metrics, reload
# on SIGHUP and drain on SIGTERM; that run is traced, and every system call
# it made must pass ops/systemd/sluice.service's SystemCallFilter. Prints
# the image's size. Needs root.
#
#   scripts/test-image.sh            builds the release binary first
#   SLUICE_BINARY=path scripts/test-image.sh   uses that binary
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh --image

target="${CARGO_TARGET_DIR:-target}"
binary="${SLUICE_BINARY:-}"
if [ -z "$binary" ]; then
  cargo build --release -p sluice-gateway
  binary="$target/release/sluice"
fi
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
work="$(mktemp -d)"
pid=""
unshare_pid=""
sluice_pid=""
cleanup() {
  # sluice itself: unshare's --kill-child does not reach it (chroot
  # --userspec changes credentials, which clears the parent-death signal).
  [ -z "$sluice_pid" ] || kill -KILL "$sluice_pid" 2>/dev/null || true
  [ -z "$unshare_pid" ] || kill -KILL "$unshare_pid" 2>/dev/null || true
  [ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

archive="$work/sluice.oci.tar"
ops/container/build-image.sh "$binary" "$archive" >/dev/null

# The image's parts, read from the archive as a registry would serve them.
mkdir "$work/oci"
tar -xf "$archive" -C "$work/oci"
blob() { echo "$work/oci/blobs/${1/://}"; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@"; }
manifest="$(blob "$(json "$work/oci/index.json" 'd["manifests"][0]["digest"]')")"
config="$(blob "$(json "$manifest" 'd["config"]["digest"]')")"
check() { # check EXPR EXPECTED: the image config's value
  local got
  got="$(json "$config" "$1")"
  [ "$got" = "$2" ] || fail "image config $1 is '$got', expected '$2'"
}
check 'd["config"]["User"]' "10001:10001"
check 'd["config"]["StopSignal"]' "SIGTERM"
check 'sorted(d["config"]["ExposedPorts"])' "['8080/tcp', '9090/tcp']"
check 'sorted(d["config"]["Volumes"])' "['/var/lib/sluice']"
check 'd["config"]["Entrypoint"]' "['/usr/bin/sluice']"
check 'd["config"]["Labels"]["org.opencontainers.image.version"]' "$version"
check 'd["config"]["Labels"]["org.opencontainers.image.licenses"]' "Apache-2.0"
check 'd["config"]["Labels"]["org.opencontainers.image.revision"].startswith("'"$(git rev-parse HEAD)"'")' "True"
check 'd["config"]["Labels"]["io.sluice.port.public"] + " " + d["config"]["Labels"]["io.sluice.port.admin"]' "8080 9090"

# The root filesystem, exported: every layer in order, owners kept.
root="$work/rootfs"
mkdir "$root"
for layer in $(json "$manifest" '" ".join(l["digest"] for l in d["layers"])'); do
  tar --numeric-owner --same-owner -xzf "$(blob "$layer")" -C "$root"
done
[ ! -e "$root/bin/sh" ] || fail "the image has a shell"
[ "$(stat -c %u "$root/var/lib/sluice")" = 10001 ] || fail "data_dir is not the image user's"

# Runs the image's entry point with ARGS in the root, as the image's user,
# with its environment, a fresh /proc and /dev, the host's network, and the
# root filesystem read-only but for the data_dir volume (as Kubernetes runs
# it: readOnlyRootFilesystem).
image_env=$(json "$config" '" ".join(d["config"]["Env"])')
entrypoint=$(json "$config" '" ".join(d["config"]["Entrypoint"])')
# Runs in place of the calling (sub)shell, under `${trace[@]}` if set.
trace=()
in_image() {
  # shellcheck disable=SC2086
  exec "${trace[@]}" env -i $image_env SLUICE_ADMIN_TOKEN=image-test-admin-token-0123 \
    unshare --mount --pid --fork --kill-child -- \
    sh -c 'mount --bind "$0" "$0" && mount --bind "$0/var/lib/sluice" "$0/var/lib/sluice" &&
      mount -o remount,bind,ro "$0" && mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" &&
      exec chroot --userspec=10001:10001 "$0" "$@"' \
    "$root" $entrypoint "$@"
}

(in_image check /etc/sluice/sluice.toml) | grep -q "ok (1 rooms, 3 products)" || fail "sluice check on the image's policy"
echo "ok: sluice check /etc/sluice/sluice.toml in the image"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
listen="127.0.0.1:$(free_port)"
admin="127.0.0.1:$(free_port)"
# The image's CMD, with loopback ports (a runtime would publish 8080/9090),
# under strace: every system call it makes is checked against the systemd
# unit's SystemCallFilter at the end.
mapfile -t cmd < <(json "$config" '"\n".join(d["config"]["Cmd"])')
trace=(strace -f -qq -o "$work/trace")
in_image "${cmd[@]}" --listen "$listen" --admin-listen "$admin" >"$work/sluice.log" 2>&1 &
pid=$!
trace=()
deadline=$((SECONDS + 10))
until unshare_pid="$(pgrep -P "$pid")" && sluice_pid="$(pgrep -P "$unshare_pid")"; do
  [ $SECONDS -lt $deadline ] || fail "no sluice process under strace"
  sleep 0.1
done
deadline=$((SECONDS + 30))
until curl -fsS "http://$admin/healthz" >/dev/null 2>&1; do
  kill -0 "$pid" 2>/dev/null || { cat "$work/sluice.log" >&2; fail "sluice run exited"; }
  [ $SECONDS -lt $deadline ] || { cat "$work/sluice.log" >&2; fail "/healthz did not answer within 30 s"; }
  sleep 0.2
done
echo "ok: /healthz"
curl -fsS "http://$admin/readyz" >/dev/null || fail "/readyz: $(curl -sS "http://$admin/readyz")"
echo "ok: /readyz (the order store in the image's data_dir takes a durable write)"
catalog="$(curl -fsS -D "$work/headers" "http://$listen/catalog/products.json")" || fail "catalog GET"
grep -q '"sneaker-42"' <<<"$catalog" || fail "catalog body: $catalog"
grep -qi '^cache-control: public' "$work/headers" || fail "catalog headers: $(cat "$work/headers")"
echo "ok: GET /catalog/products.json"
find "$root/var/lib/sluice" -mindepth 1 -maxdepth 1 ! -user 10001 | grep -q . && fail "data_dir holds files not the image user's"
find "$root/var/lib/sluice" -mindepth 1 | grep -q . || fail "nothing written to data_dir"
echo "ok: state written to /var/lib/sluice as 10001"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://$listen/queue/drop/join")" = 202 ] || fail "join"
metrics="$(curl -fsS -H "Authorization: Bearer image-test-admin-token-0123" "http://$admin/metrics")" || fail "/metrics"
grep -q '^sluice_' <<<"$metrics" || fail "/metrics: $metrics"
echo "ok: a join, /metrics with the admin token"
kill -HUP "$sluice_pid"
deadline=$((SECONDS + 10))
until grep -q '"trigger":"SIGHUP"' "$work/sluice.log"; do
  [ $SECONDS -lt $deadline ] || { cat "$work/sluice.log" >&2; fail "no reload within 10 s of SIGHUP"; }
  sleep 0.2
done
echo "ok: SIGHUP reloads"

# STOPSIGNAL: SIGTERM to the entry point (pid 1 in its namespace) drains
# and exits 0 within the grace period plus pingora's last second.
kill -TERM "$sluice_pid"
deadline=$((SECONDS + 20))
while kill -0 "$pid" 2>/dev/null; do
  [ $SECONDS -lt $deadline ] || fail "no exit within 20 s of SIGTERM"
  sleep 0.2
done
rc=0
wait "$pid" || rc=$?
pid=""
unshare_pid=""
sluice_pid=""
[ "$rc" = 0 ] || { cat "$work/sluice.log" >&2; fail "exit status $rc after SIGTERM"; }
grep -q "draining" "$work/sluice.log" || fail "no drain in the log"
echo "ok: SIGTERM drains and exits 0"

# ops/systemd/sluice.service's system-call filter, against every call the
# gateway made above (its own process and threads, from its execve on; not
# unshare's, mount's or chroot's).
filter="$(sed -n 's/^SystemCallFilter=//p' ops/systemd/sluice.service)"
python3 ops/systemd/syscall-filter-allows.py "$work/trace" "$filter" || fail "system-call filter"

echo "image: $(stat -c %s "$archive") bytes as an OCI archive (compressed layer), $(du -sb "$root" | cut -f1) bytes unpacked"
