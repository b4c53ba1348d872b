#!/bin/sh
# Check set "quarry_target": Quarry itself running INSIDE the guest (appended
# with run.sh --extra-cpio from quarry_overlay.sh), data on tmpfs, configured
# through its REST API with busybox wget: a volume, a subsystem allowing this
# guest's host NQN, the namespace, and (when QUARRY_RDMA_PORT is not empty) an
# NVMe/RDMA listener added through POST /api/v1/nvme/listeners on Soft-RoCE
# (rdma_rxe on eth0, set up here if it is not yet). Quarry keeps running for the
# sets after this one (nvme_rdma, nvme_dual, a benchmark...); quarry_stop ends it.
#
# Parameters:
#   NVME_NQN           subsystem NQN to create                          required
#   QUARRY_BIN         default /opt/quarry/bin/quarry
#   QUARRY_DATA        default /tmp/quarry (tmpfs)
#   QUARRY_ADDR        address Quarry listens on (default 10.0.2.15, eth0/rxe0)
#   QUARRY_HTTP_PORT   REST API port (default 8080)
#   QUARRY_TCP_PORT    NVMe/TCP port (--nvme-listen, default 4420)
#   QUARRY_RDMA_PORT   NVMe/RDMA port added through the API (default 4421; empty: none)
#   QUARRY_VOL_MIB     volume size (default 512)
#   QUARRY_IO_ENGINE   --nvme-io-engine (default uring: the ring serves tmpfs, which has no
#                      O_DIRECT in 6.1, through its buffered descriptor)
#   QUARRY_EXPECT_RDMA 1 (default): the RDMA listener must be accepted; 0: the API
#                      must refuse it with "RDMA listeners unavailable" (a build
#                      without the feature)
#
# Check names: quarry_target.{rxe,start,rdma_status,login,volume,subsystem,
# namespace,rdma_listener,listeners}.
. /checks/common.sh

need quarry_target NVME_NQN
QUARRY_BIN="${QUARRY_BIN:-/opt/quarry/bin/quarry}"
QUARRY_DATA="${QUARRY_DATA:-/tmp/quarry}"
QUARRY_ADDR="${QUARRY_ADDR:-10.0.2.15}"
QUARRY_HTTP_PORT="${QUARRY_HTTP_PORT:-8080}"
QUARRY_TCP_PORT="${QUARRY_TCP_PORT:-4420}"
QUARRY_RDMA_PORT="${QUARRY_RDMA_PORT-4421}"
QUARRY_VOL_MIB="${QUARRY_VOL_MIB:-512}"
QUARRY_IO_ENGINE="${QUARRY_IO_ENGINE:-uring}"
QUARRY_EXPECT_RDMA="${QUARRY_EXPECT_RDMA:-1}"
QUARRY_PASSWORD="quarry-guest-admin"
QUARRY_LOG_FILE=/tmp/quarry.log
API="http://$QUARRY_ADDR:$QUARRY_HTTP_PORT/api/v1"
HOSTNQN="$(guest_hostnqn)"

