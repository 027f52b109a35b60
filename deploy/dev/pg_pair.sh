#!/usr/bin/env bash
# deploy/dev/pg_pair.sh - a PostgreSQL primary and a physical standby, for the failover
# test (tests/it/failover.rs), capture from a standby (tests/it/standby_capture.rs), the
# fault soak's `promote` fault, and trying a failover by hand.
#
# Usage:  PG_MAJOR=16|17|18 deploy/dev/pg_pair.sh COMMAND
#
#   up                 node a primary on 127.0.0.1:(55400+major), node b its standby on
#                      127.0.0.1:(55500+major); prints env lines on stdout:
#                      eval "$(deploy/dev/pg_pair.sh up)"
#   stop-primary       stop the current primary with `pg_ctl stop -m immediate` (a crash)
#   promote            `pg_ctl promote` the current standby: it is the primary from now on
#   rebuild-standby    after a promotion: make the other node a standby of the new primary
#                      again (the primary stops cleanly for the copy: a short outage)
#   restart-fast|restart-immediate
#                      stop the current primary in that mode and start it again
#   restart-standby-fast|restart-standby-immediate
#                      the same for the current standby
#   down               stop both and delete their state (ok if not running)
#   env                print the env lines only
#
# PAIR_NAME (default pair<major>) names the state directory <repo>/.state/<name>/, and
# PAIR_PORTS="A,B" overrides the two ports, so several pairs can run side by side.
#
# The pair is set up the way docs/operations.md ("PostgreSQL failover") tells operators
# to: the standby streams from the physical slot `standby1` with hot_standby_feedback and
# sync_replication_slots = on (dbname in primary_conninfo), so it keeps a copy of every
# failover slot; the primary has synchronized_standby_slots = 'standby1', so logical
# walsenders never send a change the standby has not flushed. Failover slots need
# PostgreSQL 17+; on 16 (logical decoding on a standby, no failover slots) the pair has
# neither setting.
#
# A standby is made from the primary's data directory, copied while the primary is
# cleanly stopped (the npm server package has no pg_basebackup), without the primary's
# replication slots (the standby synchronizes the failover slots itself). Server binaries
# and the OS user come from deploy/dev/postgres.sh (`install`).
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
SELF="deploy/dev/pg_pair.sh"
PG_MAJOR=${PG_MAJOR:-18}
HOST=127.0.0.1
PAIR_NAME=${PAIR_NAME:-pair$PG_MAJOR}
IFS=, read -r PORT_A PORT_B <<<"${PAIR_PORTS:-$((55400 + PG_MAJOR)),$((55500 + PG_MAJOR))}"
STATE_DIR=$REPO_ROOT/.state/$PAIR_NAME
# Sockets in a short directory of their own (paths stop at 107 bytes; see postgres.sh).
SOCKET_DIR=/tmp/walrelay-$PAIR_NAME
ROLE_FILE=$STATE_DIR/primary    # "a" or "b": the node that is the primary now
READY_TIMEOUT_S=60

# shellcheck source=deploy/dev/lib.sh
. "$SCRIPT_DIR/lib.sh"

unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGPASSWORD PGPASSFILE PGSERVICE \
      PGSERVICEFILE PGOPTIONS PGDATA PGSSLMODE PGCLUSTER PGCONNECT_TIMEOUT || true

log() { printf 'pg_pair.sh[%s]: %s\n' "$PAIR_NAME" "$*" >&2; }
die() { printf 'pg_pair.sh[%s]: ERROR: %s\n' "$PAIR_NAME" "$*" >&2; exit 1; }

[[ $PG_MAJOR =~ ^[0-9]+$ ]] && ((PG_MAJOR >= 16)) ||
  die "logical decoding on a standby needs PostgreSQL 16+ (failover slots 17+); PG_MAJOR=$PG_MAJOR"
[[ $PORT_A =~ ^[0-9]+$ && $PORT_B =~ ^[0-9]+$ ]] || die "PAIR_PORTS='${PAIR_PORTS:-}' is not A,B"

