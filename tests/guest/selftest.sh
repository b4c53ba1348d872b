#!/usr/bin/env bash
# Proves the harness can fail: a run with a wrong SMB password, a missing
# parameter and an unknown check set must exit 1 with exactly those checks
# failing (and smoke passing in the same boot), and a run cut short by
# --timeout must exit 3. Two guest boots, about 40 s on idle cores.
#
# Usage: tests/guest/selftest.sh
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Too short for the kernel to reach /init under TCG.
SELFTEST_TIMEOUT_SECS=4

guest_ensure_reference_prereqs
trap guest_stop_smbd EXIT
guest_start_smbd lab root "right-$RANDOM$RANDOM"

failures=0
expect() { # DESCRIPTION CONDITION...
    local what="$1"
    shift
    if "$@"; then
        echo "SELFTEST PASS $what"
    else
        echo "SELFTEST FAIL $what"
        failures=$((failures + 1))
    fi
}

set +e
out="$("$GUEST_DIR/run.sh" --quiet --checks smoke,cifs,nvme_tcp,nosuch --timeout 600 \
    --param SMB_ADDR=10.0.2.2 --param "SMB_PORT=$GUEST_SMBD_PORT" --param SMB_SHARE=lab \
    --param SMB_USER=root --param SMB_PASS=wrong-password --param SMB_MOUNTS=vers=3.0)"
rc=$?
set -e
echo "$out"
expect "failing run exits 1" [ "$rc" -eq 1 ]
expect "smoke still passes" grep -q '^GUEST-CHECK smoke.ping PASS' <<<"$out"
expect "wrong password fails the mount" grep -q '^GUEST-CHECK cifs.3.0.mount FAIL' <<<"$out"
expect "missing parameter fails" grep -q '^GUEST-CHECK nvme_tcp.params FAIL missing: NVME_ADDR NVME_NQN' <<<"$out"
expect "unknown set fails" grep -q '^GUEST-CHECK nosuch FAIL no-such-check-set' <<<"$out"
expect "verdict line says FAIL" grep -q '^GUEST-RESULT FAIL pass=3 fail=3 ' <<<"$out"

set +e
out="$("$GUEST_DIR/run.sh" --quiet --checks smoke --timeout "$SELFTEST_TIMEOUT_SECS")"
rc=$?
set -e
echo "$out"
expect "timeout exits 3" [ "$rc" -eq 3 ]
expect "timeout named in the verdict" grep -q '^GUEST-RESULT FAIL .*reason="timeout' <<<"$out"

[ "$failures" -eq 0 ] && echo "SELFTEST RESULT PASS" || echo "SELFTEST RESULT FAIL ($failures)"
[ "$failures" -eq 0 ]
