# shellcheck shell=bash
# VM helpers for acceptance.sh (sourced, not run).
# Expects IMAGE, BOOT_TIMEOUT, SHUTDOWN_TIMEOUT, ACCEL, OVMF_CODE, OVMF_VARS set
# and lib/common.sh sourced. Defines WORK, HTTP_PORT/SMB_PORT/NVME_PORT/HTTPS_PORT, API,
# start_vm, launch_qemu, wait_healthy, stop_vm, api, login, console_password.

ensure_host_packages
[ -r "$OVMF_CODE" ] || die "OVMF not found at $OVMF_CODE"

WORK=$(mktemp -d /tmp/quarry-boot-test.XXXXXX)
QEMU_PID=""
cleanup() {
    if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
        kill "$QEMU_PID" 2>/dev/null || true
        wait "$QEMU_PID" 2>/dev/null || true
    fi
    if [ "${KEEP:-0}" = 1 ]; then
        log "work dir kept: $WORK (serial log: $WORK/serial.log)"
    elif [ "${FAILED:-0}" = 1 ]; then
        # The logs tell what happened; disks, bundles and transfer files (hundreds of MiB)
        # would only fill /tmp.
        rm -f "$WORK"/*.qcow2 "$WORK"/*.raw "$WORK"/*.bundle "$WORK"/*.bin
        log "work dir kept without its disks: $WORK (serial log: $WORK/serial.log)"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
FAILED=1

# Four distinct free ports on 127.0.0.1, all held until each is chosen (separate
# lookups could hand out the same port twice).
read -r HTTP_PORT SMB_PORT NVME_PORT HTTPS_PORT < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
[ -n "$HTTPS_PORT" ] || die "could not pick free ports"
API=http://127.0.0.1:$HTTP_PORT/api/v1

qemu-img create -q -f qcow2 -F raw -b "$(readlink -f "$IMAGE")" "$WORK/disk.qcow2"
cp "$OVMF_VARS" "$WORK/vars.fd"

# start_vm: boots the VM in the background; its serial console goes to serial.log.
start_vm() {
    : >"$WORK/serial.log"
    POWER_CYCLES=0
    launch_qemu
    VM_STARTED=$(date +%s.%N)
}

# launch_qemu: one qemu process, one power-on. -no-reboot makes a guest reboot end
# the process; wait_healthy then powers the machine on again. qemu 7.2 under TCG
# with two vCPUs has hung on a guest's warm reset (no firmware output for 25 minutes
# after "reboot: Restarting system"), and a power cycle is what a server with a
# hung reset would get anyway. The serial console is appended to across cycles.
launch_qemu() {
    # restrict=on: the guest reaches nothing outside (no NTP, no DNS leaks);
    # the hostfwd rules on 127.0.0.1 still work.
    qemu-system-x86_64 -accel "$ACCEL" -cpu max -machine q35 -m 1024 -smp 2 \
        -nodefaults -display none -no-user-config -no-reboot \
        -drive if=pflash,format=raw,unit=0,readonly=on,file="$OVMF_CODE" \
        -drive if=pflash,format=raw,unit=1,file="$WORK/vars.fd" \
        -drive if=virtio,format=qcow2,file="$WORK/disk.qcow2" \
        -netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$HTTP_PORT-:8080,hostfwd=tcp:127.0.0.1:$SMB_PORT-:445,hostfwd=tcp:127.0.0.1:$NVME_PORT-:4420,hostfwd=tcp:127.0.0.1:$HTTPS_PORT-:443" \
        -device virtio-net-pci,netdev=n0 \
        -device virtio-rng-pci \
        -chardev "file,id=console,path=$WORK/serial.log,append=on" -serial chardev:console \
        -qmp "unix:$WORK/qmp.sock,server=on,wait=off" &
    QEMU_PID=$!
}

# wait_healthy: polls the health endpoint; sets HEALTHY_AFTER to the seconds since
# the VM started and POWER_CYCLES to how many times the guest rebooted on the way
# (each reboot ends qemu, see launch_qemu, and is answered with a fresh power-on).
# A qemu that exits without the kernel's reboot line is a failure.
wait_healthy() {
    local deadline=$((SECONDS + BOOT_TIMEOUT)) reboots
    while [ $SECONDS -lt $deadline ]; do
        if ! kill -0 "$QEMU_PID" 2>/dev/null; then
            wait "$QEMU_PID" 2>/dev/null || die "qemu failed (see $WORK/serial.log)"
            reboots=$(grep -ac 'reboot: Restarting system' "$WORK/serial.log" || true)
            [ "$reboots" -gt "$POWER_CYCLES" ] || die "qemu exited without a guest reboot (see $WORK/serial.log)"
            POWER_CYCLES=$reboots
            log "the guest rebooted (${POWER_CYCLES}x so far): powering it on again"
            launch_qemu
            continue
        fi
        if curl -fsS --max-time 5 "$API/health" -o "$WORK/health.json" 2>/dev/null \
            && jq -e '.status == "ok"' "$WORK/health.json" >/dev/null; then
            HEALTHY_AFTER=$(awk -v a="$VM_STARTED" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", b - a }')
            return 0
        fi
        sleep 2
    done
    tail -n 60 "$WORK/serial.log" >&2
    die "no healthy API within ${BOOT_TIMEOUT}s"
}

# stop_vm: clean shutdown through ACPI, killed after SHUTDOWN_TIMEOUT.
stop_vm() {
    python3 - "$WORK/qmp.sock" <<'EOF'
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rw")
f.readline()
for cmd in ({"execute": "qmp_capabilities"}, {"execute": "system_powerdown"}):
    f.write(json.dumps(cmd) + "\n"); f.flush(); f.readline()
EOF
    local deadline=$((SECONDS + SHUTDOWN_TIMEOUT))
    while kill -0 "$QEMU_PID" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 1; done
    if kill -0 "$QEMU_PID" 2>/dev/null; then
        log "guest did not power off in ${SHUTDOWN_TIMEOUT}s: killing qemu"
        kill "$QEMU_PID"
    fi
    wait "$QEMU_PID" 2>/dev/null || true
    QEMU_PID=""
}

api() { # api METHOD PATH [JSON] -> body on stdout, fails on HTTP >= 400
    local method=$1 path=$2 body=${3:-}
    curl -fsS --max-time 120 -X "$method" -H "Authorization: Bearer $TOKEN" \
        ${body:+-H 'Content-Type: application/json' --data "$body"} "$API$path"
}

# Login attempts: password hashing is deliberately slow, and under TCG on a busy
# host one attempt can outlast the API's request timeout (408).
LOGIN_ATTEMPTS=4
login() {
    local i token
    for i in $(seq "$LOGIN_ATTEMPTS"); do
        if token=$(curl -fsS --max-time 120 -H 'Content-Type: application/json' \
            --data "$(jq -nc --arg p "$PASSWORD" '{username: "admin", password: $p}')" \
            "$API/auth/login" | jq -er .token); then
            printf '%s\n' "$token"
            return 0
        fi
        log "login attempt $i failed; retrying"
        sleep 5
    done
    return 1
}

# The first-boot admin password as the console banner prints it.
console_password() {
    local pw="" _
    for _ in $(seq 60); do
        pw=$(sed -n 's/.*QUARRY_ADMIN_PASSWORD=\([A-Za-z0-9]*\).*/\1/p' "$WORK/serial.log" | tail -n1)
        [ -n "$pw" ] && break
        sleep 2
    done
    printf '%s\n' "$pw"
}

