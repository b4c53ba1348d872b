#!/usr/bin/env bash
# Prepares the guest lab's kernel and base initramfs from Debian packages into
# .cache/guest/<kver>-<hash>/ and prints that directory on stdout.
#
# The hash covers every input (this script, lib.sh, init, modules.list, the
# kernel package version and the versions of the host packages whose files are
# copied in), so a second call with nothing changed returns at once. Check
# scripts are not part of the base image: run.sh appends them per run.
#
# Output directory contents:
#   vmlinuz       the Debian kernel
#   initrd.img    (uncompressed newc cpio) busybox + modules (+ modules.dep) + nvme-cli, fio, mke2fs,
#                 e2fsck, rdma with their ldd closure, the lab's /init
#   kver          kernel release string (e.g. 6.1.0-56-amd64)
#   manifest      what went in, for humans
#   build-secs    how long the build took
#
# Usage: tests/guest/build.sh [--force]
set -euo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Host packages whose files are copied into the initramfs: their versions are
# part of the cache key.
BUILD_KEY_PACKAGES=(busybox-static nvme-cli libnvme1 fio e2fsprogs iproute2 libc6 kmod)
# Dynamic executables copied in with their ldd closure (absolute host paths).
BUILD_TOOLS=(/usr/sbin/nvme /usr/bin/fio /sbin/mke2fs /sbin/e2fsck /usr/bin/rdma)
# The base image is left uncompressed: measured under TCG on 2 loaded cores,
# unpacking 100 MB took ~5.3 s raw against ~8 s as zstd (33 MB), and /init
# started ~3 s earlier. The cost is 100 MB of disk in the cache.
BUILD_COMPRESS=(cat)

force=0
[ "${1:-}" = "--force" ] && force=1

