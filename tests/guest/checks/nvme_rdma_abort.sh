#!/bin/sh
# Check set "nvme_rdma_abort": a host that goes away mid-transfer. fio writes
# 128k blocks over NVMe/RDMA while the host deletes its controller
# (/sys/class/nvme/CTRL/delete_controller: queues torn down with RDMA READs and
# WRITEs in flight). The in-guest Quarry (quarry_target) must release every
# registration of those queue pairs (its log's registered_bytes_in_use back to 0),
# keep running, and serve a new connection with verified data.
#
# Parameters:
#   NVME_NQN                          required
#   NVME_RDMA_ADDR / NVME_RDMA_PORT   default 10.0.2.15 / 4421
#
# Check names: nvme_rdma_abort.{connect,abort,released,alive,reconnect,fio_after,
# disconnect}.
. /checks/common.sh

need nvme_rdma_abort NVME_NQN
ADDR="${NVME_RDMA_ADDR:-10.0.2.15}"
PORT="${NVME_RDMA_PORT:-4421}"
HOSTNQN="$(guest_hostnqn)"
QUARRY_LOG_FILE=/tmp/quarry.log

ctrl() {
    for _d in /sys/class/nvme/nvme*; do
        [ -e "$_d/subsysnqn" ] || continue
        [ "$(cat "$_d/subsysnqn")" = "$NVME_NQN" ] && [ "$(cat "$_d/transport")" = rdma ] &&
            [ "$(cat "$_d/state")" = live ] && { basename "$_d"; return 0; }
    done
    return 1
}
dev() {
    for _e in /sys/class/nvme/"$1"/nvme*n1; do
        [ -e "$_e" ] && { echo "/dev/$(basename "$_e" | sed 's/c[0-9]*n/n/')"; return 0; }
    done
    return 1
}

connect() {
    modprobe -a nvme-rdma || return 1
    nvme connect -t rdma -a "$ADDR" -s "$PORT" -n "$NVME_NQN" --hostnqn="$HOSTNQN" || return 1
    _i=0
    while [ "$_i" -lt 300 ]; do
        _c="$(ctrl)" && _d="$(dev "$_c")" && [ -b "$_d" ] && return 0
        sleep 0.1
        _i=$((_i + 1))
    done
    return 1
}

abort() {
    _c="$(ctrl)" && _d="$(dev "$_c")" || return 1
    fio --name=abort --filename="$_d" --direct=1 --ioengine=libaio --iodepth=32 \
        --rw=write --bs=128k --size=256m >/tmp/abort-fio.log 2>&1 &
    _fio=$!
    sleep 2
    kill -0 "$_fio" 2>/dev/null || { echo "fio ended before the abort"; cat /tmp/abort-fio.log; return 1; }
    echo 1 >"/sys/class/nvme/$_c/delete_controller" || return 1
    wait "$_fio"
    # The controller is gone from the host.
    ! ctrl >/dev/null
}

DETAIL=""
released() {
    _i=0
    while [ "$_i" -lt 100 ]; do
        _last="$(grep 'NVMe/RDMA queue pair released' "$QUARRY_LOG_FILE" | tail -n 1 |
            sed -n 's/.*registered_bytes_in_use=\([0-9]*\).*/\1/p')"
        DETAIL="registered_bytes_in_use=$_last"
        [ "$_last" = 0 ] && return 0
        sleep 0.1
        _i=$((_i + 1))
    done
    grep 'NVMe/RDMA queue' "$QUARRY_LOG_FILE" | tail -n 10
    return 1
}

alive() { kill -0 "$(cat /tmp/quarry.pid)"; }

fio_after() {
    _d="$(dev "$(ctrl)")" || return 1
    fio --name=after --filename="$_d" --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite \
        --bs=4k --size=4m --verify=crc32c --do_verify=1 --verify_fatal=1 --exitall_on_error=1
}

disconnect() { nvme disconnect -n "$NVME_NQN"; }

run_step nvme_rdma_abort.connect connect || { finish_set; exit 1; }
run_step nvme_rdma_abort.abort abort
t0="$(now)"
if released >/tmp/rel.log 2>&1; then pass nvme_rdma_abort.released "secs=$(since "$t0") $DETAIL"; else cat /tmp/rel.log; fail nvme_rdma_abort.released "$DETAIL"; fi
run_step nvme_rdma_abort.alive alive
run_step nvme_rdma_abort.reconnect connect && run_step nvme_rdma_abort.fio_after fio_after
run_step nvme_rdma_abort.disconnect disconnect
finish_set
