#!/bin/bash
# Boot test of the Quarry appliance image under qemu (TCG, OVMF/UEFI,
# user-mode networking with host forwards on 127.0.0.1 only).
#
#   image/test/boot-test.sh [IMAGE]      # default: target/image/quarry.raw
#
# Checks, in order:
#   1. UEFI boot through systemd-boot to a healthy REST API (GET /api/v1/health);
#   2. the admin password printed on the console logs in (POST /api/v1/auth/login);
#   3. config written through the API (an SMB user and a share) survives a reboot,
#      and the boot entry was blessed by boot counting (quarry-a.conf, no +N);
#   4. when smbclient and the quarry SMB server work: put/get a file through the forward.
# The VM writes to a qcow2 overlay, never to IMAGE. Prints boot-to-healthy times.
#
# Environment: BOOT_TIMEOUT (s, default 300), KEEP=1 keeps the work dir,
# QEMU_ACCEL (default tcg).
set -euo pipefail

TEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IMAGE_DIR=$(cd "$TEST_DIR/.." && pwd)
REPO=$(cd "$IMAGE_DIR/.." && pwd)
# shellcheck source=../lib/common.sh
. "$IMAGE_DIR/lib/common.sh"

IMAGE=${1:-${CARGO_TARGET_DIR:-$REPO/target}/image/quarry.raw}
[ -s "$IMAGE" ] || die "no image at $IMAGE (run image/build.sh first)"
# How long one boot may take to reach a healthy API (TCG on 2 busy cores).
BOOT_TIMEOUT=${BOOT_TIMEOUT:-420}
# How long the guest gets to shut down cleanly.
SHUTDOWN_TIMEOUT=120
ACCEL=${QEMU_ACCEL:-tcg}
OVMF_CODE=/usr/share/OVMF/OVMF_CODE_4M.fd
OVMF_VARS=/usr/share/OVMF/OVMF_VARS_4M.fd

. "$TEST_DIR/vm.sh"

# ---- boot 1 ---------------------------------------------------------------------
log "boot 1: $IMAGE (accel $ACCEL, API on 127.0.0.1:$HTTP_PORT)"
start_vm
T1=$(wait_healthy)
log "boot 1: healthy after ${T1}s: $(cat "$WORK/health.json")"

# The console banner prints the first-boot password (it follows health).
PASSWORD=$(console_password)
[ -n "$PASSWORD" ] || { tail -n 40 "$WORK/serial.log" >&2; die "no admin password on the console"; }
log "console shows the admin password (${#PASSWORD} characters)"

TOKEN=$(login) || die "login with the console's admin password failed"
log "login with the console password: ok"
# A wrong password must be refused (proves the check is real).
if curl -fsS --max-time 30 -H 'Content-Type: application/json' \
    --data '{"username":"admin","password":"definitely-wrong"}' "$API/auth/login" >/dev/null 2>&1; then
    die "login with a wrong password succeeded"
fi

api POST /users '{"name":"alice","password":"alice-pass-123"}' >/dev/null
api POST /shares '{"name":"data","users":["alice"]}' >/dev/null
log "created SMB user alice and share data"

smb_check() { # smb_check LABEL: put/get through the forward, if SMB is up
    command -v smbclient >/dev/null || { log "smbclient missing: SMB check skipped"; return 0; }
    local tag=$1
    head -c 1048576 /dev/urandom >"$WORK/up-$tag.bin"
    if ! smbclient -p "$SMB_PORT" -U alice%alice-pass-123 --option='client min protocol=SMB3' \
        //127.0.0.1/data -c "put $WORK/up-$tag.bin up-$tag.bin; get up-$tag.bin $WORK/down-$tag.bin" \
        >"$WORK/smb-$tag.log" 2>&1; then
        log "SMB put/get through the forward failed (see below); quarry's SMB server may not be ready yet"
        tail -n 5 "$WORK/smb-$tag.log" >&2
        SMB_OK=0
        return 0
    fi
    cmp "$WORK/up-$tag.bin" "$WORK/down-$tag.bin" || die "SMB round trip returned different bytes"
    log "SMB put/get of 1 MiB through the forward: ok"
    SMB_OK=1
}
SMB_OK=0
smb_check boot1

# ---- reboot ------------------------------------------------------------------------
log "power cycle"
stop_vm
grep -q 'Reached target.*Power-Off\|reboot: Power down' "$WORK/serial.log" || log "note: no clean power-off message on the console"
start_vm
T2=$(wait_healthy)
log "boot 2: healthy after ${T2}s"
TOKEN=$(login) || die "login after reboot failed (config not persistent?)"
api GET /users | jq -e 'map(.name) | index("alice") != null' >/dev/null || die "user alice lost across reboot"
api GET /shares | jq -e 'map(.name) | index("data") != null' >/dev/null || die "share data lost across reboot"
log "config survived the reboot"
if grep -q 'QUARRY_ADMIN_PASSWORD=' "$WORK/serial.log"; then
    log "note: the banner still shows the first-boot password on boot 2"
fi
if [ "$SMB_OK" = 1 ]; then
    smbclient -p "$SMB_PORT" -U alice%alice-pass-123 //127.0.0.1/data \
        -c "get up-boot1.bin $WORK/again.bin" >/dev/null 2>&1 || die "file lost across reboot"
    cmp "$WORK/up-boot1.bin" "$WORK/again.bin" || die "file changed across reboot"
    log "SMB file survived the reboot"
fi
stop_vm

# Boot counting: the entry was blessed (renamed without its +N counter).
entries=$(esp_entries)
log "boot entries after two boots: $entries"
echo "$entries" | grep -qw 'quarry-a\.conf' || die "boot entry was not blessed (boot counting)"

FAILED=0
printf 'boot-to-healthy: boot1 %ss, boot2 %ss (accel %s)\n' "$T1" "$T2" "$ACCEL"
echo "1 passed, 0 failed"
