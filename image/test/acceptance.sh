#!/bin/bash
# Acceptance test of the Quarry appliance image (issue 7) under qemu: TCG, q35,
# OVMF (UEFI) and user-mode networking with host forwards on 127.0.0.1 for HTTP,
# SMB and NVMe/TCP. One VM disk (a qcow2 overlay of IMAGE), three power-ons:
#
#   boot 1 (V, slot a, first boot)
#     REST health answers (boot-to-healthy time measured); the admin password the
#     console prints logs in, a wrong one does not; GET /system reports slot a,
#     version V, kernel and uptime; a user and a share created through the API, then
#     smbclient puts and gets 1 MiB through the SMB forward; a volume, subsystem and
#     namespace created through the API, then the Rust NVMe/TCP initiator writes and
#     reads it through the NVMe forward; the first boot entry gets blessed (boot
#     counting); a bundle with a bad signature and one with a bad payload checksum
#     are refused (422) and change nothing that boots; bundle V2 installs into slot b.
#   boot 2 (power cycle; V2 from slot b)
#     healthy; the same admin password still logs in; GET /system reports slot b and
#     V2; the user, share, SMB file and NVMe data from boot 1 are all still there;
#     the update is reported `succeeded` once its entry is blessed. Then the broken
#     bundle V3 (its quarry never becomes healthy) installs into slot a.
#   boot 3 (power cycle; V3 fails its health check on each of its 3 tries, the guest
#     reboots itself, each reboot a fresh power-on of qemu, systemd-boot falls back)
#     healthy again on V2 from slot b, configuration intact, the API reports the V3
#     update as rolled_back with an error.
#
# usage: image/test/acceptance.sh IMAGE BUNDLE_V2 BUNDLE_V3 NVME_CHECK_BIN
# Environment: BOOT_TIMEOUT, ROLLBACK_TIMEOUT (s), QEMU_ACCEL (default tcg), KEEP=1
# (keep the work dir with the serial log), RESULTS=FILE (figures as key=value lines).
set -euo pipefail

TEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IMAGE_DIR=$(cd "$TEST_DIR/.." && pwd)
# shellcheck source=../lib/common.sh
. "$IMAGE_DIR/lib/common.sh"