# Loader entry file names on the ESP of the (stopped) VM's disk, space-separated.
esp_entries() {
    qemu-img convert -O raw "$WORK/disk.qcow2" "$WORK/esp-read.raw"
    local start
    start=$(sfdisk -J "$WORK/esp-read.raw" | jq '.partitiontable.partitions[0].start')
    MTOOLS_SKIP_CHECK=1 mdir -b -i "$WORK/esp-read.raw@@$((start * 512))" ::/loader/entries/ 2>/dev/null \
        | xargs -r -n1 basename | tr '\n' ' '
    rm -f "$WORK/esp-read.raw"
}

# guest_journal [JOURNALCTL ARGS...]: the persistent journal of the (stopped) VM,
# read from its data partition (/var/lib/quarry/log) without booting it.
guest_journal() {
    local raw=$WORK/journal-read.raw start size
    qemu-img convert -O raw "$WORK/disk.qcow2" "$raw" || return 1
    start=$(sfdisk -J "$raw" | jq '.partitiontable.partitions[3].start')
    size=$(sfdisk -J "$raw" | jq '.partitiontable.partitions[3].size')
    dd if="$raw" of="$WORK/data-read.ext4" bs=512 skip="$start" count="$size" status=none
    rm -rf "$raw" "$WORK/guest-log"
    mkdir -p "$WORK/guest-log"
    debugfs -R "rdump /log/journal $WORK/guest-log" "$WORK/data-read.ext4" >/dev/null 2>&1
    rm -f "$WORK/data-read.ext4"
    journalctl --directory="$(dirname "$(find "$WORK/guest-log" -name '*.journal' | head -n1)")" \
        --no-pager "$@" 2>&1
}