# Fast path: apt-cache is slow (0.5-3 s) on a busy machine, so remember which
# image the current apt lists, dpkg status and lab files led to. Any apt-get
# update or package install changes the fingerprint and takes the full path.
fast="$({
    stat -c '%n %Y %s' /var/lib/apt/lists/*Packages* /var/lib/dpkg/status 2>/dev/null || true
    echo "${GUEST_KERNEL_PKG:-}"
    cat "$GUEST_DIR/build.sh" "$GUEST_DIR/lib.sh" "$GUEST_DIR/init" "$GUEST_DIR/modules.list"
} | sha256sum | cut -c1-16)"
fastfile="$GUEST_CACHE_ROOT/.fast-$fast"
if [ "$force" -eq 0 ] && [ -f "$fastfile" ]; then
    cached="$(cat "$fastfile")"
    if [ -f "$cached/ready" ]; then
        echo "$cached"
        exit 0
    fi
fi

guest_ensure_host_prereqs

kpkg="$(guest_kernel_pkg)"
kver="${kpkg#linux-image-}"
kpkg_ver="$(apt-cache policy "$kpkg" | awk '/Candidate:/{print $2; exit}')"
[ -n "$kpkg_ver" ] && [ "$kpkg_ver" != "(none)" ] || guest_die "no candidate version for $kpkg"

key="$({
    echo "kernel=$kpkg=$kpkg_ver"
    dpkg-query -W -f '${Package}=${Version}\n' "${BUILD_KEY_PACKAGES[@]}" 2>/dev/null || true
    cat "$GUEST_DIR/build.sh" "$GUEST_DIR/lib.sh" "$GUEST_DIR/init" "$GUEST_DIR/modules.list"
} | sha256sum | cut -c1-16)"
out="$GUEST_CACHE_ROOT/$kver-$key"

if [ "$force" -eq 0 ] && [ -f "$out/ready" ]; then
    echo "$out" >"$fastfile"
    echo "$out"
    exit 0
fi

mkdir -p "$GUEST_CACHE_ROOT/debs"
# One build at a time (parallel test runs share the cache); whoever waited
# finds the image ready.
exec 9>"$GUEST_CACHE_ROOT/.build.lock"
flock 9
if [ "$force" -eq 0 ] && [ -f "$out/ready" ]; then
    echo "$out"
    exit 0
fi

t0="$(date +%s.%N)"
guest_log "building guest image $out"
work="$(mktemp -d "$GUEST_CACHE_ROOT/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# --- kernel package (kept in debs/ so a rebuild does not download again) ---
deb="$(ls "$GUEST_CACHE_ROOT/debs/${kpkg}_${kpkg_ver//:/%3a}_amd64.deb" 2>/dev/null || true)"
if [ -z "$deb" ]; then
    guest_log "apt-get download $kpkg=$kpkg_ver"
    (cd "$GUEST_CACHE_ROOT/debs" && apt-get download -q "$kpkg=$kpkg_ver" >&2 2>/dev/null) ||
        { apt-get update -qq >&2 && (cd "$GUEST_CACHE_ROOT/debs" && apt-get download -q "$kpkg=$kpkg_ver" >&2); } ||
        guest_die "apt-get download $kpkg failed"
    deb="$(ls "$GUEST_CACHE_ROOT/debs/${kpkg}_"*"_amd64.deb" | tail -n1)"
fi
kroot="$work/kernel"
dpkg-deb -x "$deb" "$kroot"
[ -f "$kroot/boot/vmlinuz-$kver" ] || guest_die "no vmlinuz-$kver in $deb"
kmods="$kroot/lib/modules/$kver"
# Newer kernels ship .ko.xz/.ko.zst; 6.1 ships plain .ko. Decompress either way
# so busybox modprobe/insmod can load them.
find "$kmods" -name '*.ko.xz' -exec xz -d {} + 2>/dev/null || true
find "$kmods" -name '*.ko.zst' -exec zstd -q -d --rm {} + 2>/dev/null || true
depmod -b "$kroot" "$kver"

# --- initramfs tree ---
root="$work/root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc/nvme,proc,sys,dev,tmp,run,mnt,checks,root}
cp /bin/busybox "$root/bin/busybox"

# Modules: the listed ones plus their dependency closure, at their usual paths.
modlist="$(grep -v '^[[:space:]]*#' "$GUEST_DIR/modules.list" | awk 'NF{print $1}')"
: >"$work/modfiles"
for m in $modlist; do
    modprobe -d "$kroot" -S "$kver" --show-depends "$m" >"$work/dep.out" 2>&1 ||
        guest_die "module $m: $(cat "$work/dep.out")"
    awk '$1=="insmod"{print $2}' "$work/dep.out" >>"$work/modfiles"
done
sort -u "$work/modfiles" | while read -r f; do
    rel="${f#"$kroot"/}"
    mkdir -p "$root/$(dirname "$rel")"
    cp "$f" "$root/$rel"
done
for f in modules.builtin modules.builtin.modinfo modules.order; do
    cp "$kmods/$f" "$root/lib/modules/$kver/"
done
depmod -b "$root" "$kver"
nmods="$(sort -u "$work/modfiles" | wc -l)"

# Dynamic tools with their ldd closure (paths kept; /lib is a real directory in
# the guest, so copy both the /lib and /usr/lib spellings ldd reports).
for tool in "${BUILD_TOOLS[@]}"; do
    [ -x "$tool" ] || guest_die "missing $tool"
    mkdir -p "$root/$(dirname "$tool")"
    cp -L --remove-destination "$tool" "$root/$tool"
    ldd "$tool" | awk '/=>/ && $3 ~ /^\//{print $3} /^[[:space:]]*\/.*ld-linux/{print $1}' |
        while read -r lib; do
            mkdir -p "$root/$(dirname "$lib")"
            [ -e "$root/$lib" ] || cp -L --remove-destination "$lib" "$root/$lib"
        done
done
ln -sf mke2fs "$root/sbin/mkfs.ext4"
ln -sf e2fsck "$root/sbin/fsck.ext4"
cp /etc/mke2fs.conf "$root/etc/mke2fs.conf"
# Library search cache so the dynamic loader finds everything without hints.
mkdir -p "$root/etc"
printf '/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu/ceph\n' >"$root/etc/ld.so.conf"
ldconfig -r "$root" 2>/dev/null || true
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"

install -m 0755 "$GUEST_DIR/init" "$root/init"

# Busybox applets last, and only where no real tool was copied. Never copy
# into the tree after this point: the links point at /bin/busybox, which on
# the host is the host's busybox.
for applet in $(/bin/busybox --list-full); do
    [ -e "$root/$applet" ] || [ -L "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
done

# --- pack ---
mkdir -p "$work/out"
cp "$kroot/boot/vmlinuz-$kver" "$work/out/vmlinuz"
(cd "$root" && find . -print0 | sort -z | cpio --null -o -H newc --quiet --owner=0:0) |
    "${BUILD_COMPRESS[@]}" >"$work/out/initrd.img"
echo "$kver" >"$work/out/kver"
{
    echo "kernel: $kpkg $kpkg_ver ($deb)"
    echo "modules ($nmods files): $(echo $modlist)"
    echo "tools: ${BUILD_TOOLS[*]}"
    dpkg-query -W -f '${Package}=${Version}\n' "${BUILD_KEY_PACKAGES[@]}" 2>/dev/null || true
    echo "initrd: $(du -sh "$root" | cut -f1) unpacked, $(du -h "$work/out/initrd.img" | cut -f1) as cpio (${BUILD_COMPRESS[*]})"
} >"$work/out/manifest"
awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f\n", b-a}' >"$work/out/build-secs"
touch "$work/out/ready"

rm -rf "$out"
mv "$work/out" "$out"
# Drop images built from other inputs (same naming scheme only).
for old in "$GUEST_CACHE_ROOT"/*-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]; do
    [ -d "$old" ] && [ "$old" != "$out" ] && [ -f "$old/ready" ] && rm -rf "$old"
done
rm -f "$GUEST_CACHE_ROOT"/.fast-*
echo "$out" >"$fastfile"
guest_log "built in $(cat "$out/build-secs")s: $(tail -n1 "$out/manifest")"
echo "$out"
