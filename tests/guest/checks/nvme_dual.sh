#!/bin/sh
# Check set "nvme_dual": one namespace reached over NVMe/TCP and NVMe/RDMA at
# the same time, both controllers live at once, and each path reads what the
# other wrote (raw block I/O, page cache dropped in between). Native NVMe
# multipath would merge the two paths into one block device, so the host
# modules are reloaded with nvme_core multipath=N first (nothing may be
# connected then: run it after the other NVMe sets have disconnected).
#
# Parameters:
#   NVME_NQN                           subsystem (namespace 1)        required
#   NVME_DUAL_TCP_ADDR / _TCP_PORT     default 10.0.2.15 / 4420
#   NVME_DUAL_RDMA_ADDR / _RDMA_PORT   default 10.0.2.15 / 4421
#   NVME_DUAL_MIB                      bytes each way (default 8)
#
#   NVME_DUAL_IDLE_MAX_PCT             idle_cpu limit: target CPU over 5 s
#                                      with both connected and idle (default 20)
#
# Also: the discovery log (asked over each transport) lists an entry of each
# transport, and an idle target (Quarry in the guest: /tmp/quarry.pid) does not
# burn a core polling its RDMA completion queues.
#
# Check names: nvme_dual.{modules,discovery_tcp,discovery_rdma,connect_tcp,
# connect_rdma,both_live,idle_cpu,tcp_to_rdma,rdma_to_tcp,disconnect}.
. /checks/common.sh

need nvme_dual NVME_NQN
TCP_ADDR="${NVME_DUAL_TCP_ADDR:-10.0.2.15}"
TCP_PORT="${NVME_DUAL_TCP_PORT:-4420}"
RDMA_ADDR="${NVME_DUAL_RDMA_ADDR:-10.0.2.15}"
RDMA_PORT="${NVME_DUAL_RDMA_PORT:-4421}"
MIB="${NVME_DUAL_MIB:-8}"
IDLE_MAX_PCT="${NVME_DUAL_IDLE_MAX_PCT:-20}"
HOSTNQN="$(guest_hostnqn)"

modules() {
    modprobe -r nvme_rdma nvme_tcp nvme_fabrics nvme_core 2>/dev/null
    modprobe nvme_core multipath=N || return 1
    modprobe -a nvme-tcp nvme-rdma crc32c_generic || return 1
    _mp="$(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null)"
    [ "$_mp" = N ] || { echo "nvme_core multipath=$_mp (modules still in use?)"; return 1; }
}

dev_of() { # TRANSPORT -> /dev/nvmeXn1 of the live controller for NVME_NQN
    for _d in /sys/class/nvme/nvme*; do
        [ -e "$_d/subsysnqn" ] || continue
        [ "$(cat "$_d/subsysnqn")" = "$NVME_NQN" ] || continue
        [ "$(cat "$_d/transport")" = "$1" ] || continue
        [ "$(cat "$_d/state")" = live ] || continue
        for _e in "$_d"/nvme*n1; do
            [ -e "$_e" ] && { echo "/dev/$(basename "$_e")"; return 0; }
        done
    done
    return 1
}

connect() { # TRANSPORT ADDR PORT
    nvme connect -t "$1" -a "$2" -s "$3" -n "$NVME_NQN" --hostnqn="$HOSTNQN" || return 1
    _i=0
    while [ "$_i" -lt 300 ]; do
        _dev="$(dev_of "$1")" && [ -b "$_dev" ] && { echo "$1 -> $_dev"; return 0; }
        sleep 0.1
        _i=$((_i + 1))
    done
    echo "no live $1 controller with namespace 1"
    return 1
}

DETAIL=""
both_live() {
    TDEV="$(dev_of tcp)" && RDEV="$(dev_of rdma)" || return 1
    DETAIL="tcp=$TDEV rdma=$RDEV"
    [ "$TDEV" != "$RDEV" ]
}

cross() { # FROM_DEV TO_DEV OFFSET_MIB
    _src=/tmp/dual.src
    head -c "$((MIB * 1048576))" /dev/urandom >"$_src"
    _want="$(sha256_of "$_src")"
    dd if="$_src" of="$1" bs=1M seek="$3" count="$MIB" conv=fsync 2>&1 || return 1
    sync
    echo 3 >/proc/sys/vm/drop_caches
    _got="$(dd if="$2" bs=1M skip="$3" count="$MIB" 2>/dev/null | sha256sum | cut -d' ' -f1)"
    rm -f "$_src"
    DETAIL="MiB=$MIB offset=${3}MiB"
    [ "$_got" = "$_want" ] || { echo "read $_got through $2, wrote $_want through $1"; return 1; }
}

disconnect() { nvme disconnect -n "$NVME_NQN"; }

discovery() { # TRANSPORT ADDR PORT: the log lists a tcp and an rdma entry for NVME_NQN
    _out="$(nvme discover -t "$1" -a "$2" -s "$3" --hostnqn="$HOSTNQN")" || return 1
    echo "$_out"
    _t="$(echo "$_out" | grep -c '^trtype: *tcp')"
    _r="$(echo "$_out" | grep -c '^trtype: *rdma')"
    DETAIL="tcp_entries=$_t rdma_entries=$_r"
    [ "$_t" -ge 1 ] && [ "$_r" -ge 1 ] || return 1
    echo "$_out" | grep -q "trsvcid: *$TCP_PORT" && echo "$_out" | grep -q "trsvcid: *$RDMA_PORT"
}

cpu_ticks() { # PID: utime + stime in clock ticks
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}
idle_cpu() {
    _pid="$(cat /tmp/quarry.pid 2>/dev/null)"
    [ -n "$_pid" ] && [ -e "/proc/$_pid/stat" ] || { DETAIL="no in-guest target (skipped)"; return 0; }
    _a="$(cpu_ticks "$_pid")"
    sleep 5
    _b="$(cpu_ticks "$_pid")"
    # 100 ticks a second: percent of one core over 5 s.
    _pct=$(((_b - _a) / 5))
    DETAIL="target_cpu=${_pct}% of a core over 5 s idle (limit $IDLE_MAX_PCT%)"
    [ "$_pct" -le "$IDLE_MAX_PCT" ]
}

detail_step() { # NAME FN ARGS...
    _n="$1"
    shift
    _t0="$(now)"
    DETAIL=""
    if "$@" >/tmp/dual.log 2>&1; then
        pass "$_n" "secs=$(since "$_t0") $DETAIL"
    else
        tail -n 20 /tmp/dual.log
        fail "$_n" "secs=$(since "$_t0") $DETAIL $(tail -n 2 /tmp/dual.log | tr '\n' '|')"
        return 1
    fi
}

run_step nvme_dual.modules modules || { finish_set; exit 1; }
detail_step nvme_dual.discovery_tcp discovery tcp "$TCP_ADDR" "$TCP_PORT"
detail_step nvme_dual.discovery_rdma discovery rdma "$RDMA_ADDR" "$RDMA_PORT"
run_step nvme_dual.connect_tcp connect tcp "$TCP_ADDR" "$TCP_PORT"
run_step nvme_dual.connect_rdma connect rdma "$RDMA_ADDR" "$RDMA_PORT"
if detail_step nvme_dual.both_live both_live; then
    detail_step nvme_dual.idle_cpu idle_cpu
    detail_step nvme_dual.tcp_to_rdma cross "$TDEV" "$RDEV" 1
    detail_step nvme_dual.rdma_to_tcp cross "$RDEV" "$TDEV" 16
fi
run_step nvme_dual.disconnect disconnect
finish_set