rxe() {
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

start() {
    [ -x "$QUARRY_BIN" ] || { echo "no $QUARRY_BIN (append quarry_overlay.sh's cpio)"; return 1; }
    mkdir -p "$QUARRY_DATA"
    QUARRY_ADMIN_PASSWORD="$QUARRY_PASSWORD" QUARRY_LOG="${QUARRY_LOG:-info}" \
        "$QUARRY_BIN" serve --data "$QUARRY_DATA" \
        --http-listen "$QUARRY_ADDR:$QUARRY_HTTP_PORT" \
        --https-listen off \
        --smb-listen "$QUARRY_ADDR:4445" \
        --nvme-listen "$QUARRY_ADDR:$QUARRY_TCP_PORT" \
        --nvme-io-engine "$QUARRY_IO_ENGINE" >"$QUARRY_LOG_FILE" 2>&1 &
    echo $! >/tmp/quarry.pid
    _i=0
    while [ "$_i" -lt 600 ]; do
        wget -q -O /dev/null "$API/health" 2>/dev/null && return 0
        kill -0 "$(cat /tmp/quarry.pid)" 2>/dev/null || { tail -n 20 "$QUARRY_LOG_FILE"; return 1; }
        sleep 0.1
        _i=$((_i + 1))
    done
    tail -n 20 "$QUARRY_LOG_FILE"
    return 1
}

RDMA_LINE=""
rdma_status() {
    # The one startup line about RDMA listeners.
    RDMA_LINE="$(grep -m1 'RDMA listeners' "$QUARRY_LOG_FILE" | sed 's/.*RDMA listeners/RDMA listeners/' | cut -c1-200)"
    [ -n "$RDMA_LINE" ] || { echo "no 'RDMA listeners' line in the log"; return 1; }
    if [ "$QUARRY_EXPECT_RDMA" = 1 ]; then
        echo "$RDMA_LINE" | grep -q 'available' && ! echo "$RDMA_LINE" | grep -q unavailable
    else
        echo "$RDMA_LINE" | grep -q 'unavailable:'
    fi
}

TOKEN=""
login() {
    _out="$(wget -q -O- --header 'Content-Type: application/json' \
        --post-data "{\"username\":\"admin\",\"password\":\"$QUARRY_PASSWORD\"}" "$API/auth/login")" || return 1
    TOKEN="$(echo "$_out" | sed -n 's/.*"token" *: *"\([^"]*\)".*/\1/p')"
    [ -n "$TOKEN" ] || { echo "no token in $_out"; return 1; }
    echo "$TOKEN" >/tmp/quarry.token
}

# The token is kept in /tmp/quarry.token (run_step runs steps in a subshell);
# later sets (a benchmark, NVME_NS_ADD_CMD) can use it too.
post() { # PATH JSON
    wget -q -O- --header "Authorization: Bearer $(cat /tmp/quarry.token)" --header 'Content-Type: application/json' \
        --post-data "$2" "$API$1"
}

volume() { post /volumes "{\"name\":\"guestvol\",\"size_bytes\":$((QUARRY_VOL_MIB * 1048576))}"; }
subsystem() { post /nvme/subsystems "{\"nqn\":\"$NVME_NQN\",\"allow_any_host\":false,\"hosts\":[\"$HOSTNQN\"]}"; }
namespace() { post "/nvme/subsystems/$NVME_NQN/namespaces" '{"volume":"guestvol"}'; }

rdma_listener() {
    _body="{\"transport\":\"rdma\",\"address\":\"$QUARRY_ADDR\",\"port\":$QUARRY_RDMA_PORT}"
    if [ "$QUARRY_EXPECT_RDMA" = 1 ]; then
        post /nvme/listeners "$_body"
    else
        # busybox wget hides the body of an error answer: the refusal must be a 4xx.
        ! post /nvme/listeners "$_body"
    fi
}

LISTENERS=""
listeners() {
    _out="$(wget -q -O- --header "Authorization: Bearer $(cat /tmp/quarry.token)" "$API/nvme/listeners")" || return 1
    echo "$_out"
    LISTENERS="$(echo "$_out" | tr ',' '\n' | grep -c '"transport"') listeners: $(echo "$_out" | grep -o '"transport":"[a-z]*"' | tr '\n' ' ')"
    echo "$_out" | grep -q '"transport":"tcp"' || return 1
    if [ "$QUARRY_EXPECT_RDMA" = 1 ] && [ -n "$QUARRY_RDMA_PORT" ]; then
        echo "$_out" | grep -q '"transport":"rdma"' || return 1
    fi
}

if [ -n "$QUARRY_RDMA_PORT" ]; then
    run_step quarry_target.rxe rxe
fi
run_step quarry_target.start start || { finish_set; exit 1; }
if rdma_status >/tmp/qs.log 2>&1; then pass quarry_target.rdma_status "$RDMA_LINE"; else cat /tmp/qs.log; fail quarry_target.rdma_status "$RDMA_LINE"; fi
run_step quarry_target.login login || { finish_set; exit 1; }
run_step quarry_target.volume volume
run_step quarry_target.subsystem subsystem
run_step quarry_target.namespace namespace
if [ -n "$QUARRY_RDMA_PORT" ]; then
    run_step quarry_target.rdma_listener rdma_listener
fi
if listeners >/tmp/ql.log 2>&1; then pass quarry_target.listeners "$LISTENERS"; else cat /tmp/ql.log; fail quarry_target.listeners "$LISTENERS"; fi
finish_set
