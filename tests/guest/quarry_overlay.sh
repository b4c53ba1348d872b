#!/usr/bin/env bash
# Packs a `quarry` binary for running INSIDE the guest: the binary (debug info
# stripped), its ldd closure, and libibverbs' Soft-RoCE provider (librxe + its
# .driver file, which libibverbs loads by dlopen, so ldd does not list them), as
# an uncompressed newc cpio member that run.sh appends with --extra-cpio.
# The binary lands at /opt/quarry/bin/quarry; the `quarry_target` check set
# starts and configures it. Usable for any build (with or without the `rdma`
# feature): a later benchmark can append the same member and compare Quarry with
# the in-guest kernel nvmet in one boot. Any further host programs named (for
# nvme_bench.sh --profile: perf) land at their host paths, with their ldd closure.
#
#   tests/guest/quarry_overlay.sh QUARRY_BINARY OUT.cpio [HOST_PROGRAM...]
set -euo pipefail

usage="usage: quarry_overlay.sh QUARRY_BINARY OUT.cpio [HOST_PROGRAM...]"
bin="${1:?$usage}"
out="${2:?$usage}"
shift 2
[ -x "$bin" ] || { echo "quarry_overlay: $bin is not an executable" >&2; exit 2; }

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT

copy_closure() { # FILE: copy the libraries ldd lists, host paths kept
    ldd "$1" 2>/dev/null | awk '/=>/ && $3 ~ /^\//{print $3} /^[[:space:]]*\/.*ld-linux/{print $1}' |
        while read -r lib; do
            mkdir -p "$root/$(dirname "$lib")"
            [ -e "$root/$lib" ] || cp -L --remove-destination "$lib" "$root/$lib"
        done
}

mkdir -p "$root/opt/quarry/bin"
if command -v objcopy >/dev/null; then
    objcopy --strip-debug "$bin" "$root/opt/quarry/bin/quarry"
else
    cp -L "$bin" "$root/opt/quarry/bin/quarry"
fi
chmod 0755 "$root/opt/quarry/bin/quarry"
copy_closure "$bin"
for prog in "$@"; do
    [ -x "$prog" ] || { echo "quarry_overlay: $prog is not an executable" >&2; exit 2; }
    mkdir -p "$root/$(dirname "$prog")"
    cp -L "$prog" "$root/$prog"
    copy_closure "$prog"
done

# Soft-RoCE user-space provider (only when the binary links libibverbs).
if ldd "$bin" | grep -q libibverbs; then
    provdir=/usr/lib/x86_64-linux-gnu/libibverbs
    prov="$(ls "$provdir"/librxe-rdmav*.so 2>/dev/null | head -n 1)"
    [ -n "$prov" ] || { echo "quarry_overlay: no librxe provider (apt-get install ibverbs-providers)" >&2; exit 2; }
    mkdir -p "$root$provdir" "$root/etc/libibverbs.d"
    cp -L "$prov" "$root$prov"
    copy_closure "$prov"
    cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/rxe.driver"
fi

(cd "$root" && find . -print0 | sort -z | cpio --null -o -H newc --quiet --owner=0:0) >"$out"
echo "quarry_overlay: $(du -h "$out" | cut -f1) -> $out" >&2
