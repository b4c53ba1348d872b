#!/usr/bin/env bash
# The web UI's browser acceptance test (issue 6): playwright-core (pinned in
# tests/webui/package.json, installed into tests/webui/node_modules) drives Debian's
# chromium against a real `quarry serve` on free loopback ports with a temporary data
# directory, and writes to a share over SMB with smbclient. Screenshots of every page go
# to $WEBUI_ARTIFACTS (default target/webui-artifacts). Run from anywhere; dev/test runs it.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

# shellcheck source=dev/lib.sh
. dev/lib.sh
install_packages_for_commands chromium:chromium smbclient:smbclient npm:npm
if [ ! -d tests/webui/node_modules/playwright-core ]; then
    (cd tests/webui && npm ci --no-audit --no-fund --loglevel=error)
fi

# dev/test's build exactly (whole workspace, all targets, its feature set): cargo
# resolves features per selection, so building `-p quarry` alone would compile quarry
# and part of its dependency graph a second time.
# shellcheck disable=SC2086
cargo build -q --workspace --all-targets ${QUARRY_CARGO_FEATURES:-}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${QUARRY_BIN:-$TARGET/debug/quarry}
ARTIFACTS=${WEBUI_ARTIFACTS:-$TARGET/webui-artifacts}
rm -rf "$ARTIFACTS"
mkdir -p "$ARTIFACTS"

read -r HTTP SMB NVME HTTPS < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
DATA=$(mktemp -d)
PID=""
cleanup() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    rm -rf "$DATA"
}
trap cleanup EXIT

export QUARRY_ADMIN_PASSWORD=webui-admin-secret
"$BIN" serve --data "$DATA/data" --http-listen "127.0.0.1:$HTTP" --smb-listen "127.0.0.1:$SMB" \
    --nvme-listen "127.0.0.1:$NVME" --https-listen "127.0.0.1:$HTTPS" >"$ARTIFACTS/quarry.log" 2>&1 &
PID=$!
for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$HTTP/api/v1/health" >/dev/null && break
    kill -0 "$PID" 2>/dev/null || { echo "webui: quarry exited early:"; cat "$ARTIFACTS/quarry.log"; exit 1; }
    sleep 0.1
done

QUARRY_URL="http://127.0.0.1:$HTTP" QUARRY_SMB_PORT=$SMB WEBUI_ARTIFACTS=$ARTIFACTS \
    timeout 240 node tests/webui/acceptance.mjs
