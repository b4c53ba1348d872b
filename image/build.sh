#!/bin/bash
# Builds the Quarry appliance disk image: one command, no loop devices, no
# mounts on the host, as root (see image/README.md).
#
#   image/build.sh                 # build (or reuse) target/image/quarry.raw
#
# Environment:
#   QUARRY_BIN=PATH            use this quarry binary instead of building one
#   QUARRY_IMAGE_VERSION=V     image version (default: quarry --version)
#   QUARRY_IMAGE_OUT=DIR       output dir (default: $CARGO_TARGET_DIR/image or target/image)
#   QUARRY_IMAGE_CACHE=DIR     debootstrap base cache (default: ~/.cache/quarry/image)
#   QUARRY_IMAGE_SIGNING_KEY=F Ed25519 PKCS#8 key signing update bundles
#                              (default: a development key kept in the cache)
#
# Output in $QUARRY_IMAGE_OUT: quarry.raw (GPT disk), quarry.raw.zst,
# root.erofs (the root slot image), quarry-VERSION.bundle (signed update
# bundle of that root), timings.txt, image.json.
set -euo pipefail

IMAGE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$IMAGE_DIR/.." && pwd)
# shellcheck source=lib/common.sh
. "$IMAGE_DIR/lib/common.sh"

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap and chroot need it)"

# Partition sizes (MiB). Root slots hold the erofs image (about 200 MiB);
# the data partition is grown to the disk's end on first boot of real disks.
ESP_MIB=256
SLOT_MIB=640
DATA_MIB=256
# Where partitions start (MiB): 1 MiB alignment, GPT in front.
FIRST_MIB=1
# Boot tries systemd-boot gives a new entry before it falls back.
BOOT_TRIES=3
# Partition type GUIDs (Discoverable Partitions Specification / UEFI).
GUID_ESP=C12A7328-F81F-11D2-BA4B-00A0C93EC93B
GUID_ROOT_X86_64=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709
GUID_LINUX_DATA=0FC63DAF-8483-4772-8E79-3D69D8477DE4
# Kernel command line shared by both slots.
KERNEL_ARGS="rootfstype=erofs ro console=tty0 console=ttyS0,115200 loglevel=4 panic=10"

TARGET=${CARGO_TARGET_DIR:-$REPO/target}
OUT=${QUARRY_IMAGE_OUT:-$TARGET/image}
CACHE=${QUARRY_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/quarry/image}
mkdir -p "$OUT" "$CACHE"
TIMINGS_FILE=$OUT/timings.txt.new
: >"$TIMINGS_FILE"
T_START=$(date +%s)

step "host packages" ensure_host_packages

# --- the quarry binary -------------------------------------------------------
build_quarry() {
    if [ -n "${QUARRY_BIN:-}" ]; then
        [ -x "$QUARRY_BIN" ] || die "QUARRY_BIN=$QUARRY_BIN is not executable"
        return
    fi
    command -v cargo >/dev/null || die "cargo not found (or set QUARRY_BIN)"
    # With the NVMe/RDMA transport (libibverbs + librdmacm, in the rootfs's packages).
    (cd "$REPO" && cargo build --release -p quarry --bin quarry --features rdma)
    QUARRY_BIN=$TARGET/release/quarry
}
step "cargo build quarry" build_quarry
QUARRY_VERSION=$("$QUARRY_BIN" --version | awk '{ print $NF }')
VERSION=${QUARRY_IMAGE_VERSION:-$QUARRY_VERSION}
log "quarry $QUARRY_VERSION, image version $VERSION"

# --- signing key for update bundles -------------------------------------------
SIGNING_KEY=${QUARRY_IMAGE_SIGNING_KEY:-$CACHE/dev-signing-key.pk8}
if [ ! -s "$SIGNING_KEY" ]; then
    log "no signing key: creating a development key at $SIGNING_KEY"
    openssl genpkey -algorithm ed25519 -outform DER -out "$SIGNING_KEY"
    chmod 0600 "$SIGNING_KEY"
fi
# The raw 32-byte public key (the last 32 bytes of the DER SubjectPublicKeyInfo).
PUBKEY_HEX=$(openssl pkey -inform DER -in "$SIGNING_KEY" -pubout -outform DER | tail -c 32 | od -An -tx1 | tr -d ' \n')

