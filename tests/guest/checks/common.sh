# Guest-side helpers for check scripts (busybox sh). Sourced, not a check set.
#
# Every check reports exactly one line:
#   GUEST-CHECK <name> PASS|FAIL <detail>
# on the console and on ttyS1 (the channel run.sh parses).

GUEST_RESULTS_TTY=/dev/ttyS1
[ -c "$GUEST_RESULTS_TTY" ] || GUEST_RESULTS_TTY=/dev/null
CHECK_FAILURES=0

# Seconds since boot, with centiseconds.
now() { cut -d' ' -f1 /proc/uptime; }
# Seconds since $1 (a value of now), two decimals.
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }

# report NAME STATUS DETAIL...
report() {
    _name="$1"
    _status="$2"
    shift 2
    _line="$(echo "GUEST-CHECK $_name $_status $*" | tr "\n" " " | cut -c1-480 | sed "s/ *$//")"
    echo "$_line"
    echo "$_line" >"$GUEST_RESULTS_TTY"
}
pass() { _n="$1"; shift; report "$_n" PASS "$@"; }
fail() { _n="$1"; shift; report "$_n" FAIL "$@"; CHECK_FAILURES=$((CHECK_FAILURES + 1)); }

# run_step NAME CMD [ARGS...]: runs CMD, PASS with its time, or FAIL with its
# exit status and the tail of its output (the full output goes to the console).
run_step() {
    _step="$1"
    shift
    _t0="$(now)"
    _out="$("$@" 2>&1)"
    _rc=$?
    if [ "$_rc" -eq 0 ]; then
        pass "$_step" "secs=$(since "$_t0")"
        return 0
    fi
    echo "$_out" | tail -n 30
    fail "$_step" "rc=$_rc secs=$(since "$_t0") $(echo "$_out" | tail -n 3 | tr '\n' '|')"
    return 1
}

# need SET VAR...: FAIL "<SET>.params" and exit the set if a parameter is empty.
need() {
    _set="$1"
    shift
    _missing=""
    for _v in "$@"; do
        eval "_val=\${$_v:-}"
        [ -n "$_val" ] || _missing="$_missing $_v"
    done
    if [ -n "$_missing" ]; then
        fail "$_set.params" "missing:$_missing"
        exit 1
    fi
}

# The host NQN this guest uses: NVME_HOSTNQN if given, otherwise a random
# uuid-based one, fixed for the whole boot in /etc/nvme/hostnqn.
guest_hostnqn() {
    if [ ! -s /etc/nvme/hostnqn ]; then
        mkdir -p /etc/nvme
        if [ -n "${NVME_HOSTNQN:-}" ]; then
            echo "$NVME_HOSTNQN" >/etc/nvme/hostnqn
        else
            echo "nqn.2014-08.org.nvmexpress:uuid:$(cat /proc/sys/kernel/random/uuid)" >/etc/nvme/hostnqn
        fi
        cat /proc/sys/kernel/random/uuid >/etc/nvme/hostid
    fi
    cat /etc/nvme/hostnqn
}

# sha256 of a file (first field only).
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# Exit status of a check set: non-zero if any check failed.
finish_set() { [ "$CHECK_FAILURES" -eq 0 ]; }
