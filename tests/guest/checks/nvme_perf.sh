#!/bin/sh
# Check set "nvme_perf": an on-demand benchmark, not part of the test suite
# (tests/guest/nvme_bench.sh runs it). In one boot it measures Quarry running in
# the guest (started by quarry_target, which must run first) against the kernel's
# own nvmet target set up here, with the same initiator (the guest kernel's
# nvme-tcp / nvme-rdma + fio, libaio, direct=1, default I/O queue count), the same
# backing kind and size (a fully written file: Quarry's volume file, nvmet's file
# namespace, side by side on the guest's tmpfs, where nvmet runs buffered_io=1, or on
# the ram_backing set's ext4 on a RAM disk, where both go O_DIRECT) and the same
# address (10.0.2.15).
# Targets run one after the other, per workload: connect, fio warm-up, measured fio
# run, disconnect; Quarry first, then nvmet.
#
# Server CPU, the same method for both targets: busy CPU of the whole guest from
# /proc/stat over the fio run minus fio's own CPU (utime+stime of fio and its job
# processes, as the cutime/cstime of the shell that waited for it), and for the
# nvmet runs minus the idle Quarry process's CPU over that run. Also recorded: the
# same with the scheduler's runtime of all tasks (/proc/schedstat rq_cpu_time)
# instead of /proc/stat's tick samples, which under TCG can miss ticks (a descheduled
# vCPU thread) while utime+stime of fio and Quarry are scheduler runtime. That figure also
# holds the initiator's kernel work (nvme-tcp io_work, loopback softirq), the same
# for both targets. Quarry's own utime+stime from /proc/<pid>/stat is recorded as a
# cross-check.
#
# Parameters:
#   NVME_NQN               Quarry's subsystem (created by quarry_target)   required
#   BENCH_SECONDS          measured seconds per run (default 10)
#   BENCH_WARMUP           unmeasured fio seconds before each run (default 2)
#   BENCH_SIZE_MIB         size of both namespaces (default 256; give quarry_target
#                          QUARRY_VOL_MIB of the same size)
#   BENCH_ADDR             address of both targets (default 10.0.2.15)
#   QUARRY_TCP_PORT        Quarry's NVMe/TCP port (default 4420)
#   QUARRY_RDMA_PORT       Quarry's NVMe/RDMA port (default 4421)
#   QUARRY_DATA            Quarry's data directory (default /tmp/quarry)
#   BENCH_NVMET_NQN        nvmet's subsystem (default nqn.2026-11.io.quarry:bench-nvmet)
#   BENCH_NVMET_TCP_PORT / BENCH_NVMET_RDMA_PORT   default 4430 / 4431
#   BENCH_NVMET_BACKING    nvmet's file (default /tmp/bench-nvmet/ns1.img, on tmpfs;
#                          beneath the ram_backing mount to share Quarry's file system)
#   BENCH_NVMET_BUFFERED   nvmet's buffered_io (default 1: tmpfs has no O_DIRECT; 0 on
#                          a file system that has it, nvmet's own default)
#   BENCH_BACKING          what the table calls the backing (default tmpfs)
#   BENCH_RDMA             1 (default): also the NVMe/RDMA phase on Soft-RoCE
#   BENCH_QD32_JOBS        fio jobs of the QD32 workload (default 2: 2 jobs x QD16)
#   BENCH_SEQ_QD           queue depth of the 128k sequential read (default 8, 1 job)
#   BENCH_TCP_WORKLOADS    default "4k_qd1 4k_qd32 128k_seq"
#   BENCH_RDMA_WORKLOADS   default "4k_qd32 128k_seq"
#   BENCH_PROFILE          workloads whose measured runs perf records, all vCPUs,
#                          both targets (default none; needs perf in the guest:
#                          nvme_bench.sh --profile packs it)
#
# Output: GUEST-CHECK nvme_perf.<phase>.<workload>.<target> lines (PASS = the run
# completed I/O), and on ttyS1 only, for nvme_bench.sh: one `BENCH-RESULT k=v...`
# line per run, `BENCH-IDLE`, `BENCH-JSON <tag> <base64>` lines carrying each
# fio JSON (gzip'd), and for profiled runs `BENCH-PERF <tag> <report|script> <base64>`
# lines carrying perf's report and its samples with their stacks (gzip'd).
#
# Check names: nvme_perf.{modules,rxe,quarry_backing,nvmet,nvmet_rdma_port,idle},
# nvme_perf.<tcp|rdma>.<workload>.<quarry|nvmet>.
. /checks/common.sh

