#!/usr/bin/env bash
# Installs the guest lab's host prerequisites when missing (fresh CI machine):
# qemu-system-x86, busybox-static, cpio, kmod, nvme-cli, fio, e2fsprogs,
# iproute2, zstd, and with --reference also samba for reference.sh.
# Then builds (or finds in the cache) the guest image.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [ "${1:-}" = "--reference" ]; then
    guest_ensure_reference_prereqs
else
    guest_ensure_host_prereqs
fi
"$GUEST_DIR/build.sh" >/dev/null
