#!/bin/sh
# Check set "nvme_tcp": the Linux kernel's NVMe/TCP initiator (nvme-tcp with
# nvme-cli) against an NVMe-oF target.
#
# Parameters:
#   NVME_ADDR          target address (host: 10.0.2.2; in-guest nvmet: 127.0.0.1) required
#   NVME_NQN           subsystem NQN with a namespace 1                   required
#   NVME_PORT          I/O controller port (default 4420)
#   NVME_DISC_PORT     discovery port (default NVME_PORT)
#   NVME_EXPECT_TRADDR if set: the discovery log must advertise this traddr
#   NVME_TRANSPORT     tcp (default) or rdma
#   NVME_DIGEST_MODES  space-separated modes, each a full pass: "plain" (no
#                      digests) and "digest" (--hdr-digest --data-digest);
#                      default "plain digest"
#   NVME_HOSTNQN       host NQN the guest uses (default: random uuid NQN)
#   NVME_DATA_MIB      file written through ext4 and verified (default 64)
#   NVME_FIO_4K_MIB    fio randwrite+verify size at 4k (default 16)
#   NVME_FIO_128K_MIB  fio randwrite+verify size at 128k (default 64)
#   NVME_FIO_IODEPTH   fio queue depth (default 16)
#   NVME_NS_ADD_CMD    if set: guest shell command that adds a namespace on
#                      the target while connected (e.g. a wget to Quarry's
#                      REST API); the new namespace must appear without
#                      reconnecting within NVME_NS_ADD_WAIT seconds (default 30)
#   NVME_DENIED_HOSTNQN  if set: connecting with this host NQN must be refused
#
# Check names: nvme_tcp.modules, nvme_tcp.discover, nvme_tcp.<mode>.{connect,
# id_ctrl,id_ns,smart_log,list,mkfs,mount,write,umount,disconnect,reconnect,
# verify,fsck,fio_4k,fio_128k,ns_add,disconnect_final}, nvme_tcp.denied_host.
. /checks/common.sh

need nvme_tcp NVME_ADDR NVME_NQN
NVME_PORT="${NVME_PORT:-4420}"
NVME_DISC_PORT="${NVME_DISC_PORT:-$NVME_PORT}"
NVME_TRANSPORT="${NVME_TRANSPORT:-tcp}"
NVME_DIGEST_MODES="${NVME_DIGEST_MODES:-plain digest}"
NVME_DATA_MIB="${NVME_DATA_MIB:-64}"
NVME_FIO_4K_MIB="${NVME_FIO_4K_MIB:-16}"
NVME_FIO_128K_MIB="${NVME_FIO_128K_MIB:-64}"
NVME_FIO_IODEPTH="${NVME_FIO_IODEPTH:-16}"
NVME_FIO_4K_RW="${NVME_FIO_4K_RW:-randwrite}"
NVME_FIO_128K_RW="${NVME_FIO_128K_RW:-randwrite}"
NVME_NS_ADD_WAIT="${NVME_NS_ADD_WAIT:-30}"
# How long a connect may take to show a live controller with namespace 1.
NVME_CONNECT_WAIT_SECS=30
MNT=/mnt/nvme
SRC=/tmp/nvme-src.bin
S="nvme_$NVME_TRANSPORT"

run_step "$S.modules" modprobe -a "nvme-$NVME_TRANSPORT" nvme-fabrics nvme-core ext4 crc32c_generic || exit 1
HOSTNQN="$(guest_hostnqn)"
mkdir -p "$MNT"

# nvme-cli's "key : value" output, value of KEY (lower case, "_" for spaces:
# "Data Units Written" is data_units_written).
field() {
    awk -v k="$1" '{ i = index($0, ":"); if (i == 0) next
        key = tolower(substr($0, 1, i - 1)); sub(/[ \t]+$/, "", key); gsub(/ /, "_", key)
        if (key == k) { v = substr($0, i + 1); sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v); print v; exit } }'
}