need nvme_perf NVME_NQN
BENCH_SECONDS="${BENCH_SECONDS:-10}"
BENCH_WARMUP="${BENCH_WARMUP:-2}"
BENCH_SIZE_MIB="${BENCH_SIZE_MIB:-256}"
BENCH_ADDR="${BENCH_ADDR:-10.0.2.15}"
QUARRY_TCP_PORT="${QUARRY_TCP_PORT:-4420}"
QUARRY_RDMA_PORT="${QUARRY_RDMA_PORT:-4421}"
QUARRY_DATA="${QUARRY_DATA:-/tmp/quarry}"
BENCH_NVMET_NQN="${BENCH_NVMET_NQN:-nqn.2026-11.io.quarry:bench-nvmet}"
BENCH_NVMET_TCP_PORT="${BENCH_NVMET_TCP_PORT:-4430}"
BENCH_NVMET_RDMA_PORT="${BENCH_NVMET_RDMA_PORT:-4431}"
BENCH_RDMA="${BENCH_RDMA:-1}"
BENCH_QD32_JOBS="${BENCH_QD32_JOBS:-2}"
BENCH_SEQ_QD="${BENCH_SEQ_QD:-8}"
BENCH_TCP_WORKLOADS="${BENCH_TCP_WORKLOADS:-4k_qd1 4k_qd32 128k_seq}"
BENCH_RDMA_WORKLOADS="${BENCH_RDMA_WORKLOADS:-4k_qd32 128k_seq}"
BENCH_PROFILE="${BENCH_PROFILE:-}"
CFG=/sys/kernel/config/nvmet
NVMET_BACKING="${BENCH_NVMET_BACKING:-/tmp/bench-nvmet/ns1.img}"
NVMET_BUFFERED="${BENCH_NVMET_BUFFERED:-1}"
BENCH_BACKING="${BENCH_BACKING:-tmpfs}"
WORK=/tmp/bench
HOSTNQN="$(guest_hostnqn)"
QPID="$(cat /tmp/quarry.pid 2>/dev/null)"
mkdir -p "$WORK" "$(dirname "$NVMET_BACKING")"

# A line for nvme_bench.sh: console and the results channel.
emit() {
    echo "$*"
    echo "$*" >"$GUEST_RESULTS_TTY"
}

# --- CPU counters (shell builtins only: nothing forks inside a measured window) ---
BUSY=0
TOTAL=0
SCHED=0
busy_ticks() {
    # /proc/stat, all CPUs: busy = user nice system irq softirq steal (not idle,
    # iowait); total = all of them (under TCG the guest can lose timer ticks).
    read -r _c _u _n _s _i _w _q _sq _st _rest </proc/stat
    BUSY=$((_u + _n + _s + _q + _sq + _st))
    TOTAL=$((BUSY + _i + _w))
    # /proc/schedstat: rq_cpu_time (ns) of every CPU, the scheduler's runtime of
    # all non-idle tasks: the same clock as fio's and Quarry's utime+stime.
    SCHED=0
    [ -r /proc/schedstat ] || return 0
    while read -r _a _b _c _d _e _f _g _h _rest; do
        case "$_a" in cpu[0-9]*) SCHED=$((SCHED + _h)) ;; esac
    done </proc/schedstat
}
QTICKS=0
quarry_ticks() { # utime + stime of the Quarry process (all its threads)
    QTICKS=0
    [ -n "$QPID" ] && [ -r "/proc/$QPID/stat" ] || return 0
    read -r _l <"/proc/$QPID/stat"
    # shellcheck disable=SC2086
    set -- $_l
    QTICKS=$((${14} + ${15}))
}

# --- setup ---
modules() {
    modprobe -a nvme-tcp nvme-fabrics nvme-core nvmet nvmet-tcp crc32c_generic
}

