#!/bin/bash
# Builds the Debian bookworm base root filesystem of the appliance into DIR.
# Runs inside `unshare -m` (see build.sh) so the /proc, /sys and /dev mounts the
# package scripts need are private and vanish with the namespace: no leftovers
# on the host even when the build dies half way.
#
# usage: base.sh DIR MIRROR IMAGE_SRC_DIR
set -euo pipefail

ROOT=$1
MIRROR=$2
SRC=$3
SUITE=bookworm

# What the appliance runs: init and device manager, kernel and boot loader
# tools, networking, time sync, and the storage tools the pool manager calls.
# No compilers, no docs, no locales, no recommends.
PACKAGES=(
    systemd systemd-sysv udev kmod dbus
    systemd-timesyncd systemd-resolved
    linux-image-amd64 initramfs-tools zstd
    systemd-boot systemd-boot-efi
    e2fsprogs btrfs-progs nvme-cli iproute2 openssl
    libibverbs1 librdmacm1 ibverbs-providers
    firmware-linux-free
)

mount_chroot_fs() {
    mount -t proc proc "$ROOT/proc"
    mount -t sysfs sysfs "$ROOT/sys"
    mount --rbind /dev "$ROOT/dev"
    mount -t tmpfs tmpfs "$ROOT/run"
    mount -t tmpfs tmpfs "$ROOT/tmp"
}

in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }

debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 \
    || { tail -n 30 "$ROOT.debootstrap.log" >&2; exit 1; }

# Keep docs, man pages and locales out of everything installed from now on
# (copyright files stay: the image redistributes these packages).
mkdir -p "$ROOT/etc/dpkg/dpkg.cfg.d" "$ROOT/etc/apt/apt.conf.d"
cat >"$ROOT/etc/dpkg/dpkg.cfg.d/01-quarry-nodoc" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
path-exclude /usr/share/bash-completion/*
path-exclude /usr/share/zsh/*
CFG
cat >"$ROOT/etc/apt/apt.conf.d/01-quarry" <<'CFG'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
CFG
# Build-time sources only; removed again below so the image carries none.
SECURITY=${MIRROR%/debian}/debian-security
cat >"$ROOT/etc/apt/sources.list" <<CFG
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
CFG
# Never start services inside the build chroot.
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 755 "$ROOT/usr/sbin/policy-rc.d"

# Initramfs configuration first, so the kernel's postinst builds the right one.
mkdir -p "$ROOT/etc/initramfs-tools"
cp -a "$SRC/initramfs/." "$ROOT/etc/initramfs-tools/"

mount_chroot_fs
in_root apt-get update -q >/dev/null
# INITRD=No and update_initramfs=no (initramfs/update-initramfs.conf): build the
# initramfs once, after the module tree is final, instead of three times.
in_root INITRD=No apt-get install -y -q -o Dpkg::Options::=--force-confold "${PACKAGES[@]}" >"$ROOT.apt.log" 2>&1 || { tail -n 40 "$ROOT.apt.log" >&2; exit 1; }

# Drop kernel modules a storage appliance never loads (sound, video capture,
# GPUs, wireless, bluetooth, staging...): about half of the module tree.
for kdir in "$ROOT"/lib/modules/*/; do
    k=$kdir/kernel
    rm -rf "$k/sound" "$k/drivers/media" "$k/drivers/gpu" "$k/drivers/net/wireless" \
        "$k/net/wireless" "$k/net/mac80211" "$k/net/bluetooth" "$k/drivers/bluetooth" \
        "$k/drivers/staging" "$k/drivers/iio" "$k/drivers/isdn" "$k/drivers/net/can" \
        "$k/net/can" "$k/drivers/nfc" "$k/net/nfc" "$k/drivers/mtd" "$k/drivers/usb/gadget" \
        "$k/drivers/input/touchscreen" "$k/drivers/input/joystick" "$k/drivers/input/tablet" \
        "$k/drivers/net/ieee802154" "$k/net/ieee802154" "$k/drivers/net/hamradio" \
        "$k/net/6lowpan" "$k/drivers/net/wwan" "$k/drivers/comedi" "$k/drivers/platform/chrome" \
        "$k/drivers/net/ethernet/netronome" "$k/drivers/mmc" "$k/drivers/memstick" \
        "$k/drivers/w1" "$k/drivers/ptp/ptp_ocp.ko"
    # Compressed modules (kmod decompresses zstd in user space): about a third
    # of the size, so the root stays well under 400 MB even unpacked.
    find "$k" -name '*.ko' -print0 | xargs -0 -r -n 64 -P "$(nproc)" zstd -q --rm -9
    in_root depmod -a "$(basename "$kdir")"
    # btrfs-progs' initramfs hook loads btrfs (and raid6_pq, whose boot-time
    # benchmark costs 10+ s under emulation): the root is erofs, the pool is
    # mounted later by quarry.
    rm -f "$ROOT/usr/share/initramfs-tools/hooks/btrfs" "$ROOT/usr/share/initramfs-tools/scripts/local-premount/btrfs"
    in_root update-initramfs -c -k "$(basename "$kdir")" >"$ROOT.initramfs.log" 2>&1 \
        || { tail -n 20 "$ROOT.initramfs.log" >&2; exit 1; }
done

# Appliance defaults: locked root, no build-time apt sources or caches, an
# empty machine id (the initramfs binds the one kept on the data partition).
in_root passwd -l root >/dev/null
in_root apt-get clean
rm -f "$ROOT/usr/sbin/policy-rc.d" "$ROOT/etc/apt/sources.list"
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/* "$ROOT"/var/cache/debconf/*-old \
    "$ROOT"/var/log/* "$ROOT"/tmp/* "$ROOT"/var/tmp/*
find "$ROOT/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find "$ROOT/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$ROOT"/usr/share/man "$ROOT"/usr/share/info "$ROOT"/usr/share/lintian
find "$ROOT/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} + 2>/dev/null || true
: >"$ROOT/etc/machine-id"
rm -f "$ROOT/var/lib/dbus/machine-id"