# --- reuse an unchanged build --------------------------------------------------
MIRROR=$(host_debian_mirror)
BASE_HASH=$(inputs_hash "$IMAGE_DIR/lib/base.sh" "$IMAGE_DIR/initramfs" "mirror=$MIRROR" "suite=bookworm")
IMAGE_HASH=$(inputs_hash "$BASE_HASH" "$IMAGE_DIR/build.sh" "$IMAGE_DIR/lib/common.sh" \
    "$IMAGE_DIR/rootfs" "$QUARRY_BIN" "version=$VERSION" "pubkey=$PUBKEY_HEX")
if [ -s "$OUT/quarry.raw" ] && [ -s "$OUT/quarry.raw.zst" ] && [ "$(cat "$OUT/inputs.sha256" 2>/dev/null)" = "$IMAGE_HASH" ]; then
    log "inputs unchanged ($IMAGE_HASH): reusing $OUT/quarry.raw"
    exit 0
fi

# --- base root filesystem (cached by input hash) -------------------------------
BASE=$CACHE/base-$BASE_HASH
build_base() {
    if [ -d "$BASE" ]; then
        log "reusing cached base $BASE"
        return
    fi
    local tmp=$CACHE/base-$BASE_HASH.tmp
    rm -rf "$tmp" "$tmp".*.log
    log "debootstrap from $MIRROR (about 2-3 minutes)"
    unshare -m --propagation private bash "$IMAGE_DIR/lib/base.sh" "$tmp" "$MIRROR" "$IMAGE_DIR"
    mv "$tmp" "$BASE"
    # Keep only this base: older ones are dead weight.
    find "$CACHE" -maxdepth 1 -name 'base-*' -not -name "base-$BASE_HASH" -exec rm -rf {} +
}
step "base rootfs" build_base

WORK=$OUT/work
rm -rf "$WORK"
mkdir -p "$WORK"
ROOTFS=$WORK/rootfs

# --- the appliance root filesystem ---------------------------------------------
assemble_rootfs() {
    cp -a "$BASE" "$ROOTFS"
    cp -a "$IMAGE_DIR/rootfs/." "$ROOTFS/"
    # Debug info stays on the build host (the release profile keeps it): the
    # image gets a stripped copy.
    if ! strip --strip-debug -o "$ROOTFS/usr/bin/quarry" "$QUARRY_BIN" 2>/dev/null; then
        install -m 0755 "$QUARRY_BIN" "$ROOTFS/usr/bin/quarry"
    fi
    chmod 0755 "$ROOTFS/usr/bin/quarry"
    mkdir -p "$ROOTFS/usr/share/doc/quarry" "$ROOTFS/usr/share/quarry" "$ROOTFS/var/lib/quarry"
    install -m 0644 "$IMAGE_DIR/README.md" "$ROOTFS/usr/share/doc/quarry/README.md"
    printf '%s\n' "$PUBKEY_HEX" >"$ROOTFS/usr/share/quarry/update-signing-key.ed25519.hex"
    ln -sfn ../run/quarry/issue "$ROOTFS/etc/issue"
    # systemd-gpt-auto-generator mounts the ESP the firmware booted from
    # (LoaderDevicePartUUID) here on demand: systemd-bless-boot and the update
    # service find it without a per-build fstab line.
    mkdir -p "$ROOTFS/efi"
    # Identify the image (read by the banner and GET /api/v1/system).
    sed -i '/^IMAGE_ID=\|^IMAGE_VERSION=/d' "$ROOTFS/usr/lib/os-release"
    printf 'IMAGE_ID=quarry\nIMAGE_VERSION=%s\n' "$VERSION" >>"$ROOTFS/usr/lib/os-release"
    # Every library the binary links must be in the image.
    local missing
    missing=$(chroot "$ROOTFS" /usr/bin/ldd /usr/bin/quarry 2>&1 | grep 'not found' || true)
    [ -z "$missing" ] || die "quarry needs libraries the image lacks: $missing"
    chroot "$ROOTFS" /usr/bin/quarry --version >/dev/null || die "quarry does not run in the image"
    chroot "$ROOTFS" systemctl enable systemd-networkd.service systemd-resolved.service \
        systemd-timesyncd.service quarry.service quarry-firstboot.service \
        quarry-banner.service quarry-health.service >/dev/null 2>&1
    # Units Debian's packages enable that an appliance does not want: package
    # maintenance timers (no apt in use), e2scrub (no LVM), NVMe-oF autoconnect
    # (quarry is a target, not an initiator), uuidd. They only cost boot time.
    chroot "$ROOTFS" systemctl mask systemd-firstboot.service apt-daily.timer \
        apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service \
        nvmf-autoconnect.service nvmefc-boot-connections.service uuidd.socket >/dev/null 2>&1
    chroot "$ROOTFS" systemctl set-default multi-user.target >/dev/null 2>&1
    du -sm "$ROOTFS" | awk '{ print $1 }' >"$WORK/rootfs-mib"
}
step "assemble rootfs" assemble_rootfs

