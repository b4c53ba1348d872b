#!/usr/bin/env bash
# The appliance image (issue 7), end to end from this checkout: builds the release
# binary, the disk image of version V and two update bundles (V.1, and a V.2 whose
# quarry never becomes healthy), all signed with a key generated for this run only,
# then boots the image under qemu TCG with OVMF and runs image/test/acceptance.sh
# (REST, console password, SMB and NVMe/TCP through host forwards, persistence
# across reboots, A/B update, rollback, bad bundles refused).
#
# Needs root (debootstrap, chroot). The debootstrap base root filesystem is cached
# outside the checkout in ${QUARRY_CACHE:-/var/cache/quarry-build}/image, keyed by
# a hash of image/lib/base.sh, image/initramfs and the mirror, so repeat runs do not
# download or install packages again. Figures go to $OUT/results.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf '[image %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "the image suite needs root (debootstrap, chroot); run dev/test as root"

CACHE=${QUARRY_CACHE:-/var/cache/quarry-build}
export QUARRY_IMAGE_CACHE=$CACHE/image
TARGET=$(cargo metadata --format-version 1 --no-deps | jq -er .target_directory) \
    || die "cannot find cargo's target directory"
OUT=$TARGET/image-test
mkdir -p "$OUT" "$QUARRY_IMAGE_CACHE"
# The image (a 1.8 GiB raw disk, its .zst and root) and the bundles take 2.7 GiB; only
# the logs and figures outlive the suite, so later suites keep their disk. Set
# QUARRY_KEEP_IMAGE=1 to keep them for a look.
remove_images() { [ -n "${QUARRY_KEEP_IMAGE:-}" ] || rm -rf "$OUT/v1" "$OUT/v2" "$OUT/v3"; }
remove_images
trap remove_images EXIT
RESULTS=$OUT/results.txt
: >"$RESULTS"
t_suite=$SECONDS

# One release build of quarry for the image and both good bundles; the NVMe/TCP
# check is a small host-side binary of quarry-tests.
log "cargo build --release -p quarry --features rdma"
cargo build --release -p quarry --bin quarry --features rdma
# dev/test's debug build exactly (see tests/suites/webui.sh), so nothing is compiled twice.
# shellcheck disable=SC2086
cargo build --workspace --all-targets ${QUARRY_CARGO_FEATURES:-}
QUARRY_BIN=$TARGET/release/quarry
NVME_CHECK=$TARGET/debug/quarry-nvme-check
V=$("$QUARRY_BIN" --version | awk '{ print $NF }')
[ -n "$V" ] || die "quarry --version printed no version"

# Update signing key for this run only: never committed, never reused.
KEY=$OUT/test-signing-key.pk8
rm -f "$KEY"
(umask 077 && openssl genpkey -algorithm ed25519 -outform DER -out "$KEY") || die "generating the test signing key"
export QUARRY_IMAGE_SIGNING_KEY=$KEY
export QUARRY_BIN

build() { # build NAME [ENV=VALUE...]: image/build.sh with its log in $OUT/NAME.log
    local name=$1 t0=$SECONDS
    shift
    log "building $name"
    if ! env "$@" image/build.sh >"$OUT/$name.log" 2>&1; then
        tail -n 40 "$OUT/$name.log" >&2
        die "building $name failed (log: $OUT/$name.log)"
    fi
    log "built $name in $((SECONDS - t0))s"
    echo "build_${name}_s=$((SECONDS - t0))" >>"$RESULTS"
}

build image QUARRY_IMAGE_OUT="$OUT/v1"
build bundle-v2 QUARRY_IMAGE_OUT="$OUT/v2" QUARRY_IMAGE_VERSION="$V.1" QUARRY_IMAGE_BUNDLE_ONLY=1

# V.2: a quarry that reports a version but exits at once, so its health check fails
# on every boot try (test fixture for the rollback).
BROKEN=$OUT/quarry-broken
cat >"$BROKEN" <<'EOF'
#!/bin/sh
case "$1" in
    --version) echo "quarry 0.0.0-broken" ;;
    *) echo "quarry-broken: this build never starts (update rollback test fixture)" >&2; exit 1 ;;
esac
EOF
chmod 0755 "$BROKEN"
build bundle-v3-broken QUARRY_BIN="$BROKEN" QUARRY_IMAGE_OUT="$OUT/v3" QUARRY_IMAGE_VERSION="$V.2" QUARRY_IMAGE_BUNDLE_ONLY=1

IMAGE=$OUT/v1/quarry.raw
jq -r '"image: raw \(.raw_bytes) bytes, root erofs \(.root_erofs_bytes) bytes, root tree \(.rootfs_mib) MiB unpacked, zst \(.raw_zst_bytes) bytes"' \
    "$OUT/v1/image.json" >&2
jq -r '"root_unpacked_mib=\(.rootfs_mib)\nroot_erofs_bytes=\(.root_erofs_bytes)\nraw_bytes=\(.raw_bytes)\nraw_zst_bytes=\(.raw_zst_bytes)"' \
    "$OUT/v1/image.json" >>"$RESULTS"
# Acceptance: under 400 MB (decimal) of uncompressed root.
rootfs_mib=$(jq -er .rootfs_mib "$OUT/v1/image.json")
[ $((rootfs_mib * 1048576)) -lt 400000000 ] || die "uncompressed root is ${rootfs_mib} MiB (limit 400 MB)"

RESULTS=$RESULTS image/test/acceptance.sh "$IMAGE" "$OUT/v2/quarry-$V.1.bundle" "$OUT/v3/quarry-$V.2.bundle" "$NVME_CHECK"

echo "suite_s=$((SECONDS - t_suite))" >>"$RESULTS"
log "figures ($RESULTS):"
cat "$RESULTS" >&2
# Acceptance: boot to a healthy API in under 2 minutes under TCG.
for k in boot1_to_healthy_s boot2_to_healthy_s; do
    t=$(sed -n "s/^$k=//p" "$RESULTS")
    awk -v t="$t" 'BEGIN { exit !(t + 0 > 0 && t + 0 < 120) }' || die "$k=$t: not under 120 s"
done