# Controller (nvmeN) connected to NVME_NQN, or nothing.
find_ctrl() {
    for _d in /sys/class/nvme/nvme*; do
        [ -e "$_d/subsysnqn" ] || continue
        [ "$(cat "$_d/subsysnqn")" = "$NVME_NQN" ] || continue
        [ "$(cat "$_d/transport")" = "$NVME_TRANSPORT" ] || continue
        basename "$_d"
        return 0
    done
    return 1
}
# Block device of namespace NSID on controller CTRL (multipath head or plain).
ns_dev() { # CTRL NSID
    for _e in /sys/class/nvme/"$1"/nvme*; do
        _b="$(basename "$_e")"
        case "$_b" in
        *c*n"$2") echo "/dev/$(echo "$_b" | sed 's/c[0-9]*n/n/')"; return 0 ;;
        *n"$2") echo "/dev/$_b"; return 0 ;;
        esac
    done
    return 1
}
ns_count() { ls /sys/class/nvme/"$1"/ | grep -c -E '^nvme[0-9]+(c[0-9]+)?n[0-9]+$'; }

digest_args() { [ "$1" = digest ] && echo "--hdr-digest --data-digest"; }

# connect MODE: connect and wait until the controller is live with namespace 1;
# sets CTRL and DEV.
connect() {
    # shellcheck disable=SC2046
    nvme connect -t "$NVME_TRANSPORT" -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NVME_NQN" \
        --hostnqn="$HOSTNQN" $(digest_args "$1") || return 1
    _i=0
    while [ "$_i" -lt $((NVME_CONNECT_WAIT_SECS * 10)) ]; do
        CTRL="$(find_ctrl)"
        if [ -n "$CTRL" ] && [ "$(cat "/sys/class/nvme/$CTRL/state")" = live ]; then
            DEV="$(ns_dev "$CTRL" 1)"
            [ -n "$DEV" ] && [ -b "$DEV" ] && return 0
        fi
        sleep 0.1
        _i=$((_i + 1))
    done
    echo "no live controller with namespace 1 (ctrl=$CTRL dev=$DEV)"
    return 1
}
disconnect() {
    nvme disconnect -n "$NVME_NQN" || return 1
    _i=0
    while find_ctrl >/dev/null && [ "$_i" -lt 100 ]; do
        sleep 0.1
        _i=$((_i + 1))
    done
    ! find_ctrl >/dev/null || { echo "controller still present"; return 1; }
}

discover() {
    _out="$(nvme discover -t "$NVME_TRANSPORT" -a "$NVME_ADDR" -s "$NVME_DISC_PORT" --hostnqn="$HOSTNQN")" || return 1
    echo "$_out"
    echo "$_out" | grep -q -F "$NVME_NQN" || { echo "discovery log does not list $NVME_NQN"; return 1; }
    # With an advertised address, entries must name the address this guest can use
    # (what `nvme connect-all` connects to), not the target's own bind address.
    if [ -n "${NVME_EXPECT_TRADDR:-}" ]; then
        echo "$_out" | grep -q "traddr: *$NVME_EXPECT_TRADDR" ||
            { echo "discovery log does not advertise traddr $NVME_EXPECT_TRADDR"; return 1; }
    fi
}

id_ctrl() {
    _out="$(nvme id-ctrl "/dev/$CTRL")" || return 1
    _subnqn="$(echo "$_out" | field subnqn)"
    _sn="$(echo "$_out" | field sn)"
    _mn="$(echo "$_out" | field mn)"
    _fr="$(echo "$_out" | field fr)"
    _mdts="$(echo "$_out" | field mdts)"
    ID_CTRL_DETAIL="mn='$_mn' sn='$_sn' fr='$_fr' mdts=$_mdts"
    [ "$_subnqn" = "$NVME_NQN" ] || { echo "subnqn '$_subnqn'"; return 1; }
    [ -n "$(echo "$_sn" | tr -d ' ')" ] || { echo "empty serial"; return 1; }
    [ -n "$(echo "$_mn" | tr -d ' ')" ] || { echo "empty model"; return 1; }
}

