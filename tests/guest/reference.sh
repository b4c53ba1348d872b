#!/usr/bin/env bash
# Reference run of the guest lab against real peers that exist today, proving
# the harness and the check scripts before they are pointed at Quarry:
#   cifs      -> a private Samba smbd on a host loopback port (10.0.2.2 from
#                the guest), mounted with vers=3.1.1,seal and vers=3.0; df in
#                the guest must equal the share file system's size on the host
#   nvme_tcp  -> the Linux kernel's nvmet-tcp target set up inside the same
#                guest (nvmet_ref), plain and with header+data digests,
#                namespace hot-add and a refused host NQN
#   nvme_rdma -> (with --with-rdma or --only rdma) Soft-RoCE in the guest and
#                the kernel's nvmet-rdma target, through nvme-rdma
# One guest boot runs all of it. Exit status as run.sh (0 = all passed).
#
# Usage: tests/guest/reference.sh [--only cifs|nvme|rdma] [--with-rdma] [run.sh options...]
set -euo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REF_SMB_USER=root
REF_SMB_PASS="guestlab-$RANDOM$RANDOM"
REF_SMB_SHARE=lab
REF_NQN=nqn.2024-01.io.quarry:guestlab-ref
REF_DENIED_HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000dead

only=""
with_rdma=0
passthrough=()
while [ $# -gt 0 ]; do
    case "$1" in
    --only) only="${2:?}"; shift 2 ;;
    --with-rdma) with_rdma=1; shift ;;
    *) passthrough+=("$1"); shift ;;
    esac
done
if [ "$only" = rdma ]; then with_rdma=1; fi

guest_ensure_reference_prereqs

trap guest_stop_smbd EXIT

checks=()
args=()
if [ -z "$only" ] || [ "$only" = cifs ]; then
    guest_start_smbd "$REF_SMB_SHARE" "$REF_SMB_USER" "$REF_SMB_PASS"
    smb_port="$GUEST_SMBD_PORT"
    sdir="$GUEST_SMBD_DIR"
    checks+=(cifs)
    args+=(--param SMB_ADDR=10.0.2.2 --param "SMB_PORT=$smb_port" --param "SMB_SHARE=$REF_SMB_SHARE"
        --param "SMB_USER=$REF_SMB_USER" --param "SMB_PASS=$REF_SMB_PASS"
        --param "SMB_MOUNTS=vers=3.1.1,seal vers=3.0"
        --param "SMB_EXPECT_SIZE_KIB=$(df -k --output=size "$sdir/share" | tail -n 1 | tr -d ' ')")
fi
if [ -z "$only" ] || [ "$only" = nvme ] || [ "$only" = rdma ]; then
    checks+=(nvmet_ref)
    [ "$only" = rdma ] || checks+=(nvme_tcp)
    args+=(--param NVME_ADDR=127.0.0.1 --param NVME_PORT=4420 --param "NVME_NQN=$REF_NQN"
        --param "NVME_NS_ADD_CMD=sh /checks/nvmet_ref.sh add-ns 2"
        --param "NVME_DENIED_HOSTNQN=$REF_DENIED_HOSTNQN")
    if [ "$with_rdma" -eq 1 ]; then checks+=(rdma_ref nvme_rdma); fi
fi
[ "${#checks[@]}" -gt 0 ] || guest_die "--only takes cifs, nvme or rdma"

set +e
"$GUEST_DIR/run.sh" --checks "$(IFS=,; echo "${checks[*]}")" "${args[@]}" "${passthrough[@]+"${passthrough[@]}"}"
rc=$?
set -e

if [ -n "${sdir:-}" ]; then
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
