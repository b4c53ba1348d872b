#!/bin/sh
# Check set "rdma_ref": Soft-RoCE (rdma_rxe) on eth0 inside the guest, and an
# NVMe/RDMA port of the in-guest kernel target on it (run after nvmet_ref).
# Prepares the later NVMe/RDMA work; SMB Direct cannot be tested with Debian's
# kernels (CONFIG_CIFS_SMB_DIRECT is not set).
#
# Parameters:
#   NVME_NQN          subsystem created by nvmet_ref                     required
#   NVME_RDMA_PORT    RDMA service id of the nvmet port (default 4421)
#
# Check names: rdma_ref.rxe (rdma link add + ACTIVE), rdma_ref.nvmet_port.
. /checks/common.sh

need rdma_ref NVME_NQN
NVME_RDMA_PORT="${NVME_RDMA_PORT:-4421}"
CFG=/sys/kernel/config/nvmet
GUEST_IP=10.0.2.15

rxe() {
    # crc32_generic is not in modules.dep for rdma_rxe: load it explicitly.
    modprobe -a crc32_generic rdma_rxe ib_uverbs rdma_ucm || return 1
    rdma link add rxe0 type rxe netdev eth0 || return 1
    _i=0
    while [ "$_i" -lt 50 ]; do
        rdma link show rxe0/1 | grep -q 'state ACTIVE' && { rdma link show; return 0; }
        sleep 0.1
        _i=$((_i + 1))
    done
    rdma link show
    return 1
}

nvmet_port() {
    modprobe -a nvmet-rdma nvme-rdma || return 1
    [ -d "$CFG/subsystems/$NVME_NQN" ] || { echo "no subsystem $NVME_NQN (run nvmet_ref first)"; return 1; }
    mkdir "$CFG/ports/2" &&
        echo rdma >"$CFG/ports/2/addr_trtype" &&
        echo ipv4 >"$CFG/ports/2/addr_adrfam" &&
        echo "$GUEST_IP" >"$CFG/ports/2/addr_traddr" &&
        echo "$NVME_RDMA_PORT" >"$CFG/ports/2/addr_trsvcid" &&
        ln -s "$CFG/subsystems/$NVME_NQN" "$CFG/ports/2/subsystems/$NVME_NQN"
}

run_step rdma_ref.rxe rxe && run_step rdma_ref.nvmet_port nvmet_port
finish_set
