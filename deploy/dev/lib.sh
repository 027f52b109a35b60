# deploy/dev/lib.sh — shared by the deploy scripts (source it; defines
# functions only). One way to get a missing tool on every script: as root,
# install its Debian package (apt-get, under a machine-wide lock so parallel
# scripts do not fight over dpkg; `apt-get update` only when the first try
# fails); otherwise stop with the exact command to run.
#
#   need_command CMD PACKAGE [WHAT]   CMD on PATH, else install PACKAGE
#
# The caller's `log`/`die` are used when defined.

_lib_log() { if declare -F log >/dev/null; then log "$@"; else echo "$*" >&2; fi; }
_lib_die() { if declare -F die >/dev/null; then die "$@"; else echo "error: $*" >&2; exit 1; fi; }

apt_install_package() {
    local package=$1 why=${2:-$1}
    if [[ $(id -u) -ne 0 ]]; then
        _lib_die "$why is missing and this is not root; install it: sudo apt-get install -y $package"
    fi
    _lib_log "$why is missing; installing Debian package $package (apt-get) ..."
    mkdir -p /tmp/walrelay-apt
    (
        flock -w 900 8 || _lib_die "timed out waiting for the apt lock /tmp/walrelay-apt/lock"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q --no-install-recommends "$package" </dev/null >&2 && exit 0
        apt-get update -q </dev/null >&2 &&
            apt-get install -y -q --no-install-recommends "$package" </dev/null >&2
    ) 8>/tmp/walrelay-apt/lock ||
        _lib_die "apt-get install $package failed; run it by hand: apt-get update && apt-get install -y $package"
}

need_command() {
    local cmd=$1 package=$2 why=${3:-"'$1'"}
    command -v "$cmd" >/dev/null 2>&1 && return 0
    apt_install_package "$package" "$why"
    command -v "$cmd" >/dev/null 2>&1 || _lib_die "$why still not found after installing $package"
}
