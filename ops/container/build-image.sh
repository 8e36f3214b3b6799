#!/usr/bin/env bash
# Builds Sluice's OCI image from a release binary, without a registry or a
# base image: the root filesystem is the binary, the shared libraries it is
# linked against, CA certificates and tzdata, all taken from this Debian
# machine's packages (named in the image's labels), plus a passwd entry for
# the non-root user, the demo policy and the demo catalog. No shell.
#
#   ops/container/build-image.sh [BINARY [OUT.oci.tar]]
#
# BINARY defaults to target/release/sluice (build it first:
# `cargo build --release -p sluice-gateway`); OUT defaults to
# target/image/sluice-VERSION.oci.tar. Load it with `podman load -i OUT`
# or push it with skopeo/buildah (docs/operations.md "In a container").
# Needs buildah (scripts/deps.sh --image) and root (the files' owners).
set -euo pipefail
cd "$(dirname "$0")/../.."

target="${CARGO_TARGET_DIR:-target}"
binary="${1:-$target/release/sluice}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
out="${2:-$target/image/sluice-$version.oci.tar}"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || revision="$revision-dirty"
# Reproducible timestamps: the commit's time.
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
uid=10001

[ -x "$binary" ] || { echo "no binary at $binary: cargo build --release -p sluice-gateway" >&2; exit 1; }
command -v buildah >/dev/null || { echo "buildah missing: scripts/deps.sh --image" >&2; exit 1; }

work="$(mktemp -d)"
trap 'buildah_ rm "${ctr:-none}" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
# A private store of buildah's own, on the vfs driver: nothing in the
# machine's container storage is touched and no overlay mount is needed.
buildah_() { buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"; }
root="$work/rootfs"
mkdir -p "$root"/{usr/bin,usr/lib,usr/lib64,etc/ssl/certs,etc/sluice,usr/share/sluice,var/lib/sluice,proc,sys,dev,tmp}
# Debian's merged /usr.
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
ln -s usr/bin "$root/bin"

packages=()
# Copies a host path into the root at its canonical directory, following a
# chain of symbolic links and copying each link as a link.
copy_path() {
  local path="$1" dir name
  dir="$(realpath "$(dirname "$path")")"
  name="$(basename "$path")"
  mkdir -p "$root$dir"
  if [ -L "$dir/$name" ]; then
    cp -P "$dir/$name" "$root$dir/$name"
    local link
    link="$(readlink "$dir/$name")"
    case "$link" in
      /*) copy_path "$link" ;;
      *) copy_path "$dir/$link" ;;
    esac
  else
    cp "$dir/$name" "$root$dir/$name"
    packages+=("$( (dpkg -S "$dir/$name" 2>/dev/null || dpkg -S "${dir#/usr}/$name" 2>/dev/null || true) | head -1 | cut -d: -f1)")
  fi
}

install -m 0755 "$binary" "$root/usr/bin/sluice"
strip --strip-debug "$root/usr/bin/sluice"
# The loader and every library the binary is linked against.
for lib in $(ldd "$binary" | grep -o '/[^ ]*' | sort -u); do
  copy_path "$lib"
done
# CA certificates (ca-certificates) for TLS to Redis, PostgreSQL, the
# payment provider, the origin; tzdata for local times in logs of libraries.
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
packages+=(ca-certificates)
cp -a /usr/share/zoneinfo "$root/usr/share/"
packages+=(tzdata)

cat > "$root/etc/passwd" <<EOF
root:x:0:0:root:/root:/usr/sbin/nologin
sluice:x:$uid:$uid:sluice:/var/lib/sluice:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat > "$root/etc/group" <<EOF
root:x:0:
sluice:x:$uid:
nogroup:x:65534:
EOF
printf 'hosts: files dns\n' > "$root/etc/nsswitch.conf"
install -m 0644 ops/container/sluice.toml "$root/etc/sluice/sluice.toml"
cp -r static "$root/usr/share/sluice/static"
chmod 1777 "$root/tmp"
chown "$uid:$uid" "$root/var/lib/sluice"
chmod 0700 "$root/var/lib/sluice"
find "$root" -exec touch -h -d "@$epoch" {} +

debs="$(for p in "${packages[@]}"; do [ -n "$p" ] && echo "$p=$(dpkg-query -W -f '${Version}' "$p")"; done | sort -u | tr '\n' ' ')"
tar --numeric-owner --sort=name -C "$root" -cf "$work/rootfs.tar" .

ctr="$(buildah_ from scratch)"
buildah_ add "$ctr" "$work/rootfs.tar" / >/dev/null
buildah_ config \
  --user "$uid:$uid" \
  --workingdir /var/lib/sluice \
  --entrypoint '["/usr/bin/sluice"]' \
  --cmd '["run", "--config", "/etc/sluice/sluice.toml", "--log-format", "json"]' \
  --env SLUICE_LOG=info \
  --stop-signal SIGTERM \
  --port 8080/tcp --port 9090/tcp \
  --volume /var/lib/sluice \
  --label org.opencontainers.image.title=sluice \
  --label "org.opencontainers.image.description=Sluice, an edge waiting-room gateway for flash sales" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label "org.opencontainers.image.created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)" \
  --label io.sluice.port.public=8080 \
  --label io.sluice.port.admin=9090 \
  --label io.sluice.policy=/etc/sluice/sluice.toml \
  --label io.sluice.data-dir=/var/lib/sluice \
  --label "io.sluice.debian-packages=${debs% }" \
  "$ctr"
buildah_ commit --quiet --format oci --timestamp "$epoch" --omit-history "$ctr" "localhost/sluice:$version" >/dev/null
mkdir -p "$(dirname "$out")"
rm -f "$out"
buildah_ push --quiet "localhost/sluice:$version" "oci-archive:$out:sluice:$version"
echo "$out"
