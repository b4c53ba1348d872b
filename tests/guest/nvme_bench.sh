#!/usr/bin/env bash
# On-demand benchmark (not part of the test suite): Quarry running INSIDE the guest
# lab against the guest kernel's own nvmet target, in ONE qemu boot, with the same
# initiator (Debian 6.1's nvme-tcp / nvme-rdma + fio, libaio, direct=1), the same
# backing (a fully written file of the same size for each, on the guest's tmpfs or on
# an ext4 on a RAM disk) and the same address (10.0.2.15). Prints a side-by-side table
# with Quarry/nvmet ratios.
#
#   tests/guest/nvme_bench.sh [--bin QUARRY] [--seconds N] [--warmup N] [--size-mib N]
#                             [--no-rdma] [--qd32-jobs N] [--seq-qd N] [--out DIR]
#                             [--timeout SECS] [--engine uring|threads]
#                             [--backing tmpfs|ramdisk] [--profile WORKLOADS]
#
#   --bin        quarry binary (default $QUARRY_BIN, else target/release/quarry, built
#                with `cargo build --release -p quarry --features rdma` as the test
#                command and the image build do); a build without the rdma feature runs
#                the NVMe/TCP phase only
#   --seconds    measured seconds per run (default 10); --warmup unmeasured seconds
#                before each run (default 2)
#   --size-mib   both namespaces (default 256)
#   --no-rdma    skip the NVMe/RDMA (Soft-RoCE) phase
#   --qd32-jobs  fio jobs of the 4k QD32 workload (default 2: 2 jobs x QD16, one per
#                vCPU / I/O queue)
#   --seq-qd     queue depth of the 128k sequential read (default 8, one job)
#   --engine     Quarry's --nvme-io-engine (default uring: the ring serves the tmpfs
#                volume through its buffered descriptor; threads: the blocking pool)
#   --backing    tmpfs (default): both files on the guest's tmpfs, which has no
#                O_DIRECT in 6.1, so Quarry's ring hands every read to io_uring's
#                worker threads and nvmet (buffered_io=1) to its buffered-I/O
#                workqueue; ramdisk: both files on ext4 on a brd RAM disk
#                (checks/ram_backing.sh), both O_DIRECT as in production (Quarry's
#                direct descriptor, nvmet buffered_io=0), no worker thread for either
#   --profile    record the guest's CPU with perf (the host's /usr/bin/perf and its
#                libraries, packed into the boot) through the measured runs of these
#                workloads (comma-separated, e.g. 4k_qd32), both targets, all vCPUs;
#                the reports land in OUT/perf/. perf's own CPU then counts as the
#                guest's busy time in those runs, so their CPU figures are not
#                comparable with runs that were not profiled
#   --out        where the console log, raw result lines, fio JSON and the table go
#                (default target/bench/nvme-guest/<UTC time>)
#
# Workloads: NVMe/TCP 4k randread QD1, 4k randread QD32, 128k sequential read;
# NVMe/RDMA 4k randread QD32 and 128k sequential read. Per workload: Quarry, then
# nvmet; each run connects, warms up, measures, disconnects. The guest's check set
# is tests/guest/checks/nvme_perf.sh (server CPU method described there).
#
# Under qemu TCG absolute figures mean little: only the ratios of the two targets
# measured in the same boot are meaningful.
#
# Exit: 0 the run completed and the table was printed; 1 a run or check failed
# (the table shows what was measured); 2 usage or setup error.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"

bin="${QUARRY_BIN:-}"
seconds=10
warmup=2
size_mib=256
rdma=1
qd32_jobs=2
seq_qd=8
out=""
timeout_secs=1800
engine=uring
backing=tmpfs
profile=""

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin="${2:?}"; shift 2 ;;
    --seconds) seconds="${2:?}"; shift 2 ;;
    --warmup) warmup="${2:?}"; shift 2 ;;
    --size-mib) size_mib="${2:?}"; shift 2 ;;
    --no-rdma) rdma=0; shift ;;
    --qd32-jobs) qd32_jobs="${2:?}"; shift 2 ;;
    --seq-qd) seq_qd="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --timeout) timeout_secs="${2:?}"; shift 2 ;;
    --engine) engine="${2:?}"; shift 2 ;;
    --backing) backing="${2:?}"; shift 2 ;;
    --profile) profile="${2:?}"; shift 2 ;;
    -h | --help) usage ;;
    *) echo "nvme_bench: unknown argument: $1" >&2; usage ;;
    esac
