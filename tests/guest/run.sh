#!/usr/bin/env bash
# Boots Debian's kernel under qemu TCG with the lab's initramfs, runs the
# requested check sets (tests/guest/checks/<set>.sh) inside one guest boot, and
# turns their `GUEST-CHECK <name> PASS|FAIL <detail>` lines into an exit code.
#
# Usage:
#   tests/guest/run.sh --checks SET[,SET...] [--param KEY=VALUE]... [options]
#
# Options:
#   --checks LIST      comma-separated check sets, run in this order
#                      (smoke, cifs, nvmet_ref, nvme_tcp, rdma_ref, nvme_rdma)
#   --param K=V        parameter exported to the check scripts (repeatable);
#                      see tests/guest/README.md for each set's parameters
#   --params-file F    file of K=V lines (same as several --param)
#   --timeout SECS     whole-run limit, boot included (default 1500)
#   --set-timeout SECS per check set limit inside the guest (default: whole-run limit)
#   --log FILE         console log (default: .cache/guest/runs/<time>/console.log)
#   --results FILE     where to keep the raw result lines (default: beside the log)
#   --mem MIB          guest memory (default 2048)
#   --smp N            guest vCPUs (default 2)
#   --hostfwd SPEC     extra qemu user-net hostfwd, e.g. tcp:127.0.0.1:5555-:4420
#   --append ARGS      extra kernel command line (e.g. "loglevel=7" to debug)
#   --extra-cpio F     append this newc cpio member to the initrd (repeatable),
#                      e.g. quarry_overlay.sh's binary + libraries
#   --quiet            do not stream the console to stderr
#
# Output (stdout): every GUEST-CHECK/GUEST-SET/GUEST-BOOT line, then one line
#   GUEST-RESULT PASS|FAIL pass=N fail=M boot_secs=B total_secs=T log=PATH
# Exit status: 0 all checks passed; 1 a check failed, a set did not finish or
#   no check ran; 3 the run timed out; 2 harness error (bad arguments, build).
set -euo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RUN_DEFAULT_TIMEOUT=1500
RUN_DEFAULT_MEM_MIB=2048
RUN_DEFAULT_SMP=2
# Grace period for qemu to exit after SIGTERM before SIGKILL.
RUN_KILL_GRACE_SECS=10

checks=""
params=()
timeout_secs="$RUN_DEFAULT_TIMEOUT"
set_timeout=""
log=""
results=""
mem="$RUN_DEFAULT_MEM_MIB"
smp="$RUN_DEFAULT_SMP"
hostfwd=""
append=""
extra_cpio=()
quiet=0

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --checks) checks="${2:?}"; shift 2 ;;
    --param) params+=("${2:?}"); shift 2 ;;
    --params-file)
        while IFS= read -r line || [ -n "$line" ]; do
            case "$line" in '' | '#'*) continue ;; esac
            params+=("$line")
        done <"${2:?}"
        shift 2 ;;
    --timeout) timeout_secs="${2:?}"; shift 2 ;;
    --set-timeout) set_timeout="${2:?}"; shift 2 ;;
    --log) log="${2:?}"; shift 2 ;;
    --results) results="${2:?}"; shift 2 ;;
    --mem) mem="${2:?}"; shift 2 ;;
    --smp) smp="${2:?}"; shift 2 ;;
    --hostfwd) hostfwd="${2:?}"; shift 2 ;;
    --append) append="${2:?}"; shift 2 ;;
    --extra-cpio)
        [ -f "${2:?}" ] || guest_die "no such cpio: $2"
        extra_cpio+=("$2"); shift 2 ;;
    --quiet) quiet=1; shift ;;
    -h | --help) usage ;;
    *) guest_log "unknown argument: $1"; usage ;;
    esac
done
[ -n "$checks" ] || { guest_log "--checks is required"; usage; }
[ -n "$set_timeout" ] || set_timeout="$timeout_secs"

image="$("$GUEST_DIR/build.sh")" || guest_die "build.sh failed"

