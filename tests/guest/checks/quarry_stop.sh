#!/bin/sh
# Check set "quarry_stop": ends the in-guest Quarry started by quarry_target
# (SIGTERM, clean exit within 30 s) and shows the end of its log; fails when the
# log shows a panic.
#
# Check names: quarry_stop.{no_panic,exit}.
. /checks/common.sh

QUARRY_LOG_FILE=/tmp/quarry.log

no_panic() {
    ! grep -n -i 'panicked' "$QUARRY_LOG_FILE"
}

stop() {
    _pid="$(cat /tmp/quarry.pid 2>/dev/null)"
    [ -n "$_pid" ] || { echo "no pid file"; return 1; }
    kill -TERM "$_pid" || return 1
    _i=0
    while kill -0 "$_pid" 2>/dev/null && [ "$_i" -lt 300 ]; do
        sleep 0.1
        _i=$((_i + 1))
    done
    ! kill -0 "$_pid" 2>/dev/null || { kill -KILL "$_pid"; echo "still running after 30 s"; return 1; }
}

run_step quarry_stop.exit stop
echo "--- quarry log (last 80 lines) ---"
tail -n 80 "$QUARRY_LOG_FILE"
echo "---"
run_step quarry_stop.no_panic no_panic
finish_set