done
for n in "$seconds" "$warmup" "$size_mib" "$qd32_jobs" "$seq_qd" "$timeout_secs"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "nvme_bench: not a number: $n" >&2; exit 2; }
done
case "$engine" in uring | threads) ;; *) echo "nvme_bench: --engine is uring or threads" >&2; exit 2 ;; esac
case "$backing" in tmpfs | ramdisk) ;; *) echo "nvme_bench: --backing is tmpfs or ramdisk" >&2; exit 2 ;; esac
[[ "$profile" =~ ^[a-z0-9_,]*$ ]] || { echo "nvme_bench: --profile takes workload names, comma-separated" >&2; exit 2; }
perf_prog=()
if [ -n "$profile" ]; then
    perf_prog=("$(command -v perf)") || { echo "nvme_bench: --profile needs perf (apt-get install linux-perf)" >&2; exit 2; }
fi
[ $((32 % qd32_jobs)) -eq 0 ] || { echo "nvme_bench: --qd32-jobs must divide 32" >&2; exit 2; }

if [ -z "$bin" ]; then
    for c in "${CARGO_TARGET_DIR:-$ROOT/target}/release/quarry"; do
        [ -x "$c" ] && { bin="$c"; break; }
    done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "nvme_bench: no quarry binary (--bin, or cargo build --release -p quarry --features rdma)" >&2; exit 2; }
if [ "$rdma" = 1 ] && ! ldd "$bin" 2>/dev/null | grep -q libibverbs; then
    echo "nvme_bench: $bin has no RDMA support (not built with --features rdma): NVMe/TCP only" >&2
    rdma=0
fi
command -v python3 >/dev/null || { echo "nvme_bench: needs python3 (tests/guest/prereqs.sh)" >&2; exit 2; }

[ -n "$out" ] || out="$ROOT/target/bench/nvme-guest/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
t0="$(date +%s.%N)"

"$HERE/quarry_overlay.sh" "$bin" "$out/quarry.cpio" "${perf_prog[@]+"${perf_prog[@]}"}"

params=(
    --param NVME_NQN=nqn.2026-11.io.quarry:bench
    --param QUARRY_VOL_MIB="$size_mib"
    --param BENCH_SIZE_MIB="$size_mib"
    --param BENCH_SECONDS="$seconds"
    --param BENCH_WARMUP="$warmup"
    --param BENCH_QD32_JOBS="$qd32_jobs"
    --param BENCH_SEQ_QD="$seq_qd"
    --param BENCH_RDMA="$rdma"
    --param QUARRY_IO_ENGINE="$engine"
    --param BENCH_PROFILE="${profile//,/ }"
)
checks=quarry_target,nvme_perf,quarry_stop
if [ "$backing" = ramdisk ]; then
    # Room for both namespaces and the file system's own blocks.
    params+=(
        --param RAM_BACKING_MIB=$((2 * size_mib + 128))
        --param RAM_BACKING_MOUNT=/mnt/bench
        --param QUARRY_DATA=/mnt/bench/quarry
        --param BENCH_NVMET_BACKING=/mnt/bench/nvmet/ns1.img
        --param BENCH_NVMET_BUFFERED=0
        --param BENCH_BACKING=ramdisk-ext4
    )
    checks="ram_backing,$checks"
fi
if [ "$rdma" = 0 ]; then
    # No RDMA listener and no Soft-RoCE device: Quarry must then report RDMA listeners
    # unavailable, a build without the feature and one with it alike.
    params+=(--param QUARRY_RDMA_PORT= --param QUARRY_EXPECT_RDMA=0)
fi

results="$out/results.txt"
: >"$results"
echo "nvme_bench: $(basename "$bin") ($bin), ${seconds}s per run, ${size_mib} MiB, rdma=$rdma, backing=$backing; output in $out" >&2
set +e
"$HERE/run.sh" --checks "$checks" --extra-cpio "$out/quarry.cpio" \
    "${params[@]}" --timeout "$timeout_secs" --log "$out/console.log" --results "$results" \
    --quiet >"$out/run.txt" 2>"$out/run.err" &
runpid=$!
# Progress: the check lines as the guest reports them (tail ends with run.sh).
tail -n +1 -s 2 -F --pid="$runpid" "$results" 2>/dev/null | grep --line-buffered -E '^GUEST-(CHECK|SET)' | sed -u 's/^/  /' >&2
wait "$runpid"
rc=$?
set -e
rm -f "$out/quarry.cpio"
tail -n 1 "$out/run.txt" >&2 || true
wall="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}')"

