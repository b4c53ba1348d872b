# shellcheck shell=bash
# Shared host-side helpers for the guest lab (sourced by build.sh, run.sh and
# reference.sh; bash). Everything the lab needs from the host is named here so a
# fresh CI machine can be prepared with one call: `guest_ensure_host_prereqs`.

# Repository root and the cache directory (ignored by git through `/.cache`).
GUEST_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GUEST_REPO_ROOT="$(cd "$GUEST_DIR/../.." && pwd)"
GUEST_CACHE_ROOT="${GUEST_CACHE_ROOT:-$GUEST_REPO_ROOT/.cache/guest}"
# shellcheck source=dev/lib.sh
. "$GUEST_REPO_ROOT/dev/lib.sh"

# Host packages the lab needs, as "command:package" pairs: a missing command
# installs its package. Samba is only needed by the reference run (reference.sh).
GUEST_HOST_PREREQS=(
    "qemu-system-x86_64:qemu-system-x86"
    "busybox:busybox-static"
    "cpio:cpio"
    "depmod:kmod"
    "modprobe:kmod"
    "nvme:nvme-cli"
    "fio:fio"
    "mke2fs:e2fsprogs"
    "rdma:iproute2"
    "ldd:libc-bin"
    "ldconfig:libc-bin"
    "dpkg-deb:dpkg"
    "sha256sum:coreutils"
    "timeout:coreutils"
    "zstd:zstd"
    "flock:util-linux"
    "python3:python3-minimal"
)
GUEST_REFERENCE_PREREQS=(
    "smbd:samba"
    "smbpasswd:samba-common-bin"
)

guest_log() { printf '[guest-lab] %s\n' "$*" >&2; }
guest_die() { guest_log "error: $*"; exit 2; }

# Installs what the given "command:package" pairs name for missing commands
# (one apt-get update, only when something must be installed); dies if that fails.
guest_install_missing() {
    install_packages_for_commands "$@" || guest_die "installing host prerequisites failed"
}

# The one call CI makes on a fresh machine before anything else in the lab.
guest_ensure_host_prereqs() {
    guest_install_missing "${GUEST_HOST_PREREQS[@]}"
}

# Adds what the reference run against real peers (Samba) needs.
guest_ensure_reference_prereqs() {
    guest_ensure_host_prereqs
    guest_install_missing "${GUEST_REFERENCE_PREREQS[@]}"
}

# Name of the Debian kernel package: the one linux-image-amd64 depends on
# (override with GUEST_KERNEL_PKG). Runs apt-get update if the lists do not
# know linux-image-amd64 yet (fresh machine).
guest_kernel_pkg() {
    if [ -n "${GUEST_KERNEL_PKG:-}" ]; then
        echo "$GUEST_KERNEL_PKG"
        return
    fi
    local pkg
    pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')"
    if [ -z "$pkg" ]; then
        guest_log "apt lists do not know linux-image-amd64: apt-get update"
        apt-get update -qq >&2 || guest_die "apt-get update failed"
        pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')"
    fi
    [ -n "$pkg" ] || guest_die "cannot resolve the kernel package linux-image-amd64 depends on"
    echo "$pkg"
}

# --- private Samba smbd on a host loopback port (reference peer) ---

# Seconds to wait for smbd to listen.
GUEST_SMBD_START_SECS=20
GUEST_SMBD_PID=""
GUEST_SMBD_DIR=""
GUEST_SMBD_PORT=""

# A free TCP port on 127.0.0.1 (asks the kernel for one).
guest_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# guest_start_smbd SHARE USER PASS: starts smbd with its own smb.conf and
# state in a temp dir, listening only on 127.0.0.1:GUEST_SMBD_PORT, one
# writable share (GUEST_SMBD_DIR/share) for USER (a unix user, e.g. root).
# Sets GUEST_SMBD_PID, GUEST_SMBD_DIR, GUEST_SMBD_PORT; stop with
# guest_stop_smbd.
guest_start_smbd() {
    local share="$1" user="$2" pass="$3" d port i=0
    d="$(mktemp -d /tmp/guestlab-smbd.XXXXXX)"
    port="$(guest_free_port)"
    GUEST_SMBD_DIR="$d"
    GUEST_SMBD_PORT="$port"
    mkdir -p "$d"/{private,lock,state,cache,pid,ncalrpc,share}
    cat >"$d/smb.conf" <<CONF
[global]
    server role = standalone server
    smb ports = $port
    interfaces = 127.0.0.1
    bind interfaces only = yes
    private dir = $d/private
    lock directory = $d/lock
    state directory = $d/state
    cache directory = $d/cache
    pid directory = $d/pid
    ncalrpc dir = $d/ncalrpc
    passdb backend = tdbsam:$d/private/passdb.tdb
    log file = $d/log.%m
    load printers = no
    printcap name = /dev/null
    disable spoolss = yes
    server min protocol = SMB2_02
[$share]
    path = $d/share
    read only = no
    valid users = $user
CONF
    printf '%s\n%s\n' "$pass" "$pass" | smbpasswd -c "$d/smb.conf" -s -a "$user" >/dev/null ||
        guest_die "smbpasswd -a $user failed"
    # Own process group (no --no-process-group): smbd signals its whole group
    # when it stops, which would otherwise take the calling scripts with it.
    smbd -F -s "$d/smb.conf" -d 1 --debug-stdout >"$d/smbd.out" 2>&1 &
    GUEST_SMBD_PID=$!
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        i=$((i + 1))
        [ "$i" -lt $((GUEST_SMBD_START_SECS * 10)) ] || guest_die "smbd did not listen on $port: $(tail -n 5 "$d/smbd.out")"
        kill -0 "$GUEST_SMBD_PID" 2>/dev/null || guest_die "smbd exited: $(tail -n 5 "$d/smbd.out")"
        sleep 0.1
    done
    guest_log "smbd $(smbd -V) listening on 127.0.0.1:$port (pid $GUEST_SMBD_PID, dir $d)"
}

# Stops the smbd started by guest_start_smbd (by its pid) and removes its dir.
guest_stop_smbd() {
    if [ -n "$GUEST_SMBD_PID" ]; then
        kill "$GUEST_SMBD_PID" 2>/dev/null || true
        wait "$GUEST_SMBD_PID" 2>/dev/null || true
        GUEST_SMBD_PID=""
    fi
    if [ -n "$GUEST_SMBD_DIR" ]; then
        rm -rf "$GUEST_SMBD_DIR"
        GUEST_SMBD_DIR=""
    fi
}