# --- partitions as files --------------------------------------------------------
KVER=$(basename "$(ls -d "$ROOTFS"/lib/modules/* | head -n1)")
make_root() {
    mkfs.erofs -zlz4hc -T "$(date +%s)" "$WORK/root.erofs" "$ROOTFS" >/dev/null
    local size
    size=$(stat -c %s "$WORK/root.erofs")
    [ "$size" -le $((SLOT_MIB * 1024 * 1024)) ] || die "root image ($size bytes) exceeds the ${SLOT_MIB} MiB slot"
}
step "mkfs.erofs root" make_root

# --- signed update bundle (format: appliance/src/system/bundle.rs) -------------------
make_bundle() {
    local root=$WORK/root.erofs size sha manifest
    size=$(stat -c %s "$root")
    sha=$(sha256sum "$root" | cut -d' ' -f1)
    manifest=$(printf '{"format":1,"version":"%s","kernel":"%s","root_size":%s,"root_sha256":"%s"}' \
        "$VERSION" "$KVER" "$size" "$sha")
    printf '%s' "$manifest" >"$WORK/manifest.json"
    { printf 'quarry-bundle-v1\0'; cat "$WORK/manifest.json"; } >"$WORK/signed.bin"
    openssl pkeyutl -sign -inkey "$SIGNING_KEY" -keyform DER -rawin -in "$WORK/signed.bin" -out "$WORK/sig.bin"
    [ "$(stat -c %s "$WORK/sig.bin")" -eq 64 ] || die "Ed25519 signature is not 64 bytes"
    {
        printf 'QRYBNDL1'
        perl -e 'print pack("V", $ARGV[0])' "$(stat -c %s "$WORK/manifest.json")"
        cat "$WORK/manifest.json" "$WORK/sig.bin" "$root"
    } >"$1"
}
if [ "${QUARRY_IMAGE_BUNDLE_ONLY:-0}" = 1 ]; then
    # Only the signed update bundle (tests that need a second version).
    step "update bundle" make_bundle "$OUT/quarry-$VERSION.bundle"
    rm -rf "$WORK"
    mv "$TIMINGS_FILE" "$OUT/timings.txt"
    log "done: $OUT/quarry-$VERSION.bundle"
    exit 0
fi

new_uuid() { cat /proc/sys/kernel/random/uuid; }
DISK_UUID=$(new_uuid)
UUID_ESP=$(new_uuid)
UUID_A=$(new_uuid)
UUID_B=$(new_uuid)
UUID_DATA=$(new_uuid)

make_esp() {
    local esp=$WORK/esp.img
    mkfs.vfat -F 32 -n QUARRY-ESP -C "$esp" $((ESP_MIB * 1024)) >/dev/null
    export MTOOLS_SKIP_CHECK=1
    mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/EFI/systemd ::/loader ::/loader/entries ::/quarry ::/quarry/a ::/quarry/b
    local sdboot=$ROOTFS/usr/lib/systemd/boot/efi/systemd-bootx64.efi
    mcopy -i "$esp" "$sdboot" ::/EFI/BOOT/BOOTX64.EFI
    mcopy -i "$esp" "$sdboot" ::/EFI/systemd/systemd-bootx64.efi
    mcopy -i "$esp" "$ROOTFS/boot/vmlinuz-$KVER" ::/quarry/a/vmlinuz
    mcopy -i "$esp" "$ROOTFS/boot/initrd.img-$KVER" ::/quarry/a/initrd.img
    cat >"$WORK/loader.conf" <<EOF
# The newest healthy Quarry entry boots; entries whose boot tries ran out sort last.
default quarry-*
timeout 0
editor no
console-mode keep
EOF
    cat >"$WORK/entry.conf" <<EOF
title Quarry $VERSION (slot A)
version $VERSION
sort-key quarry
linux /quarry/a/vmlinuz
initrd /quarry/a/initrd.img
options root=PARTUUID=$UUID_A quarry.slot=a $KERNEL_ARGS
EOF
    mcopy -i "$esp" "$WORK/loader.conf" ::/loader/loader.conf
    mcopy -i "$esp" "$WORK/entry.conf" "::/loader/entries/quarry-a+$BOOT_TRIES.conf"
}
step "ESP (vfat + mtools)" make_esp