set +e
python3 - "$results" "$out" "$wall" "$rc" <<'PY'
import base64, collections, gzip, json, os, sys

results, out, wall, rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
HZ = 100  # USER_HZ of the guest's /proc/stat and /proc/<pid>/stat

rows, chunks, idle, config = [], collections.defaultdict(list), None, {}
perf = collections.defaultdict(list)
def kv(words):
    d = {}
    for w in words:
        if "=" in w:
            k, v = w.split("=", 1)
            d[k] = v
    return d
with open(results, errors="replace") as f:
    for line in f:
        line = line.strip("\r\n")
        w = line.split()
        if not w:
            continue
        if w[0] == "BENCH-RESULT":
            rows.append(kv(w[1:]))
        elif w[0] == "BENCH-JSON" and len(w) == 3:
            chunks[w[1]].append(w[2])
        elif w[0] == "BENCH-PERF" and len(w) == 4:
            perf[(w[1], w[2])].append(w[3])
        elif w[0] == "BENCH-IDLE":
            idle = kv(w[1:])
        elif w[0] == "BENCH-CONFIG":
            config = kv(w[1:])

os.makedirs(os.path.join(out, "fio"), exist_ok=True)
raw = {}
for tag, parts in chunks.items():
    try:
        data = gzip.decompress(base64.b64decode("".join(parts)))
        with open(os.path.join(out, "fio", tag + ".json"), "wb") as f:
            f.write(data)
        raw[tag] = json.loads(data)
    except Exception as e:  # a truncated transfer: the BENCH-RESULT figures still stand
        print(f"nvme_bench: fio JSON of {tag} unreadable: {e}", file=sys.stderr)

if perf:
    os.makedirs(os.path.join(out, "perf"), exist_ok=True)
for (tag, kind), parts in perf.items():
    try:
        with open(os.path.join(out, "perf", f"{tag}.{kind}.txt"), "wb") as f:
            f.write(gzip.decompress(base64.b64decode("".join(parts))))
    except Exception as e:
        print(f"nvme_bench: perf {kind} of {tag} unreadable: {e}", file=sys.stderr)

def num(d, k):
    try:
        return float(d.get(k, ""))
    except ValueError:
        return None

res = {}
for r in rows:
    tag = f"{r['phase']}.{r['wl']}.{r['target']}"
    ios = num(r, "ios") or 0
    busy, fio, q = num(r, "busy_ticks"), num(r, "fio_ticks"), num(r, "quarry_ticks")
    m = dict(r)
    m["iops"] = num(r, "iops")
    m["mbps"] = (num(r, "bw_bytes") or 0) / 1e6
    m["p50"] = (num(r, "p50_ns") or 0) / 1e3
    m["p99"] = (num(r, "p99_ns") or 0) / 1e3
    if None not in (busy, fio, q) and ios > 0:
        srv = busy - fio - (0 if r["target"] == "quarry" else q)
        m["srv_s"] = srv / HZ
        m["us_io"] = srv / HZ * 1e6 / ios if srv > 0 else None
        m["iops_cpu"] = ios / (srv / HZ) if srv > 0 else None
        m["own_us_io"] = q / HZ * 1e6 / ios if r["target"] == "quarry" else None
        m["other_us_io"] = (srv - q) / HZ * 1e6 / ios if r["target"] == "quarry" else None
        win = num(r, "window_s") or 0
        ncpu = float(config.get("nproc", 2))
        m["busy_pct"] = 100.0 * busy / HZ / (win * ncpu) if win > 0 else None
        tot = num(r, "total_ticks")
        m["seen_pct"] = 100.0 * tot / HZ / (win * ncpu) if win > 0 and tot is not None else None
        m["fio_us_io"] = fio / HZ * 1e6 / ios
        sns = num(r, "sched_ns")
        if sns:
            srt = sns / 1e9 - fio / HZ - (0 if r["target"] == "quarry" else q / HZ)
            m["rt_us_io"] = srt * 1e6 / ios if srt > 0 else None
            m["rt_iops_cpu"] = ios / srt if srt > 0 else None
    js = raw.get(tag)
    if js and m["iops"]:
        jr = js["jobs"][0]["read"]["iops"]
        if abs(jr - m["iops"]) > 0.01 * max(jr, 1):
            print(f"nvme_bench: {tag}: guest parse iops {m['iops']} != JSON {jr}", file=sys.stderr)
    res[tag] = m