# Soft-RoCE (quarry_target sets it up already when it adds its RDMA listener)
# and the NVMe/RDMA modules of both sides.
rxe() {
    modprobe -a nvme-rdma nvmet-rdma || return 1
    rdma link show rxe0/1 2>/dev/null | grep -q 'state ACTIVE' && return 0
    # crc32_generic is not in modules.dep for rdma_rxe: load it explicitly.
    modprobe -a crc32_generic rdma_rxe ib_uverbs rdma_ucm || return 1
    rdma link add rxe0 type rxe netdev eth0 || return 1
    _i=0
    while [ "$_i" -lt 50 ]; do
        rdma link show rxe0/1 | grep -q 'state ACTIVE' && return 0
        sleep 0.1
        _i=$((_i + 1))
    done
    rdma link show
    return 1
}

# Quarry's volume file: must be BENCH_SIZE_MIB, then written through once so
# every page exists on tmpfs (as nvmet's file below).
quarry_backing() {
    [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null || { echo "Quarry is not running (run quarry_target first)"; return 1; }
    _f="$(find "$QUARRY_DATA" -name '*.vol' | head -n 1)"
    [ -n "$_f" ] || { echo "no volume file under $QUARRY_DATA"; return 1; }
    _sz="$(stat -c %s "$_f")"
    [ "$_sz" = $((BENCH_SIZE_MIB * 1048576)) ] ||
        { echo "$_f is $_sz bytes, want $BENCH_SIZE_MIB MiB (QUARRY_VOL_MIB=$BENCH_SIZE_MIB)"; return 1; }
    dd if=/dev/zero of="$_f" bs=1M count="$BENCH_SIZE_MIB" conv=notrunc,fsync 2>&1
}

nvmet() {
    grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs none /sys/kernel/config || return 1
    _s="$CFG/subsystems/$BENCH_NVMET_NQN"
    mkdir "$_s" || return 1
    echo 0 >"$_s/attr_allow_any_host"
    [ -d "$CFG/hosts/$HOSTNQN" ] || mkdir "$CFG/hosts/$HOSTNQN" || return 1
    ln -s "$CFG/hosts/$HOSTNQN" "$_s/allowed_hosts/$HOSTNQN" || return 1
    truncate -s "${BENCH_SIZE_MIB}M" "$NVMET_BACKING" &&
        dd if=/dev/zero of="$NVMET_BACKING" bs=1M count="$BENCH_SIZE_MIB" conv=notrunc,fsync 2>&1 &&
        mkdir "$_s/namespaces/1" &&
        echo -n "$NVMET_BACKING" >"$_s/namespaces/1/device_path" &&
        echo "$NVMET_BUFFERED" >"$_s/namespaces/1/buffered_io" &&
        echo 1 >"$_s/namespaces/1/enable" || return 1
    mkdir "$CFG/ports/41" &&
        echo tcp >"$CFG/ports/41/addr_trtype" &&
        echo ipv4 >"$CFG/ports/41/addr_adrfam" &&
        echo "$BENCH_ADDR" >"$CFG/ports/41/addr_traddr" &&
        echo "$BENCH_NVMET_TCP_PORT" >"$CFG/ports/41/addr_trsvcid" &&
        ln -s "$_s" "$CFG/ports/41/subsystems/$BENCH_NVMET_NQN" || return 1
    # The fills went through the page cache; neither target reads it on an O_DIRECT
    # backing, so give its memory back before anything is measured.
    sync && echo 3 >/proc/sys/vm/drop_caches
}
nvmet_rdma_port() {
    mkdir "$CFG/ports/42" &&
        echo rdma >"$CFG/ports/42/addr_trtype" &&
        echo ipv4 >"$CFG/ports/42/addr_adrfam" &&
        echo "$BENCH_ADDR" >"$CFG/ports/42/addr_traddr" &&
        echo "$BENCH_NVMET_RDMA_PORT" >"$CFG/ports/42/addr_trsvcid" &&
        ln -s "$CFG/subsystems/$BENCH_NVMET_NQN" "$CFG/ports/42/subsystems/$BENCH_NVMET_NQN"
}

# Guest background over 3 s with Quarry idle and nothing connected.
IDLE_DETAIL=""
idle() {
    _t0="$(now)"
    busy_ticks; _b0=$BUSY; quarry_ticks; _q0=$QTICKS
    sleep 3
    busy_ticks; _b1=$BUSY; quarry_ticks; _q1=$QTICKS
    _secs="$(since "$_t0")"
    IDLE_DETAIL="secs=$_secs busy_ticks=$((_b1 - _b0)) quarry_ticks=$((_q1 - _q0))"
    emit "BENCH-IDLE $IDLE_DETAIL"
}

# --- connections (as nvme_tcp.sh: controller by NQN + transport, its namespace 1) ---
find_ctrl() { # NQN TRANSPORT
    for _d in /sys/class/nvme/nvme*; do
        [ -e "$_d/subsysnqn" ] || continue
        [ "$(cat "$_d/subsysnqn")" = "$1" ] || continue
        [ "$(cat "$_d/transport")" = "$2" ] || continue
        basename "$_d"
        return 0
    done
    return 1
}
ns1_dev() { # CTRL: block device of namespace 1 (multipath head or plain)
    for _e in /sys/class/nvme/"$1"/nvme*; do
        _b="$(basename "$_e")"
        case "$_b" in
        *c*n1) echo "/dev/$(echo "$_b" | sed 's/c[0-9]*n/n/')"; return 0 ;;
        *n1) echo "/dev/$_b"; return 0 ;;
        esac
    done
    return 1
}
CTRL=""
DEV=""
connect() { # TRANSPORT PORT NQN: sets CTRL, DEV
    nvme connect -t "$1" -a "$BENCH_ADDR" -s "$2" -n "$3" --hostnqn="$HOSTNQN" || return 1
    _i=0
    while [ "$_i" -lt 300 ]; do
        CTRL="$(find_ctrl "$3" "$1")"
        if [ -n "$CTRL" ] && [ "$(cat "/sys/class/nvme/$CTRL/state")" = live ]; then
            DEV="$(ns1_dev "$CTRL")"
            [ -n "$DEV" ] && [ -b "$DEV" ] && return 0
        fi
        sleep 0.1
        _i=$((_i + 1))
    done
    echo "no live $1 controller of $3 with namespace 1"
    return 1
}
disconnect() { # NQN TRANSPORT
    nvme disconnect -n "$1" >/dev/null || return 1
    _i=0
    while find_ctrl "$1" "$2" >/dev/null && [ "$_i" -lt 100 ]; do
        sleep 0.1
        _i=$((_i + 1))
    done
    ! find_ctrl "$1" "$2" >/dev/null
}

