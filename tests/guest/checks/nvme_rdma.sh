#!/bin/sh
# Check set "nvme_rdma": the nvme_tcp checks over NVMe/RDMA (kernel nvme-rdma
# on Soft-RoCE), without digests (TCP-only), hot-add or denied-host steps
# unless their NVME_RDMA_* parameters are given.
#
# Parameters: as nvme_tcp, with these instead of the TCP ones:
#   NVME_RDMA_ADDR   target address (default 10.0.2.15: the guest's own rxe0)
#   NVME_RDMA_PORT   target service id (default 4421)
#   NVME_RDMA_NS_ADD_CMD, NVME_RDMA_DENIED_HOSTNQN  optional, as in nvme_tcp
#   NVME_RDMA_FIO_4K_MIB (default 8), NVME_RDMA_FIO_128K_MIB (default 32)
#   NVME_RDMA_FIO_128K_RW  fio --rw of the 128k job (default randwrite; write = sequential)
#   NVME_RDMA_FIO_REVERIFY 1: after the 128k job, disconnect, reconnect and verify
#                          its data again (fio --verify_only): nvme_rdma.plain.fio_reverify
# Check names: nvme_rdma.* (same steps as nvme_tcp.plain.*).
NVME_TRANSPORT=rdma
NVME_ADDR="${NVME_RDMA_ADDR:-10.0.2.15}"
NVME_PORT="${NVME_RDMA_PORT:-4421}"
NVME_DISC_PORT="$NVME_PORT"
NVME_DIGEST_MODES=plain
NVME_NS_ADD_CMD="${NVME_RDMA_NS_ADD_CMD:-}"
NVME_DENIED_HOSTNQN="${NVME_RDMA_DENIED_HOSTNQN:-}"
NVME_FIO_4K_MIB="${NVME_RDMA_FIO_4K_MIB:-8}"
NVME_FIO_128K_MIB="${NVME_RDMA_FIO_128K_MIB:-32}"
NVME_FIO_128K_RW="${NVME_RDMA_FIO_128K_RW:-randwrite}"
NVME_FIO_REVERIFY="${NVME_RDMA_FIO_REVERIFY:-0}"
. /checks/nvme_tcp.sh
