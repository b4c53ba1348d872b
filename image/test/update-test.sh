#!/bin/bash
# A/B firmware update test of the Quarry appliance image under qemu (TCG, OVMF).
#
#   image/test/update-test.sh [IMAGE]     # default: target/image/quarry.raw
#
# Builds two more signed bundles with image/build.sh (same signing key):
#   V2 = VERSION.1   the same quarry, a higher version
#   V3 = VERSION.2   a quarry that never becomes healthy (test fixture script)
# then, on one VM disk (qcow2 overlay of IMAGE):
#   1. a bundle with a bad signature is refused (422) and the boot entries are unchanged;
#   2. V2 installs into slot B; after a reboot the VM runs V2 from slot B with its
#      configuration, and the entry is blessed (history: succeeded);
#   3. (ROLLBACK=1, the default) V3 installs into slot A; its boots fail their health
#      check, boot counting gives up after 3 tries, and the VM runs V2 from slot B
#      again, with the API reporting the update as rolled_back.
# Environment: QUARRY_BIN (binary for the bundles; default: build.sh builds it),
# BOOT_TIMEOUT, ROLLBACK_TIMEOUT (s), KEEP=1.
set -euo pipefail

TEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IMAGE_DIR=$(cd "$TEST_DIR/.." && pwd)
REPO=$(cd "$IMAGE_DIR/.." && pwd)
# shellcheck source=../lib/common.sh
. "$IMAGE_DIR/lib/common.sh"

TARGET=${CARGO_TARGET_DIR:-$REPO/target}
IMAGE=${1:-$TARGET/image/quarry.raw}
[ -s "$IMAGE" ] || die "no image at $IMAGE (run image/build.sh first)"
IMAGE_OUT=$(dirname "$(readlink -f "$IMAGE")")
V1=$(jq -r .version "$IMAGE_OUT/image.json")
V2=$V1.1
V3=$V1.2
BOOT_TIMEOUT=${BOOT_TIMEOUT:-420}
# Three failing boots (each up to the health check's give-up) plus the fallback boot.
ROLLBACK_TIMEOUT=${ROLLBACK_TIMEOUT:-2400}
SHUTDOWN_TIMEOUT=120
ACCEL=${QEMU_ACCEL:-tcg}
OVMF_CODE=/usr/share/OVMF/OVMF_CODE_4M.fd
OVMF_VARS=/usr/share/OVMF/OVMF_VARS_4M.fd

. "$TEST_DIR/vm.sh"

# ---- bundles ----------------------------------------------------------------------
BUNDLES=$TARGET/image-update-test
log "building bundles $V2 and $V3 (broken) in $BUNDLES"
QUARRY_IMAGE_BUNDLE_ONLY=1 QUARRY_IMAGE_VERSION=$V2 QUARRY_IMAGE_OUT=$BUNDLES/v2 \
    "$IMAGE_DIR/build.sh" >"$WORK/build-v2.log" 2>&1 || { tail -n 20 "$WORK/build-v2.log"; die "building $V2 failed"; }
# Test fixture: a quarry that reports a version but never serves (exits at once).
cat >"$WORK/quarry-broken" <<'EOF'
#!/bin/sh
case "$1" in
    --version) echo "quarry 0.0.0-broken" ;;
    *) echo "quarry-broken: this build never starts (update rollback test fixture)" >&2; exit 1 ;;
esac
EOF
chmod 0755 "$WORK/quarry-broken"
QUARRY_BIN=$WORK/quarry-broken QUARRY_IMAGE_BUNDLE_ONLY=1 QUARRY_IMAGE_VERSION=$V3 QUARRY_IMAGE_OUT=$BUNDLES/v3 \
    "$IMAGE_DIR/build.sh" >"$WORK/build-v3.log" 2>&1 || { tail -n 20 "$WORK/build-v3.log"; die "building $V3 failed"; }
B2=$BUNDLES/v2/quarry-$V2.bundle
B3=$BUNDLES/v3/quarry-$V3.bundle