# --- workloads ---
wl_args() {
    case "$1" in
    4k_qd1) echo "--rw=randread --bs=4k --iodepth=1 --numjobs=1" ;;
    4k_qd32) echo "--rw=randread --bs=4k --iodepth=$((32 / BENCH_QD32_JOBS)) --numjobs=$BENCH_QD32_JOBS" ;;
    128k_seq) echo "--rw=read --bs=128k --iodepth=$BENCH_SEQ_QD --numjobs=1" ;;
    *) return 1 ;;
    esac
}
fio_cmd() { # DEV WORKLOAD SECONDS OUTPUT
    # shellcheck disable=SC2046
    echo fio --name=bench --filename="$1" --direct=1 --ioengine=libaio $(wl_args "$2") \
        --group_reporting --time_based --runtime="$3" --randrepeat=0 --norandommap --lat_percentiles=1 \
        --output-format=json --output="$4"
}

# The read section of fio's JSON (one job with group_reporting), as k=v:
# p50/p99 of the total latency (submission to completion, lat_ns: with nvme-tcp
# much of an I/O can complete inside io_submit, which clat leaves out) and of clat.
fio_fields() { # JSON
    awk '
        /^ *"read" : \{/ { sec = "read"; next }
        /^ *"(write|trim|sync)" : \{/ { sec = "other"; next }
        /^ *"slat_ns" : \{/ { blk = "slat" }
        /^ *"clat_ns" : \{/ { blk = "clat" }
        /^ *"lat_ns" : \{/ { blk = "lat" }
        { gsub(/[",]/, "") }
        $2 != ":" { next }
        sec == "read" && $1 == "iops" && iops == "" { iops = $3 }
        sec == "read" && $1 == "bw_bytes" && bw == "" { bw = $3 }
        sec == "read" && $1 == "total_ios" && ios == "" { ios = $3 }
        sec == "read" && $1 == "runtime" && rt == "" { rt = $3 }
        sec == "read" && blk == "lat" && $1 == "50.000000" && p50 == "" { p50 = $3 }
        sec == "read" && blk == "lat" && $1 == "99.000000" && p99 == "" { p99 = $3 }
        sec == "read" && blk == "clat" && $1 == "50.000000" && c50 == "" { c50 = $3 }
        sec == "read" && blk == "clat" && $1 == "99.000000" && c99 == "" { c99 = $3 }
        $1 == "job_runtime" && jrt == "" { jrt = $3 }
        $1 == "usr_cpu" && usr == "" { usr = $3 }
        $1 == "sys_cpu" && sys == "" { sys = $3 }
        END { printf "iops=%s bw_bytes=%s ios=%s runtime_ms=%s p50_ns=%s p99_ns=%s clat_p50_ns=%s clat_p99_ns=%s job_runtime_ms=%s fio_usr_pct=%s fio_sys_pct=%s\n",
            iops, bw, ios, rt, p50, p99, c50, c99, jrt, usr, sys }' "$1"
}

# Profiling (BENCH_PROFILE): perf samples all vCPUs for the measured window. It is
# started before the window's first counter reading, so the window itself forks
# nothing more, but perf's own CPU is in the run's busy time.
PERF_PID=""
profile_start() { # WORKLOAD TAG
    PERF_PID=""
    case " $BENCH_PROFILE " in *" $1 "*) ;; *) return 0 ;; esac
    command -v perf >/dev/null || { echo "BENCH_PROFILE: no perf in the guest"; return 0; }
    perf record -a -g -e cpu-clock -F 499 -o "$WORK/$2.perf" -- sleep "$BENCH_SECONDS" \
        >"$WORK/$2.perf.log" 2>&1 &
    PERF_PID=$!
    sleep 0.5 # perf's start-up, outside the window
}
profile_finish() { # TAG
    [ -n "$PERF_PID" ] || return 0
    wait "$PERF_PID"
    perf report -i "$WORK/$1.perf" --stdio --no-children -g none --percent-limit 0.2 \
        --sort comm,dso,sym 2>>"$WORK/$1.perf.log" | gzip | base64 |
        sed "s/^/BENCH-PERF $1 report /" >"$GUEST_RESULTS_TTY"
    perf script -i "$WORK/$1.perf" -F comm,tid,cpu,ip,sym,dso 2>>"$WORK/$1.perf.log" |
        gzip | base64 | sed "s/^/BENCH-PERF $1 script /" >"$GUEST_RESULTS_TTY"
    tail -n 3 "$WORK/$1.perf.log"
    rm -f "$WORK/$1.perf"
}

# run_one PHASE WORKLOAD TARGET TRANSPORT PORT NQN
run_one() {
    _phase="$1" _wl="$2" _tgt="$3" _tr="$4" _port="$5" _nqn="$6"
    _name="nvme_perf.$_phase.$_wl.$_tgt"
    _tag="$_phase.$_wl.$_tgt"
    _json="$WORK/$_tag.json"
    _t0="$(now)"
    if ! connect "$_tr" "$_port" "$_nqn" >"$WORK/$_tag.log" 2>&1; then
        cat "$WORK/$_tag.log"
        fail "$_name" "connect failed: $(tail -n 2 "$WORK/$_tag.log" | tr '\n' '|')"
        disconnect "$_nqn" "$_tr" >/dev/null 2>&1
        return 1
    fi
    _queues="$(cat "/sys/class/nvme/$CTRL/queue_count" 2>/dev/null || echo '?')"
    # Warm-up (not measured): same shape, BENCH_WARMUP seconds.
    if [ "$BENCH_WARMUP" -gt 0 ]; then
        $(fio_cmd "$DEV" "$_wl" "$BENCH_WARMUP" /dev/null) >/dev/null 2>&1
    fi
    _cmd="$(fio_cmd "$DEV" "$_wl" "$BENCH_SECONDS" "$_json")"
    profile_start "$_wl" "$_tag"
    # Measured window: fio under a shell whose cutime+cstime after waiting for it
    # is fio's CPU (its job processes included).
    _u0="$(now)"
    busy_ticks; _b0=$BUSY; _t0t=$TOTAL; _s0=$SCHED; quarry_ticks; _q0=$QTICKS
    sh -c "$_cmd 2>$WORK/$_tag.err; echo rc=\$?; cat /proc/\$\$/stat" >"$WORK/$_tag.self"
    busy_ticks; _b1=$BUSY; _t1t=$TOTAL; _s1=$SCHED; quarry_ticks; _q1=$QTICKS
    _u1="$(now)"
    profile_finish "$_tag"
    _rc="$(sed -n 's/^rc=//p' "$WORK/$_tag.self")"
    _fio_ticks="$(awk '!/^rc=/ { print $16 + $17 }' "$WORK/$_tag.self")"
    disconnect "$_nqn" "$_tr" >>"$WORK/$_tag.log" 2>&1
    _f="$(fio_fields "$_json" 2>/dev/null)"
    _line="phase=$_phase wl=$_wl target=$_tgt transport=$_tr queues=$_queues fio_args=$(wl_args "$_wl" | tr ' ' ',') window_s=$(awk -v a="$_u0" -v b="$_u1" 'BEGIN{printf "%.2f", b-a}') busy_ticks=$((_b1 - _b0)) total_ticks=$((_t1t - _t0t)) sched_ns=$((_s1 - _s0)) fio_ticks=$_fio_ticks quarry_ticks=$((_q1 - _q0)) fio_rc=$_rc $_f"
    emit "BENCH-RESULT $_line"
    if [ -s "$_json" ]; then
        gzip -c "$_json" | base64 | sed "s/^/BENCH-JSON $_tag /" >"$WORK/$_tag.b64"
        cat "$WORK/$_tag.b64" >"$GUEST_RESULTS_TTY"
    fi
    # Check line: the figures a reader wants at a glance.
    _sum="$(echo "$_line" | awk '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        srv = v["busy_ticks"] - v["fio_ticks"]
        if (v["target"] != "quarry") srv -= v["quarry_ticks"]
        us = (v["ios"] > 0) ? srv * 10000 / v["ios"] : 0
        printf "iops=%.0f MB/s=%.1f p50_us=%.0f p99_us=%.0f server_cpu_us_per_io=%.1f", v["iops"], v["bw_bytes"] / 1e6, v["p50_ns"] / 1000, v["p99_ns"] / 1000, us }')"
    _ios="$(echo "$_f" | sed -n 's/.*ios=\([0-9]*\).*/\1/p')"
    if [ "$_rc" = 0 ] && [ -n "$_ios" ] && [ "$_ios" -gt 0 ]; then
        pass "$_name" "secs=$(since "$_t0") queues=$_queues $_sum"
    else
        tail -n 20 "$WORK/$_tag.err" 2>/dev/null
        fail "$_name" "secs=$(since "$_t0") fio_rc=$_rc $_sum $(tail -n 2 "$WORK/$_tag.err" 2>/dev/null | tr '\n' '|')"
    fi
}

run_step nvme_perf.modules modules || { finish_set; exit 1; }
rdma_ok=0
if [ "$BENCH_RDMA" = 1 ]; then
    run_step nvme_perf.rxe rxe && rdma_ok=1
fi
run_step nvme_perf.quarry_backing quarry_backing || { finish_set; exit 1; }
run_step nvme_perf.nvmet nvmet || { finish_set; exit 1; }
if [ "$rdma_ok" = 1 ]; then
    run_step nvme_perf.nvmet_rdma_port nvmet_rdma_port || rdma_ok=0
fi
if idle >/dev/null 2>&1; then pass nvme_perf.idle "$IDLE_DETAIL"; else fail nvme_perf.idle "$IDLE_DETAIL"; fi
emit "BENCH-CONFIG seconds=$BENCH_SECONDS warmup=$BENCH_WARMUP size_mib=$BENCH_SIZE_MIB addr=$BENCH_ADDR nproc=$(nproc) kernel=$(uname -r) fio=$(fio --version) quarry_engine=${QUARRY_IO_ENGINE:-uring} backing=$BENCH_BACKING nvmet_buffered_io=$NVMET_BUFFERED"

for wl in $BENCH_TCP_WORKLOADS; do
    run_one tcp "$wl" quarry tcp "$QUARRY_TCP_PORT" "$NVME_NQN"
    run_one tcp "$wl" nvmet tcp "$BENCH_NVMET_TCP_PORT" "$BENCH_NVMET_NQN"
done
if [ "$rdma_ok" = 1 ]; then
    for wl in $BENCH_RDMA_WORKLOADS; do
        run_one rdma "$wl" quarry rdma "$QUARRY_RDMA_PORT" "$NVME_NQN"
        run_one rdma "$wl" nvmet rdma "$BENCH_NVMET_RDMA_PORT" "$BENCH_NVMET_NQN"
    done
fi
emit "BENCH-END"
finish_set