install_env=$(PG_MAJOR=$PG_MAJOR "$SCRIPT_DIR/postgres.sh" install) ||
  die "installing the server binaries failed (deploy/dev/postgres.sh install)"
eval "$install_env"
PG_BIN=$WALRELAY_PG_BIN
OS_USER=$WALRELAY_PG_OS_USER

as_pg() {
  if [[ $(id -u) -eq 0 ]]; then
    (cd / && runuser -u "$OS_USER" -- env -u LD_LIBRARY_PATH "$@")
  else
    (cd / && env -u LD_LIBRARY_PATH "$@")
  fi
}

dir_of() { echo "$STATE_DIR/$1"; }
port_of() { if [[ $1 == a ]]; then echo "$PORT_A"; else echo "$PORT_B"; fi; }
other() { if [[ $1 == a ]]; then echo b; else echo a; fi; }
primary() { cat "$ROLE_FILE" 2>/dev/null || echo a; }

pg_ctl() { as_pg "$PG_BIN/pg_ctl" "$@"; }
psql_at() { psql -X -q -v ON_ERROR_STOP=1 -h "$SOCKET_DIR" -p "$1" -U postgres -d postgres "${@:2}"; }
running() { [[ -f $1/postmaster.pid ]] && pg_ctl status -D "$1" >/dev/null 2>&1; }

start() {
  local node=$1
  pg_ctl start -D "$(dir_of "$node")" -l "$STATE_DIR/$node.log" -w -t "$READY_TIMEOUT_S" -s >&2 || {
    tail -n 30 "$STATE_DIR/$node.log" >&2 || true
    die "starting node $node failed (log: $STATE_DIR/$node.log)"
  }
}

stop() {
  local node=$1 mode=$2
  running "$(dir_of "$node")" || return 0
  pg_ctl stop -D "$(dir_of "$node")" -m "$mode" -w -t "$READY_TIMEOUT_S" -s >&2 || true
}

print_env() {
  local p
  p=$(primary)
  printf 'export WALRELAY_PAIR_MAJOR=%q\n' "$PG_MAJOR"
  printf 'export WALRELAY_PAIR_PRIMARY_PORT=%q\n' "$(port_of "$p")"
  printf 'export WALRELAY_PAIR_STANDBY_PORT=%q\n' "$(port_of "$(other "$p")")"
}