# Console logs kept under .cache/guest/runs (oldest pruned first).
RUN_KEEP_LOGS=40
if [ -z "$log" ]; then
    # shellcheck disable=SC2012
    { ls -1d "$GUEST_CACHE_ROOT"/runs/*/ 2>/dev/null || true; } | head -n "-$RUN_KEEP_LOGS" | xargs -r rm -rf
    rundir="$GUEST_CACHE_ROOT/runs/$(date -u +%Y%m%dT%H%M%S)-$$"
    mkdir -p "$rundir"
    log="$rundir/console.log"
fi
mkdir -p "$(dirname "$log")"
[ -n "$results" ] || results="${log%.log}.results"
: >"$log"
: >"$results"

# --- per-run cpio: check scripts + params.env ---
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/root/checks"
cp "$GUEST_DIR"/checks/*.sh "$tmp/root/checks/"
{
    echo "GUEST_CHECKS='${checks//,/ }'"
    echo "GUEST_CHECK_TIMEOUT='$set_timeout'"
    for kv in "${params[@]+"${params[@]}"}"; do
        k="${kv%%=*}"
        v="${kv#*=}"
        [[ "$k" =~ ^[A-Z_][A-Z0-9_]*$ ]] || guest_die "bad parameter name: $k"
        [ "$k" != "$kv" ] || guest_die "parameter without '=': $kv"
        # Single-quote the value for sh.
        printf "%s='%s'\n" "$k" "${v//\'/\'\\\'\'}"
    done
} >"$tmp/root/checks/params.env"
# Appended as a second, uncompressed newc member (like the base image).
(cd "$tmp/root" && find . -print0 | cpio --null -o -H newc --quiet --owner=0:0) >"$tmp/checks.cpio"
cat "$image/initrd.img" "${extra_cpio[@]+"${extra_cpio[@]}"}" "$tmp/checks.cpio" >"$tmp/initrd"

netdev="user,id=n0"
[ -n "$hostfwd" ] && netdev="$netdev,hostfwd=$hostfwd"
bios=()
[ -f /usr/share/qemu/qboot.rom ] && bios=(-bios /usr/share/qemu/qboot.rom)

qemu=(
    qemu-system-x86_64 -accel tcg -cpu max -machine pc
    -m "$mem" -smp "$smp"
    -nodefaults -no-user-config -display none -vga none -no-reboot
    "${bios[@]}"
    -kernel "$image/vmlinuz" -initrd "$tmp/initrd"
    -append "console=ttyS0 panic=-1 loglevel=4 quiet mitigations=off 8250.nr_uarts=2 rdinit=/init${append:+ $append}"
    -serial stdio -serial "file:$results"
    -netdev "$netdev" -device virtio-net-pci,netdev=n0
)

guest_log "booting $(cat "$image/kver") for checks: $checks (timeout ${timeout_secs}s, log $log)"
t0="$(date +%s.%N)"
set +e
if [ "$quiet" -eq 1 ]; then
    timeout -k "$RUN_KILL_GRACE_SECS" "$timeout_secs" "${qemu[@]}" </dev/null >"$log" 2>&1
    rc=$?
else
    timeout -k "$RUN_KILL_GRACE_SECS" "$timeout_secs" "${qemu[@]}" </dev/null 2>&1 | tee "$log" >&2
    rc="${PIPESTATUS[0]}"
fi
set -e
total="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')"

# --- results ---
tr -d '\r' <"$results" | grep -a -E '^GUEST-(CHECK|SET|BOOT|NET|DONE) ' >"$tmp/lines" || true
cat "$tmp/lines"
npass="$(grep -c -E '^GUEST-CHECK [^ ]+ PASS' "$tmp/lines" || true)"
nfail="$(grep -c -E '^GUEST-CHECK [^ ]+ FAIL' "$tmp/lines" || true)"
boot="$(awk '/^GUEST-NET /{for(i=1;i<=NF;i++) if($i ~ /^uptime=/){sub("uptime=","",$i); print $i; exit}}' "$tmp/lines")"
status=0
why=""
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=3
    why="timeout"
elif ! grep -q '^GUEST-DONE' "$tmp/lines"; then
    status=1
    why="guest did not finish (qemu rc=$rc)"
fi
for c in ${checks//,/ }; do
    if ! grep -q -E "^GUEST-SET $c END" "$tmp/lines"; then
        [ "$status" -eq 0 ] && status=1
        why="${why:+$why; }set $c did not finish"
    fi
done
[ "$nfail" -gt 0 ] && [ "$status" -eq 0 ] && status=1
[ "$npass" -eq 0 ] && [ "$status" -eq 0 ] && { status=1; why="no check passed"; }
verdict=PASS
[ "$status" -ne 0 ] && verdict=FAIL
echo "GUEST-RESULT $verdict pass=$npass fail=$nfail boot_secs=${boot:-?} total_secs=$total log=$log${why:+ reason=\"$why\"}"
exit "$status"
