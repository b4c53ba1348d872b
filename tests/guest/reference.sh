#!/usr/bin/env bash
# Reference run of the guest lab against real peers that exist today, proving
# the harness and the check scripts before they are pointed at Quarry:
#   cifs      -> a private Samba smbd on a host loopback port (10.0.2.2 from
#                the guest), mounted with vers=3.1.1,seal and vers=3.0
#   nvme_tcp  -> the Linux kernel's nvmet-tcp target set up inside the same
#                guest (nvmet_ref), plain and with header+data digests,
#                namespace hot-add and a refused host NQN
# One guest boot runs all of it. Exit status as run.sh (0 = all passed).
#
# Usage: tests/guest/reference.sh [--only cifs|nvme] [run.sh options...]
set -euo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REF_SMB_USER=root
REF_SMB_PASS="guestlab-$RANDOM$RANDOM"
REF_SMB_SHARE=lab
REF_NQN=nqn.2024-01.io.quarry:guestlab-ref
REF_DENIED_HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000dead
# Seconds to wait for smbd to listen.
REF_SMBD_START_SECS=20

only=""
if [ "${1:-}" = "--only" ]; then
    only="${2:?}"
    shift 2
fi

guest_ensure_reference_prereqs

smbd_pid=""
sdir=""
cleanup() {
    if [ -n "$smbd_pid" ]; then
        kill "$smbd_pid" 2>/dev/null || true
        wait "$smbd_pid" 2>/dev/null || true
    fi
    [ -n "$sdir" ] && rm -rf "$sdir"
}
trap cleanup EXIT

# A free TCP port on 127.0.0.1 (asks the kernel for one).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_smbd() {
    sdir="$(mktemp -d /tmp/guestlab-smbd.XXXXXX)"
    smb_port="$(free_port)"
    mkdir -p "$sdir"/{private,lock,state,cache,pid,ncalrpc,share}
    cat >"$sdir/smb.conf" <<EOF
[global]
    server role = standalone server
    smb ports = $smb_port
    interfaces = 127.0.0.1
    bind interfaces only = yes
    private dir = $sdir/private
    lock directory = $sdir/lock
    state directory = $sdir/state
    cache directory = $sdir/cache
    pid directory = $sdir/pid
    ncalrpc dir = $sdir/ncalrpc
    passdb backend = tdbsam:$sdir/private/passdb.tdb
    log file = $sdir/log.%m
    load printers = no
    printcap name = /dev/null
    disable spoolss = yes
    server min protocol = SMB2_02
[$REF_SMB_SHARE]
    path = $sdir/share
    read only = no
    valid users = $REF_SMB_USER
EOF
    printf '%s\n%s\n' "$REF_SMB_PASS" "$REF_SMB_PASS" |
        smbpasswd -c "$sdir/smb.conf" -s -a "$REF_SMB_USER" >/dev/null
    smbd -F --no-process-group -s "$sdir/smb.conf" -d 1 --debug-stdout >"$sdir/smbd.out" 2>&1 &
    smbd_pid=$!
    local i=0
    until (exec 3<>"/dev/tcp/127.0.0.1/$smb_port") 2>/dev/null; do
        i=$((i + 1))
        [ "$i" -lt $((REF_SMBD_START_SECS * 10)) ] || guest_die "smbd did not listen on $smb_port: $(tail -n 5 "$sdir/smbd.out")"
        kill -0 "$smbd_pid" 2>/dev/null || guest_die "smbd exited: $(tail -n 5 "$sdir/smbd.out")"
        sleep 0.1
    done
    guest_log "smbd $(smbd -V) listening on 127.0.0.1:$smb_port (pid $smbd_pid, dir $sdir)"
}

checks=()
args=()
if [ -z "$only" ] || [ "$only" = cifs ]; then
    start_smbd
    checks+=(cifs)
    args+=(--param SMB_ADDR=10.0.2.2 --param "SMB_PORT=$smb_port" --param "SMB_SHARE=$REF_SMB_SHARE"
        --param "SMB_USER=$REF_SMB_USER" --param "SMB_PASS=$REF_SMB_PASS"
        --param "SMB_MOUNTS=vers=3.1.1,seal vers=3.0")
fi
if [ -z "$only" ] || [ "$only" = nvme ]; then
    checks+=(nvmet_ref nvme_tcp)
    args+=(--param NVME_ADDR=127.0.0.1 --param NVME_PORT=4420 --param "NVME_NQN=$REF_NQN"
        --param "NVME_NS_ADD_CMD=sh /checks/nvmet_ref.sh add-ns 2"
        --param "NVME_DENIED_HOSTNQN=$REF_DENIED_HOSTNQN")
fi
[ "${#checks[@]}" -gt 0 ] || guest_die "--only takes cifs or nvme"

set +e
"$GUEST_DIR/run.sh" --checks "$(IFS=,; echo "${checks[*]}")" "${args[@]}" "$@"
rc=$?
set -e

if [ -n "$sdir" ]; then
    # The guest cleaned up after itself: the share must be empty again.
    left="$(find "$sdir/share" -mindepth 1 | head -n 5)"
    if [ -n "$left" ]; then
        echo "GUEST-CHECK host.share_empty FAIL left behind: $(echo "$left" | tr '\n' ' ')"
        [ "$rc" -eq 0 ] && rc=1
    else
        echo "GUEST-CHECK host.share_empty PASS"
    fi
fi
exit "$rc"