# Makes node $1 a standby of node $2 (running): $2 stops cleanly for the copy.
make_standby() {
  local standby=$1 from=$2 sdir fdir
  sdir=$(dir_of "$standby")
  fdir=$(dir_of "$from")
  psql_at "$(port_of "$from")" >&2 <<'SQL' || die "preparing the primary for a standby failed"
SET client_min_messages = error;
SELECT pg_drop_replication_slot('standby1')
  FROM pg_replication_slots WHERE slot_name = 'standby1';
SELECT FROM pg_create_physical_replication_slot('standby1');
SQL
  if ((PG_MAJOR >= 17)); then
    # Logical walsenders wait for the standby: walrelay never gets ahead of it.
    psql_at "$(port_of "$from")" -c "ALTER SYSTEM SET synchronized_standby_slots = 'standby1'" >&2 ||
      die "setting synchronized_standby_slots failed"
  fi
  stop "$standby" immediate
  stop "$from" fast
  rm -rf "$sdir"
  cp -a "$fdir" "$sdir"
  # Not the primary's slots: the standby synchronizes failover slots itself, and a
  # copied one of the same name would block that.
  rm -rf "${sdir:?}"/pg_replslot/* "$sdir/postmaster.pid" "$sdir/standby.signal"
  # Nor its synchronized_standby_slots: promoted, this node has no standby until
  # rebuild-standby gives it one (and sets it again), and logical walsenders would
  # wait for a slot that does not exist.
  sed -i '/^synchronized_standby_slots/d' "$sdir/postgresql.auto.conf"
  cat >>"$sdir/postgresql.conf" <<EOF

# ---- node $standby: a standby of node $from (written by $SELF) ----
port = $(port_of "$standby")
primary_conninfo = 'host=$HOST port=$(port_of "$from") user=postgres password=postgres dbname=postgres application_name=standby1'
primary_slot_name = 'standby1'
EOF
  ((PG_MAJOR < 17)) || echo "sync_replication_slots = on" >>"$sdir/postgresql.conf"
  as_pg touch "$sdir/standby.signal"
  start "$from"
  start "$standby"
}

cmd_up() {
  if running "$(dir_of a)" && running "$(dir_of b)"; then
    log "already running"
    print_env
    return
  fi
  cmd_down
  reserve_ports "$PORT_A" "$PORT_B"
  mkdir -p "$(dir_of a)" "$SOCKET_DIR"
  chown -R "$OS_USER:" "$STATE_DIR" "$SOCKET_DIR"
  chmod 755 "$STATE_DIR" "$SOCKET_DIR"
  chmod 700 "$(dir_of a)"
  as_pg "$PG_BIN/initdb" -D "$(dir_of a)" -U postgres -E UTF8 --locale=C \
    --auth-local=trust --auth-host=scram-sha-256 --no-sync --no-instructions \
    >"$STATE_DIR/initdb.log" 2>&1 || { cat "$STATE_DIR/initdb.log" >&2; die "initdb failed"; }
  cat >>"$(dir_of a)/postgresql.conf" <<EOF

# ---- walrelay failover pair (written by $SELF) ----
listen_addresses = '$HOST'
port = $PORT_A
unix_socket_directories = '$SOCKET_DIR'
max_connections = 100
wal_level = logical
max_replication_slots = 16
max_wal_senders = 16
wal_sender_timeout = 10s
hot_standby = on
hot_standby_feedback = on
fsync = off
timezone = 'UTC'
log_timezone = 'UTC'
log_min_messages = warning
EOF
  cat >"$(dir_of a)/pg_hba.conf" <<EOF
local   all          all                  trust
local   replication  all                  trust
host    all          all          $HOST/32   scram-sha-256
host    replication  all          $HOST/32   scram-sha-256
EOF
  echo a >"$ROLE_FILE"
  start a
  psql_at "$PORT_A" >&2 <<'SQL' || die "creating roles failed"
SET client_min_messages = error;
ALTER ROLE postgres PASSWORD 'postgres';
CREATE ROLE walrelay LOGIN REPLICATION CREATEDB PASSWORD 'walrelay';
SQL
  make_standby b a
  log "ready: primary $HOST:$PORT_A (node a), standby $HOST:$PORT_B (node b)"
  print_env
}

cmd_down() {
  stop b immediate
  stop a immediate
  rm -rf "$STATE_DIR" "$SOCKET_DIR"
}

cmd_promote() {
  local p s
  p=$(primary)
  s=$(other "$p")
  pg_ctl promote -D "$(dir_of "$s")" -w -t "$READY_TIMEOUT_S" -s >&2 ||
    die "promoting node $s failed (log: $STATE_DIR/$s.log)"
  echo "$s" >"$ROLE_FILE"
  log "node $s ($HOST:$(port_of "$s")) is the primary now"
}

cmd_restart() { # cmd_restart <node> <mode>
  stop "$1" "$2"
  start "$1"
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  stop-primary) stop "$(primary)" immediate ;;
  promote) cmd_promote ;;
  rebuild-standby) make_standby "$(other "$(primary)")" "$(primary)" ;;
  restart-fast) cmd_restart "$(primary)" fast ;;
  restart-immediate) cmd_restart "$(primary)" immediate ;;
  restart-standby-fast) cmd_restart "$(other "$(primary)")" fast ;;
  restart-standby-immediate) cmd_restart "$(other "$(primary)")" immediate ;;
  env) print_env ;;
  *) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
