# deploy/dev/lib.sh — shared by the deploy scripts (source it; defines
# functions only). One way to get a missing tool on every script: as root,
# install its Debian package (apt-get, under a machine-wide lock so parallel
# scripts do not fight over dpkg; `apt-get update` only when the first try
# fails); otherwise stop with the exact command to run.
#
#   need_command CMD PACKAGE [WHAT]   CMD on PATH, else install PACKAGE
#   reserve_ports PORT...             keep outgoing connections off these ports
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

# reserve_ports PORT... — keep the kernel from giving these ports to outgoing
# connections. Linux picks the local port of every outgoing TCP connection
# from net.ipv4.ip_local_port_range (32768-60999 by default); a service port
# inside it (PostgreSQL's 543xx, the outage broker's 39092) can be held by
# any client's connection (a broker's, a test's) at the moment the service
# starts, and its bind then fails with "Address already in use" although
# nothing listens there (CI saw it: PostgreSQL 16 on 54316). Reserved ports
# (net.ipv4.ip_local_reserved_ports) are never picked. Only root may add
# them (for this network namespace, until reboot); otherwise this says how.
reserve_ports() {
    local file=/proc/sys/net/ipv4/ip_local_reserved_ports lo hi port missing=()
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
    [[ -r $file ]] || return 0
    for port; do
        ((port >= lo && port <= hi)) || continue
        _port_reserved "$port" "$(<"$file")" || missing+=("$port")
    done
    ((${#missing[@]})) || return 0
    local list
    list=$(IFS=,; echo "${missing[*]}")
    if [[ $(id -u) -ne 0 || ! -w $file ]]; then
        _lib_log "warning: ports $list lie in the range the kernel gives outgoing connections ($lo-$hi); a connection holding one makes the service's start fail with 'Address already in use'. Reserve them: sudo sysctl -w net.ipv4.ip_local_reserved_ports=\"$list\" (appending to what it already holds)"
        return 0
    fi
    mkdir -p /tmp/walrelay-ports
    (
        flock -w 60 8 || exit 1
        local cur
        cur=$(<"$file")
        echo "${cur:+$cur,}$list" >"$file"
    ) 8>/tmp/walrelay-ports/lock ||
        _lib_log "warning: could not add $list to $file; see the warning's reason above"
    _lib_log "reserved ports $list from the kernel's outgoing-connection range ($lo-$hi) so no client connection can hold them (net.ipv4.ip_local_reserved_ports)"
}

# _port_reserved PORT LIST: PORT is in LIST ("a-b,c,...", the kernel's format).
_port_reserved() {
    local port=$1 item a b
    local IFS=,
    for item in $2; do
        a=${item%-*}; b=${item#*-}
        ((port >= a && port <= b)) && return 0
    done
    return 1
}