[ $# -eq 4 ] || die "usage: $0 IMAGE BUNDLE_V2 BUNDLE_V3 NVME_CHECK_BIN"
IMAGE=$1
B2=$2
B3=$3
NVME_CHECK=$4
for f in "$IMAGE" "$B2" "$B3"; do [ -s "$f" ] || die "missing $f"; done
[ -x "$NVME_CHECK" ] || die "NVMe check binary $NVME_CHECK is not executable"
IMAGE_JSON=$(dirname "$(readlink -f "$IMAGE")")/image.json
V1=$(jq -er .version "$IMAGE_JSON") || die "no version in $IMAGE_JSON"

# Bundle version from its manifest (QRYBNDL1, u32 LE length, manifest JSON).
bundle_version() {
    local len
    len=$(od -An -tu4 -j8 -N4 "$1" | tr -d ' ')
    head -c $((12 + len)) "$1" | tail -c "$len" | jq -er .version
}
V2=$(bundle_version "$B2") || die "cannot read the manifest of $B2"
V3=$(bundle_version "$B3") || die "cannot read the manifest of $B3"

# How long one boot may take to reach a healthy API (TCG on 2 busy cores).
BOOT_TIMEOUT=${BOOT_TIMEOUT:-420}
# Three failing boots (each until the health check gives up) plus the fallback boot.
ROLLBACK_TIMEOUT=${ROLLBACK_TIMEOUT:-1500}
SHUTDOWN_TIMEOUT=120
ACCEL=${QEMU_ACCEL:-tcg}
OVMF_CODE=/usr/share/OVMF/OVMF_CODE_4M.fd
OVMF_VARS=/usr/share/OVMF/OVMF_VARS_4M.fd
RESULTS=${RESULTS:-/dev/null}

# shellcheck source=vm.sh
. "$TEST_DIR/vm.sh"

# Fails the test with a reason, the tail of the serial console and the guest's view.
fail() {
    log "FAILED: $*"
    tail -n 40 "$WORK/serial.log" >&2 || true
    # A clean shutdown flushes the guest's journal to its data partition.
    if [ -n "$QEMU_PID" ]; then
        stop_vm
        log "the guest's quarry.service journal (last 40 lines):"
        guest_journal -u quarry.service -n 40 >&2 || log "(could not read the guest journal)"
    fi
    exit 1
}
pass() { log "ok: $*"; CHECKS=$((CHECKS + 1)); }
CHECKS=0

system() { api GET /system; }
entries() { system | jq -c '[.boot_entries[].file] | sort'; }

upload() { # upload FILE -> HTTP status; body in $WORK/upload.json
    curl -sS --max-time 1800 -o "$WORK/upload.json" -w '%{http_code}' -X POST \
        -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/octet-stream' \
        --data-binary @"$1" "$API/system/update"
}

# wait_for DESCRIPTION SECONDS CMD...: retries CMD every 3 s until it succeeds.
wait_for() {
    local what=$1 limit=$2 deadline
    shift 2
    deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || fail "$what: not within ${limit}s"
        sleep 3
    done
}

SMB_USER=alice
SMB_PASS=alice-pass-123
smb() { # smb COMMANDS: smbclient SMB3 session through the forward
    smbclient -p "$SMB_PORT" -U "$SMB_USER%$SMB_PASS" --option='client min protocol=SMB3' \
        //127.0.0.1/data -c "$1"
}
NQN=nqn.2026-11.io.quarry:image-test
nvme_check() { "$NVME_CHECK" "127.0.0.1:$NVME_PORT" "$NQN" "$@"; }

# Bad bundles made from V2: a flipped signature byte (the header plus 1 MiB of
# payload is enough: the signature is checked before anything is written) and a
# flipped last payload byte (valid signature, wrong SHA-256).
manifest_len=$(od -An -tu4 -j8 -N4 "$B2" | tr -d ' ')
head -c $((12 + manifest_len + 64 + 1048576)) "$B2" >"$WORK/bad-signature.bundle"
printf '\xff' | dd of="$WORK/bad-signature.bundle" bs=1 seek=$((12 + manifest_len + 10)) conv=notrunc status=none
cp "$B2" "$WORK/bad-checksum.bundle"
last=$(($(stat -c %s "$B2") - 1))
byte=$(od -An -tu1 -j "$last" -N1 "$B2" | tr -d ' ')
perl -e 'print chr(shift)' $(((byte + 1) % 256)) | dd of="$WORK/bad-checksum.bundle" bs=1 seek="$last" conv=notrunc status=none
cmp -s "$B2" "$WORK/bad-checksum.bundle" && die "could not corrupt the checksum test bundle"

# ==== boot 1: V1 from slot a, first boot =============================================
log "boot 1: $IMAGE ($V1; accel $ACCEL; forwards: http $HTTP_PORT, smb $SMB_PORT, nvme $NVME_PORT)"
start_vm
wait_healthy
T1=$HEALTHY_AFTER
echo "boot1_to_healthy_s=$T1" >>"$RESULTS"
[ "$POWER_CYCLES" -eq 0 ] || fail "boot 1 rebooted $POWER_CYCLES time(s) before it became healthy"
pass "boot 1: REST health answers after ${T1}s without a reboot: $(cat "$WORK/health.json")"

PASSWORD=$(console_password)
[ -n "$PASSWORD" ] || fail "no admin password (QUARRY_ADMIN_PASSWORD=) on the console"
TOKEN=$(login) || fail "login with the console's admin password failed"
pass "console admin password (${#PASSWORD} characters) logs in"
if curl -fsS --max-time 120 -H 'Content-Type: application/json' \
    --data '{"username":"admin","password":"definitely-wrong"}' "$API/auth/login" >/dev/null 2>&1; then
    fail "login with a wrong password succeeded"
fi
pass "a wrong admin password is refused"

# HTTPS on 443 with the certificate made on first boot (self-signed: -k), the one the API reports.
curl -fsS -k --max-time 60 "https://127.0.0.1:$HTTPS_PORT/api/v1/health" >/dev/null \
    || fail "HTTPS health through the forward"
api GET /system/tls >"$WORK/tls1.json" || fail "GET /system/tls failed"
jq -e '.self_signed == true and (.sha256_fingerprint | length == 64)' "$WORK/tls1.json" >/dev/null \
    || fail "GET /system/tls on boot 1: $(cat "$WORK/tls1.json")"
pass "HTTPS on 443 with the first-boot self-signed certificate $(jq -r .sha256_fingerprint "$WORK/tls1.json" | cut -c1-16)…"

system >"$WORK/system1.json" || fail "GET /system failed"
jq -e --arg v "$V1" '.slot == "a" and .image_version == $v and (.kernel | length > 0) and .uptime_s > 0' \
    "$WORK/system1.json" >/dev/null || fail "GET /system on boot 1: $(cat "$WORK/system1.json")"
pass "GET /system: $(jq -c '{version, image_version, slot, uptime_s, kernel}' "$WORK/system1.json")"

api POST /users "{\"name\":\"$SMB_USER\",\"password\":\"$SMB_PASS\"}" >/dev/null || fail "creating user $SMB_USER"
api POST /shares "{\"name\":\"data\",\"users\":[\"$SMB_USER\"]}" >/dev/null || fail "creating share data"
head -c 1048576 /dev/urandom >"$WORK/up.bin"
smb "put $WORK/up.bin up.bin; get up.bin $WORK/down.bin" >"$WORK/smb1.log" 2>&1 \
    || { cat "$WORK/smb1.log" >&2; fail "smbclient put/get through the forward"; }
cmp -s "$WORK/up.bin" "$WORK/down.bin" || fail "SMB round trip returned different bytes"
pass "share created through the API; smbclient (SMB3) put and got 1 MiB through the forward"

api POST /volumes '{"name":"vol0","size_bytes":67108864}' >/dev/null || fail "creating volume vol0"
api POST /nvme/subsystems "{\"nqn\":\"$NQN\",\"allow_any_host\":true}" >/dev/null || fail "creating subsystem"
api POST "/nvme/subsystems/$NQN/namespaces" '{"volume":"vol0"}' >/dev/null || fail "adding the namespace"
nvme_check write 1 || fail "NVMe/TCP write/read through the forward"
pass "namespace created through the API; Rust NVMe/TCP initiator wrote and read it through the forward"

blessed_a() { entries | jq -e '. == ["quarry-a.conf"]'; }
wait_for "boot 1 entry blessed (quarry-a.conf)" 180 blessed_a
pass "boot counting: the first boot was blessed: $(entries)"

before=$(entries)
status=$(upload "$WORK/bad-signature.bundle") || fail "uploading the bad-signature bundle"
[ "$status" = 422 ] || fail "bad-signature bundle: HTTP $status, expected 422: $(cat "$WORK/upload.json")"
grep -qi 'signature' "$WORK/upload.json" || fail "refusal does not name the signature: $(cat "$WORK/upload.json")"
[ "$(entries)" = "$before" ] || fail "the bad-signature bundle changed the boot entries: $(entries)"
pass "bad signature refused (422), boot entries unchanged: $before"

status=$(upload "$WORK/bad-checksum.bundle") || fail "uploading the bad-checksum bundle"
[ "$status" = 422 ] || fail "bad-checksum bundle: HTTP $status, expected 422: $(cat "$WORK/upload.json")"
[ "$(entries)" = "$before" ] || fail "the bad-checksum bundle changed the boot entries: $(entries)"
system | jq -e '.last_update.state == "failed" and (.last_update.error | length > 0)' >/dev/null \
    || fail "failed update not reported: $(system | jq -c .last_update)"
pass "bad checksum refused (422: $(jq -r .detail "$WORK/upload.json")), boot entries unchanged, reported failed"

# Progress: while V2 uploads, GET /system/update is sampled every second.
t0=$SECONDS
( while :; do api GET /system/update >>"$WORK/progress.jsonl" 2>/dev/null; echo >>"$WORK/progress.jsonl"; sleep 1; done ) &
POLLER=$!
status=$(upload "$B2") || { kill "$POLLER"; fail "uploading $B2"; }
kill "$POLLER"
wait "$POLLER" 2>/dev/null || true
[ "$status" = 200 ] || fail "V2 upload: HTTP $status: $(cat "$WORK/upload.json")"
jq -e '.state == "installed" and .slot == "b"' "$WORK/upload.json" >/dev/null || fail "V2 not installed: $(cat "$WORK/upload.json")"
echo "upload_s=$((SECONDS - t0))" >>"$RESULTS"
pass "V2 $V2 installed into slot b in $((SECONDS - t0))s; entries $(entries)"
progress=$({ jq -c --arg v "$V2" '.[] | select(.version == $v and .state == "writing" and .bytes_written > 0) | .bytes_written' \
    "$WORK/progress.jsonl" 2>/dev/null || true; } | sort -un | tr '\n' ' ')
[ -n "$progress" ] || fail "no upload progress seen in GET /system/update while V2 was written"
pass "upload progress visible in GET /system/update (bytes_written: $progress)"
stop_vm

# ==== boot 2: V2 from slot b ===========================================================
log "boot 2: power cycle into $V2"
start_vm
wait_healthy
T2=$HEALTHY_AFTER
echo "boot2_to_healthy_s=$T2" >>"$RESULTS"
[ "$POWER_CYCLES" -eq 0 ] || fail "boot 2 rebooted $POWER_CYCLES time(s) before it became healthy"
pass "boot 2: healthy after ${T2}s without a reboot"
TOKEN=$(login) || fail "the admin password no longer logs in after the reboot"
system >"$WORK/system2.json" || fail "GET /system failed"
jq -e --arg v "$V2" '.slot == "b" and .image_version == $v' "$WORK/system2.json" >/dev/null \
    || fail "not running $V2 from slot b: $(cat "$WORK/system2.json")"
pass "runs $V2 from slot b: $(jq -c '{image_version, slot, kernel}' "$WORK/system2.json")"
api GET /users | jq -e --arg u "$SMB_USER" 'map(.name) | index($u) != null' >/dev/null || fail "user $SMB_USER lost"
api GET /shares | jq -e 'map(.name) | index("data") != null' >/dev/null || fail "share data lost"
smb "get up.bin $WORK/again.bin" >"$WORK/smb2.log" 2>&1 || { cat "$WORK/smb2.log" >&2; fail "SMB get after reboot"; }
cmp -s "$WORK/up.bin" "$WORK/again.bin" || fail "the SMB file changed across the reboot"
nvme_check verify 1 || fail "NVMe data lost or changed across the reboot"
curl -fsS -k --max-time 60 "https://127.0.0.1:$HTTPS_PORT/api/v1/health" >/dev/null || fail "HTTPS after the update"
api GET /system/tls | jq -e --arg f "$(jq -r .sha256_fingerprint "$WORK/tls1.json")" '.sha256_fingerprint == $f' >/dev/null \
    || fail "the TLS certificate changed across the update"
pass "after the reboot: admin password, user, share, SMB file, NVMe namespace data and TLS certificate all intact"
succeeded() { system | jq -e --arg v "$V2" '.last_update.version == $v and .last_update.state == "succeeded"'; }
wait_for "update to $V2 marked succeeded" 180 succeeded
pass "update history: $V2 succeeded; entries $(entries)"

status=$(upload "$B3") || fail "uploading $B3"
[ "$status" = 200 ] || fail "V3 upload: HTTP $status: $(cat "$WORK/upload.json")"
jq -e '.state == "installed" and .slot == "a"' "$WORK/upload.json" >/dev/null || fail "V3 not installed: $(cat "$WORK/upload.json")"
pass "broken V3 $V3 installed into slot a; entries $(entries)"
stop_vm

# ==== boot 3: V3 fails 3 times, systemd-boot falls back to V2 ===============================
log "boot 3: power cycle into the broken $V3 (expect 3 failed tries, then $V2)"
t0=$SECONDS
BOOT_TIMEOUT=$ROLLBACK_TIMEOUT
start_vm
wait_healthy
T3=$HEALTHY_AFTER
echo "rollback_to_healthy_s=$T3" >>"$RESULTS"
# systemd greets once per boot on the console: 3 failed tries of V3, then V2.
boots=$(grep -ac 'Welcome to' "$WORK/serial.log" || true)
[ "$boots" -eq 4 ] || fail "expected 4 boots (3 failed tries of $V3, then $V2), the console shows $boots"
[ "$POWER_CYCLES" -eq 3 ] || fail "expected the guest to reboot 3 times, it rebooted $POWER_CYCLES times"
pass "healthy again after ${T3}s: 3 failed boots of $V3, then $V2"
TOKEN=$(login) || fail "login after the rollback failed"
system >"$WORK/system3.json" || fail "GET /system failed"
jq -e --arg v "$V2" '.slot == "b" and .image_version == $v' "$WORK/system3.json" >/dev/null \
    || fail "not back on $V2 from slot b: $(cat "$WORK/system3.json")"
jq -e --arg v "$V3" '.last_update.version == $v and .last_update.state == "rolled_back" and (.last_update.error | length > 0)' \
    "$WORK/system3.json" >/dev/null || fail "rollback not reported: $(jq -c .last_update "$WORK/system3.json")"
api GET /shares | jq -e 'map(.name) | index("data") != null' >/dev/null || fail "configuration lost in the rollback"
nvme_check verify 1 || fail "NVMe data lost in the rollback"
pass "back on $V2 from slot b, config and data intact; API reports: $(jq -c '.last_update | {version, state, error}' "$WORK/system3.json")"
stop_vm

FAILED=0
log "boot-to-healthy: boot 1 ${T1}s, boot 2 ${T2}s; rollback (3 failed tries + fallback) ${T3}s"
echo "$CHECKS passed, 0 failed"