def f0(x): return "n/a" if x is None else f"{x:,.0f}"
def f1(x): return "n/a" if x is None else f"{x:,.1f}"
def ratio(a, b): return "n/a" if not a or not b else f"{a / b:.2f}x"

def shape(r):
    a = dict(x.lstrip("-").split("=", 1) for x in r.get("fio_args", "").split(",") if "=" in x)
    return f"{a.get('numjobs', '?')} job{'s' if a.get('numjobs') != '1' else ''} x QD{a.get('iodepth', '?')}"
names = {"4k_qd1": "4k randread QD1", "4k_qd32": "4k randread QD32", "128k_seq": "128k seq read"}
tnames = {("tcp", "nvmet"): "nvmet-tcp", ("rdma", "nvmet"): "nvmet-rdma", ("tcp", "quarry"): "Quarry", ("rdma", "quarry"): "Quarry"}

L = []
L.append("NVMe-oF in the guest lab: Quarry vs the Linux kernel nvmet target, one qemu boot")
L.append(f"guest: {config.get('kernel', '?')}, {config.get('nproc', '?')} vCPUs under qemu TCG; initiator: kernel nvme-tcp/nvme-rdma + {config.get('fio', 'fio')} (libaio, direct=1)")
where = {"tmpfs": "guest tmpfs", "ramdisk-ext4": "ext4 on a guest RAM disk (brd), O_DIRECT"}.get(config.get("backing", "tmpfs"), config.get("backing", "?"))
L.append(f"backing: {config.get('size_mib', '?')} MiB fully written file for each on {where} (Quarry --nvme-io-engine {config.get('quarry_engine', '?')}, nvmet file ns buffered_io={config.get('nvmet_buffered_io', '1')}); both at {config.get('addr', '?')}")
L.append(f"each run: connect, {config.get('warmup', '?')} s warm-up, {config.get('seconds', '?')} s measured, disconnect; Quarry then nvmet per workload")
L.append("UNDER TCG ABSOLUTE NUMBERS ARE NOT MEANINGFUL: compare only the Quarry/nvmet ratios of this one boot.")
if config.get("backing", "tmpfs") == "tmpfs":
    L.append("tmpfs has no O_DIRECT in 6.1: Quarry's ring hands every read to io_uring's worker threads, nvmet to its buffered-I/O workqueue.")
L.append("lat = fio lat_ns percentiles, submission to completion (nvme-tcp can finish much of an I/O inside io_submit, which clat omits);")
L.append("clat percentiles are in results.txt and fio/*.json. guest busy: /proc/stat busy share of all vCPUs over the run, fio included;")
L.append("ticks seen: /proc/stat ticks counted / wall time x vCPUs (below 100%: the guest lost timer ticks, host contention).")
L.append("server CPU = guest busy CPU (/proc/stat) over the run - fio's own CPU (- idle Quarry's CPU in nvmet runs); it includes the")
L.append("initiator's kernel work (nvme-tcp io_work, loopback softirq), the same for both targets, so it understates the targets' difference.")
L.append("(runtime) columns: the same with /proc/schedstat's scheduler runtime of all tasks instead of /proc/stat ticks, the clock fio's")
L.append("and Quarry's utime+stime come from; when ticks are lost the two methods disagree and the runtime one is the consistent one.")
if idle:
    secs = float(idle.get("secs", 0) or 0)
    if secs > 0:
        L.append(f"guest idle before the runs: {100.0 * int(idle['busy_ticks']) / HZ / secs:.1f}% of one vCPU busy, Quarry {100.0 * int(idle['quarry_ticks']) / HZ / secs:.1f}%")
