# Shared helpers for the image build and boot test scripts (sourced, not run).
# Why: every step logs its duration so slow steps show up in CI logs and in
# the build's timings file without anyone re-instrumenting the scripts.

set -euo pipefail

# Host packages the build and the boot test need (Debian names). CI starts from
# a fresh machine, so the scripts install what is missing themselves.
QUARRY_HOST_PACKAGES=(debootstrap erofs-utils dosfstools mtools fdisk ovmf
    qemu-system-x86 qemu-utils zstd e2fsprogs curl jq
    libibverbs-dev librdmacm-dev libclang-dev pkg-config)

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# step NAME CMD...: runs CMD, logs and records how long it took.
TIMINGS_FILE=${TIMINGS_FILE:-/dev/null}
step() {
    local name=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    log "step '$name' ..."
    "$@"
    t1=$(date +%s.%N)
    local dt
    dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    log "step '$name' took ${dt}s"
    printf '%-28s %8ss\n' "$name" "$dt" >>"$TIMINGS_FILE"
}

# Installs the host packages that are missing (apt-get update only when needed).
ensure_host_packages() {
    local missing=() p
    for p in "${QUARRY_HOST_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || die "missing host packages (${missing[*]}) and not root to install them"
    log "installing host packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    }
}

# Prints the Debian mirror the host's apt uses (deb822 or one-line sources), so
# the build uses whatever mirror or proxy this machine is set up for.
host_debian_mirror() {
    local uri=""
    if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
        uri=$(awk '
            /^URIs:/ { u = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") s = 1 }
            /^$/ { if (u != "" && s) { print u; exit } u = ""; s = 0 }
            END { if (u != "" && s) print u }' /etc/apt/sources.list.d/*.sources | head -n1)
    fi
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri=$(awk '$1 == "deb" && $0 ~ / bookworm( |$)/ { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/) { print $i; exit } }' /etc/apt/sources.list)
    fi
    [ -n "$uri" ] || uri=http://deb.debian.org/debian
    printf '%s\n' "${uri%/}"
}

# sha256 of files/dirs/strings given as arguments (content and relative names).
inputs_hash() {
    local a
    for a in "$@"; do
        if [ -d "$a" ]; then
            (cd "$a" && find . -type f -o -type l | LC_ALL=C sort | while read -r f; do
                printf '%s\n' "$f"; if [ -L "$f" ]; then readlink "$f"; else sha256sum <"$f"; fi
            done)
        elif [ -f "$a" ]; then
            sha256sum <"$a"
        else
            printf '%s\n' "$a"
        fi
    done | sha256sum | cut -c1-16
}