# A bundle whose signature was tampered with: header plus 1 MiB of payload is
# enough, the signature is checked before any payload byte is written.
manifest_len=$(od -An -tu4 -j8 -N4 "$B2" | tr -d ' ')
head -c $((12 + manifest_len + 64 + 1048576)) "$B2" >"$WORK/bad-signature.bundle"
printf '\xff' | dd of="$WORK/bad-signature.bundle" bs=1 seek=$((12 + manifest_len + 10)) conv=notrunc status=none

upload() { # upload FILE -> HTTP status; body in $WORK/upload.json
    curl -sS --max-time 1800 -o "$WORK/upload.json" -w '%{http_code}' -X POST \
        -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/octet-stream' \
        --data-binary @"$1" "$API/system/update"
}
system() { api GET /system; }

# ---- boot V1 ------------------------------------------------------------------------
start_vm
T=$(wait_healthy)
log "V1 $V1 healthy after ${T}s"
PASSWORD=$(console_password)
[ -n "$PASSWORD" ] || die "no admin password on the console"
TOKEN=$(login) || die "login failed"
api POST /shares '{"name":"keep"}' >/dev/null
system | jq -e --arg v "$V1" '.slot == "a" and .image_version == $v' >/dev/null || die "V1 not on slot a: $(system)"
entries_before=$(system | jq -c '[.boot_entries[].file]')

status=$(upload "$WORK/bad-signature.bundle")
[ "$status" = 422 ] || die "bad-signature bundle: HTTP $status, expected 422: $(cat "$WORK/upload.json")"
grep -q 'signature' "$WORK/upload.json" || die "refusal does not name the signature: $(cat "$WORK/upload.json")"
[ "$(system | jq -c '[.boot_entries[].file]')" = "$entries_before" ] || die "bad bundle changed the boot entries"
log "bad signature: refused (422), boot entries unchanged $entries_before"

t0=$SECONDS
status=$(upload "$B2")
[ "$status" = 200 ] || die "V2 upload: HTTP $status: $(cat "$WORK/upload.json")"
jq -e '.state == "installed" and .slot == "b"' "$WORK/upload.json" >/dev/null || die "V2 not installed: $(cat "$WORK/upload.json")"
log "V2 $V2 installed into slot b in $((SECONDS - t0))s ($(stat -c %s "$B2") bytes); entries: $(system | jq -c '[.boot_entries[].file]')"

# ---- reboot into V2 ---------------------------------------------------------------------
stop_vm
start_vm
T=$(wait_healthy)
log "after reboot healthy in ${T}s"
TOKEN=$(login) || die "login after update failed"
system | jq -e --arg v "$V2" '.slot == "b" and .image_version == $v' >/dev/null || die "not running V2 from slot b: $(system)"
api GET /shares | jq -e 'map(.name) | index("keep") != null' >/dev/null || die "configuration lost in the update"
for _ in $(seq 60); do
    [ "$(system | jq -r .last_update.state)" = succeeded ] && break
    sleep 3
done
system | jq -e '.last_update.state == "succeeded"' >/dev/null || die "V2 never marked good: $(system)"
log "V2 runs from slot b, config intact, boot entry blessed: $(system | jq -c '[.boot_entries[].file]')"

if [ "${ROLLBACK:-1}" = 1 ]; then
    status=$(upload "$B3")
    [ "$status" = 200 ] || die "V3 upload: HTTP $status: $(cat "$WORK/upload.json")"
    log "broken V3 $V3 installed into slot a; rebooting into it (expect 3 failed boots, then V2)"
    stop_vm
    BOOT_TIMEOUT=$ROLLBACK_TIMEOUT
    start_vm
    T=$(wait_healthy)
    log "healthy again after ${T}s"
    TOKEN=$(login) || die "login after rollback failed"
    system | jq -e --arg v "$V2" '.slot == "b" and .image_version == $v' >/dev/null || die "not back on V2: $(system)"
    system | jq -e '.last_update.state == "rolled_back"' >/dev/null || die "rollback not reported: $(system)"
    log "rolled back to V2: $(system | jq -c '{slot, image_version, last_update: .last_update.error, entries: [.boot_entries[].file]}')"
    api GET /shares | jq -e 'map(.name) | index("keep") != null' >/dev/null || die "configuration lost in the rollback"
fi
stop_vm
FAILED=0
echo "1 passed, 0 failed"