L.append("")
L.append("| transport | workload | target | IOPS | MB/s | lat p50 us | lat p99 us | server CPU us/IO | IOPS per server CPU s | (runtime) us/IO | (runtime) IOPS per CPU s | Quarry /proc us/IO | guest busy / ticks seen |")
L.append("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
order = []
for r in rows:
    k = (r["phase"], r["wl"])
    if k not in order:
        order.append(k)
for ph, wl in order:
    q, k = res.get(f"{ph}.{wl}.quarry"), res.get(f"{ph}.{wl}.nvmet")
    any_r = q or k
    label = f"{names.get(wl, wl)} ({shape(any_r)})"
    for t, m in (("quarry", q), ("nvmet", k)):
        if not m:
            L.append(f"| {ph} | {label} | {tnames[(ph, t)]} | not measured | | | | | | | | | |")
            continue
        busy = "n/a" if m.get("busy_pct") is None else f"{m['busy_pct']:.0f}% / {f0(m.get('seen_pct'))}%"
        own = f1(m.get("own_us_io")) if t == "quarry" else ""
        L.append(f"| {ph} | {label} | {tnames[(ph, t)]} | {f0(m['iops'])} | {f1(m['mbps'])} | {f0(m['p50'])} | {f0(m['p99'])} | {f1(m.get('us_io'))} | {f0(m.get('iops_cpu'))} | {f1(m.get('rt_us_io'))} | {f0(m.get('rt_iops_cpu'))} | {own} | {busy} |")
    if q and k:
        L.append(f"| {ph} | {label} | **Quarry/nvmet** | {ratio(q['iops'], k['iops'])} | {ratio(q['mbps'], k['mbps'])} | {ratio(q['p50'], k['p50'])} | {ratio(q['p99'], k['p99'])} | {ratio(q.get('us_io'), k.get('us_io'))} | **{ratio(q.get('iops_cpu'), k.get('iops_cpu'))}** | {ratio(q.get('rt_us_io'), k.get('rt_us_io'))} | {ratio(q.get('rt_iops_cpu'), k.get('rt_iops_cpu'))} | | |")
L.append("")
L.append("Cross-check, Quarry runs: server CPU us/IO = Quarry process (/proc/<pid> utime+stime) + the rest (initiator kernel, softirq);")
L.append("/proc/stat is tick-sampled and /proc/<pid> is scheduler runtime, so a small negative rest is measurement noise:")
for ph, wl in order:
    q = res.get(f"{ph}.{wl}.quarry")
    if q and q.get("own_us_io") is not None:
        L.append(f"  {ph} {names.get(wl, wl)}: {f1(q.get('us_io'))} = {f1(q['own_us_io'])} Quarry + {f1(q['other_us_io'])} other (fio itself: {f1(q.get('fio_us_io'))} us/IO, not counted)")
L.append("")
L.append("Target (issue): Quarry 4 KiB QD32 random read IOPS per server CPU second >= 2x nvmet-tcp's")
q, k = res.get("tcp.4k_qd32.quarry"), res.get("tcp.4k_qd32.nvmet")
if q and k and q.get("iops_cpu") and k.get("iops_cpu"):
    r = q["iops_cpu"] / k["iops_cpu"]
    L.append(f"  Quarry {q['iops_cpu']:,.0f} vs nvmet-tcp {k['iops_cpu']:,.0f} IOPS per server CPU s (/proc/stat): {r:.2f}x -> {'MET' if r >= 2.0 else 'NOT MET'} (needs >= 2.00x)")
    if q.get("rt_iops_cpu") and k.get("rt_iops_cpu"):
        r2 = q["rt_iops_cpu"] / k["rt_iops_cpu"]
        L.append(f"  runtime clock: Quarry {q['rt_iops_cpu']:,.0f} vs nvmet-tcp {k['rt_iops_cpu']:,.0f}: {r2:.2f}x -> {'MET' if r2 >= 2.0 else 'NOT MET'}")
else:
    L.append("  not measured")
q, k = res.get("rdma.4k_qd32.quarry"), res.get("rdma.4k_qd32.nvmet")
if q and k and q.get("iops_cpu") and k.get("iops_cpu"):
    L.append(f"  (same figure over NVMe/RDMA, no target: Quarry {q['iops_cpu']:,.0f} vs nvmet-rdma {k['iops_cpu']:,.0f}: {q['iops_cpu'] / k['iops_cpu']:.2f}x)")
if perf:
    L.append(f"perf reports (these runs' CPU figures include perf's own): {os.path.join(out, 'perf')}")
L.append("")
L.append(f"wall time {wall} s; guest run exit {rc}{' (see run.txt / console.log)' if rc else ''}; raw: {out}")
text = "\n".join(L) + "\n"
with open(os.path.join(out, "table.md"), "w") as f:
    f.write(text)
print(text, end="")
sys.exit(0 if rows else 1)
PY
prc=$?
set -e
[ "$rc" -eq 0 ] && [ "$prc" -eq 0 ] || exit 1
