#!/bin/sh
# Check set "nvmet_ref": sets up the Linux kernel's own NVMe/TCP target (nvmet)
# inside the guest, as the reference peer the nvme_tcp set is proven against
# before it is pointed at Quarry. Run it before nvme_tcp with NVME_ADDR set to
# the same address (127.0.0.1 = inside the guest).
#
# Parameters:
#   NVME_NQN            subsystem NQN                                   required
#   NVME_PORT           TCP port (default 4420)
#   NVMET_ADDR          address to listen on (default 127.0.0.1)
#   NVMET_SIZE_MIB      namespace size; a file on tmpfs (default 256)
#   NVME_HOSTNQN        if set (or once the guest host NQN exists), only that
#                       host is allowed; NVMET_ALLOW_ANY=1 allows any host
#
# Also callable as `sh /checks/nvmet_ref.sh add-ns NSID` to add and enable one
# more namespace (NVME_NS_ADD_CMD of nvme_tcp uses this to test hot-add).
. /checks/common.sh

NVME_PORT="${NVME_PORT:-4420}"
NVMET_ADDR="${NVMET_ADDR:-127.0.0.1}"
NVMET_SIZE_MIB="${NVMET_SIZE_MIB:-256}"
CFG=/sys/kernel/config/nvmet
BACKING=/tmp/nvmet

add_ns() { # NSID
    _ns="$CFG/subsystems/$NVME_NQN/namespaces/$1"
    truncate -s "${NVMET_SIZE_MIB}M" "$BACKING/ns$1.img" &&
        mkdir "$_ns" &&
        echo -n "$BACKING/ns$1.img" >"$_ns/device_path" &&
        echo 1 >"$_ns/buffered_io" &&
        echo 1 >"$_ns/enable"
}

if [ "${1:-}" = "add-ns" ]; then
    add_ns "${2:?nsid}"
    exit $?
fi

need nvmet_ref NVME_NQN

setup() {
    modprobe -a nvmet nvmet-tcp || return 1
    grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs none /sys/kernel/config || return 1
    mkdir -p "$BACKING"
    mkdir "$CFG/subsystems/$NVME_NQN" || return 1
    if [ "${NVMET_ALLOW_ANY:-0}" = 1 ]; then
        echo 1 >"$CFG/subsystems/$NVME_NQN/attr_allow_any_host"
    else
        _host="$(guest_hostnqn)"
        echo 0 >"$CFG/subsystems/$NVME_NQN/attr_allow_any_host"
        mkdir "$CFG/hosts/$_host" || return 1
        ln -s "$CFG/hosts/$_host" "$CFG/subsystems/$NVME_NQN/allowed_hosts/$_host" || return 1
    fi
    add_ns 1 || return 1
    mkdir "$CFG/ports/1" &&
        echo tcp >"$CFG/ports/1/addr_trtype" &&
        echo ipv4 >"$CFG/ports/1/addr_adrfam" &&
        echo "$NVMET_ADDR" >"$CFG/ports/1/addr_traddr" &&
        echo "$NVME_PORT" >"$CFG/ports/1/addr_trsvcid" &&
        ln -s "$CFG/subsystems/$NVME_NQN" "$CFG/ports/1/subsystems/$NVME_NQN"
}

run_step nvmet_ref.setup setup
finish_set