id_ns() {
    _out="$(nvme id-ns "$DEV")" || return 1
    _nsze="$(echo "$_out" | field nsze)"
    _ncap="$(echo "$_out" | field ncap)"
    _lbads="$(echo "$_out" | grep 'in use' | sed -n 's/.*lbads:\([0-9]*\).*/\1/p')"
    [ -n "$_nsze" ] && [ -n "$_lbads" ] || { echo "$_out"; return 1; }
    _bytes=$((_nsze << _lbads))
    _blk=$(($(cat "/sys/block/$(basename "$DEV")/size") * 512))
    ID_NS_DETAIL="nsze=$_nsze ncap=$_ncap lbads=$_lbads bytes=$_bytes"
    [ $((_nsze)) -gt 0 ] && [ $((_ncap)) -le $((_nsze)) ] || { echo "nsze=$_nsze ncap=$_ncap"; return 1; }
    [ "$_bytes" = "$_blk" ] || { echo "id-ns says $_bytes bytes, block device $_blk"; return 1; }
}

smart_log() {
    _out="$(nvme smart-log "/dev/$CTRL")" || return 1
    echo "$_out"
    _cw="$(echo "$_out" | field critical_warning)"
    _temp="$(echo "$_out" | field temperature)"
    SMART_DETAIL="critical_warning=$_cw temperature='$_temp' data_units_written=$(echo "$_out" | field data_units_written)"
    [ "$_cw" = 0 ] || { echo "critical_warning=$_cw"; return 1; }
    [ -n "$_temp" ] || { echo "no temperature"; return 1; }
}

list() {
    _out="$(nvme list)" || return 1
    echo "$_out"
    echo "$_out" | grep -q "^$DEV " || { echo "nvme list does not show $DEV"; return 1; }
}

write_data() {
    cp "$SRC" "$MNT/data.bin" && sync
}
verify_data() {
    mount -t ext4 "$DEV" "$MNT" || return 1
    _got="$(sha256_of "$MNT/data.bin")"
    umount "$MNT" || return 1
    [ "$_got" = "$SRC_SHA" ] || { echo "sha256 $_got, want $SRC_SHA"; return 1; }
}

# fio BS MIB: randwrite with crc32c verification on the raw namespace.
FIO_DETAIL=""
run_fio() { # BS MIB [RW]
    _out="$(fio --name="rw$1" --filename="$DEV" --direct=1 --ioengine=libaio \
        --iodepth="$NVME_FIO_IODEPTH" --rw="${3:-randwrite}" --bs="$1" --size="${2}m" \
        --verify=crc32c --do_verify=1 --verify_fatal=1 --exitall_on_error=1 ${4:-} 2>&1)"
    _rc=$?
    echo "$_out"
    FIO_DETAIL="$(echo "$_out" | grep -E '^ *(write|read): IOPS=' | sed 's/^ *//; s/,.*//' | tr '\n' ' ')"
    [ "$_rc" -eq 0 ] || return 1
    ! echo "$_out" | grep -q -i 'verify.*fail\|bad magic\|crc32c: verify failed'
}

ns_add() {
    _before="$(ns_count "$CTRL")"
    sh -c "$NVME_NS_ADD_CMD" || { echo "NVME_NS_ADD_CMD failed"; return 1; }
    _i=0
    while [ "$_i" -lt $((NVME_NS_ADD_WAIT * 10)) ]; do
        [ "$(ns_count "$CTRL")" -gt "$_before" ] && return 0
        sleep 0.1
        _i=$((_i + 1))
    done
    echo "namespace count stayed $_before"
    return 1
}