make_data() {
    mkdir -p "$WORK/data-skel/log"
    truncate -s "${DATA_MIB}M" "$WORK/data.img"
    mkfs.ext4 -q -L quarry-data -U "$UUID_DATA" -d "$WORK/data-skel" "$WORK/data.img"
}
step "data partition (ext4)" make_data

# --- the disk ---------------------------------------------------------------------
assemble_disk() {
    local disk=$WORK/quarry.raw mib=$((1024 * 1024 / 512))
    local esp_start=$((FIRST_MIB * mib))
    local a_start=$((esp_start + ESP_MIB * mib))
    local b_start=$((a_start + SLOT_MIB * mib))
    local data_start=$((b_start + SLOT_MIB * mib))
    local total_mib=$((FIRST_MIB + ESP_MIB + 2 * SLOT_MIB + DATA_MIB + 1))
    rm -f "$disk"
    truncate -s "${total_mib}M" "$disk"
    sfdisk -q "$disk" <<EOF
label: gpt
label-id: $DISK_UUID
unit: sectors
first-lba: $esp_start
start=$esp_start, size=$((ESP_MIB * mib)), type=$GUID_ESP, uuid=$UUID_ESP, name="esp"
start=$a_start, size=$((SLOT_MIB * mib)), type=$GUID_ROOT_X86_64, uuid=$UUID_A, name="quarry-root-a"
start=$b_start, size=$((SLOT_MIB * mib)), type=$GUID_ROOT_X86_64, uuid=$UUID_B, name="quarry-root-b"
start=$data_start, size=$((DATA_MIB * mib)), type=$GUID_LINUX_DATA, uuid=$UUID_DATA, name="quarry-data"
EOF
    dd if="$WORK/esp.img" of="$disk" bs=1M seek=$((esp_start / mib)) conv=notrunc,sparse status=none
    dd if="$WORK/root.erofs" of="$disk" bs=1M seek=$((a_start / mib)) conv=notrunc,sparse status=none
    dd if="$WORK/data.img" of="$disk" bs=1M seek=$((data_start / mib)) conv=notrunc,sparse status=none
}
step "GPT disk (sfdisk + dd)" assemble_disk

compress() {
    zstd -q -T0 -f --sparse "$WORK/quarry.raw" -o "$WORK/quarry.raw.zst"
}
step "zstd" compress

step "update bundle" make_bundle "$WORK/quarry.bundle"

# --- publish ------------------------------------------------------------------------
publish() {
    rm -f "$OUT"/quarry-*.bundle
    mv -f "$WORK/quarry.raw" "$WORK/quarry.raw.zst" "$WORK/root.erofs" "$OUT/"
    mv -f "$WORK/quarry.bundle" "$OUT/quarry-$VERSION.bundle"
    cp "$ROOTFS/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
    cp "$ROOTFS/boot/initrd.img-$KVER" "$OUT/initrd.img"
    cat >"$OUT/image.json" <<EOF
{
  "version": "$VERSION",
  "quarry_version": "$QUARRY_VERSION",
  "kernel": "$KVER",
  "rootfs_mib": $(cat "$WORK/rootfs-mib"),
  "root_erofs_bytes": $(stat -c %s "$OUT/root.erofs"),
  "raw_bytes": $(stat -c %s "$OUT/quarry.raw"),
  "raw_zst_bytes": $(stat -c %s "$OUT/quarry.raw.zst"),
  "bundle": "quarry-$VERSION.bundle",
  "partuuid": { "esp": "$UUID_ESP", "a": "$UUID_A", "b": "$UUID_B", "data": "$UUID_DATA" },
  "update_signing_key_ed25519": "$PUBKEY_HEX"
}
EOF
    printf '%s\n' "$IMAGE_HASH" >"$OUT/inputs.sha256"
    rm -rf "$WORK"
}
step "publish" publish
printf '%-28s %8ss\n' "total" "$(($(date +%s) - T_START))" >>"$TIMINGS_FILE"
mv "$TIMINGS_FILE" "$OUT/timings.txt"
log "done: $OUT/quarry.raw ($(du -h --apparent-size "$OUT/quarry.raw" | cut -f1)), root $(du -h "$OUT/root.erofs" | cut -f1), compressed $(du -h "$OUT/quarry.raw.zst" | cut -f1)"
cat "$OUT/timings.txt" >&2
