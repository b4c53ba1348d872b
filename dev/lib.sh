# shellcheck shell=bash
# Helpers shared by the developer commands (dev/test, dev/bench) and the test scripts
# they run (tests/suites/*.sh, tests/guest/lib.sh); sourced, bash.

# Installs those of the named Debian packages that are not installed yet, with one
# `apt-get update` and one `apt-get install` (through sudo unless root), so a fresh
# Debian machine gets what a command needs and a prepared one is left alone. Returns
# non-zero, after saying what failed, when apt-get does.
install_debian_packages() {
    local p missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    printf 'installing Debian packages: %s\n' "${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    if ! $sudo apt-get update -qq; then
        printf 'apt-get update failed\n' >&2
        return 1
    fi
    if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
        printf 'apt-get install %s failed\n' "${missing[*]}" >&2
        return 1
    fi
}

# Installs the package of each given "command:package" pair whose command is missing
# (from PATH, /usr/sbin and /sbin alike). Checking the command rather than the package
# leaves a tool alone that came another way (say node and npm from NodeSource, which
# Debian's npm package would conflict with).
install_packages_for_commands() {
    local pair cmd missing=()
    for pair in "$@"; do
        cmd="${pair%%:*}"
        if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ] && [ ! -x "/sbin/$cmd" ]; then
            missing+=("${pair#*:}")
        fi
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    install_debian_packages "${missing[@]}"
}