denied_host() {
    _bad_id="$(cat /proc/sys/kernel/random/uuid)"
    if nvme connect -t "$NVME_TRANSPORT" -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NVME_NQN" \
        --hostnqn="$NVME_DENIED_HOSTNQN" --hostid="$_bad_id"; then
        echo "connect with $NVME_DENIED_HOSTNQN succeeded"
        nvme disconnect -n "$NVME_NQN"
        return 1
    fi
    ! find_ctrl >/dev/null || { echo "a controller exists"; nvme disconnect -n "$NVME_NQN"; return 1; }
}

# step NAME FUNC DETAILVAR: like run_step, in this shell (the function sets
# globals), with extra detail from a variable set by the function.
step() {
    _name="$1"
    _fn="$2"
    _dvar="${3:-}"
    shift 3
    _t0="$(now)"
    _log="/tmp/step.$$.log"
    "$_fn" "$@" >"$_log" 2>&1
    _rc=$?
    _d=""
    [ -n "$_dvar" ] && eval "_d=\${$_dvar:-}"
    if [ "$_rc" -eq 0 ]; then
        pass "$_name" "secs=$(since "$_t0") $_d"
    else
        tail -n 30 "$_log"
        fail "$_name" "rc=$_rc secs=$(since "$_t0") $_d $(tail -n 3 "$_log" | tr '\n' '|')"
    fi
    rm -f "$_log"
    return "$_rc"
}

head -c "$((NVME_DATA_MIB * 1048576))" /dev/urandom >"$SRC"
SRC_SHA="$(sha256_of "$SRC")"

step "$S.discover" discover "" ""
first=1
for mode in $NVME_DIGEST_MODES; do
    p="$S.$mode"
    CTRL=""
    DEV=""
    step "$p.connect" connect "" "$mode" || continue
    pass "$p.device" "ctrl=$CTRL dev=$DEV"
    step "$p.id_ctrl" id_ctrl ID_CTRL_DETAIL ""
    step "$p.id_ns" id_ns ID_NS_DETAIL ""
    step "$p.smart_log" smart_log SMART_DETAIL ""
    step "$p.list" list "" ""
    if step "$p.mkfs" mkfs.ext4 "" -F -q "$DEV" &&
        step "$p.mount" mount "" -t ext4 "$DEV" "$MNT"; then
        t0="$(now)"
        if write_data; then
            s="$(since "$t0")"
            pass "$p.write" "secs=$s MB/s=$(awk -v b="$((NVME_DATA_MIB * 1048576))" -v s="$s" 'BEGIN{printf "%.1f", (s > 0) ? b / s / 1e6 : 0}')"
        else
            fail "$p.write" "secs=$(since "$t0")"
        fi
        step "$p.umount" umount "" "$MNT"
        if step "$p.disconnect" disconnect "" "" && step "$p.reconnect" connect "" "$mode"; then
            step "$p.verify" verify_data "" ""
            step "$p.fsck" e2fsck "" -f -n "$DEV"
        fi
    fi
    if [ -n "$DEV" ] && [ -b "$DEV" ]; then
        step "$p.fio_4k" run_fio FIO_DETAIL 4k "$NVME_FIO_4K_MIB" "$NVME_FIO_4K_RW"
        step "$p.fio_128k" run_fio FIO_DETAIL 128k "$NVME_FIO_128K_MIB" "$NVME_FIO_128K_RW" &&
            [ "${NVME_FIO_REVERIFY:-0}" = 1 ] &&
            step "$p.fio_disconnect" disconnect "" "" &&
            step "$p.fio_reconnect" connect "" "$mode" &&
            step "$p.fio_reverify" run_fio FIO_DETAIL 128k "$NVME_FIO_128K_MIB" "$NVME_FIO_128K_RW" --verify_only
    fi
    if [ "$first" = 1 ] && [ -n "${NVME_NS_ADD_CMD:-}" ] && [ -n "$CTRL" ]; then
        step "$p.ns_add" ns_add "" ""
    fi
    step "$p.disconnect_final" disconnect "" ""
    first=0
done
if [ -n "${NVME_DENIED_HOSTNQN:-}" ]; then
    step "$S.denied_host" denied_host "" ""
fi
rm -f "$SRC"
finish_set
