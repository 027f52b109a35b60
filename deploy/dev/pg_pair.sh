#!/usr/bin/env bash
# deploy/dev/pg_pair.sh - a PostgreSQL primary and a physical standby, for the failover
# test (tests/failover.rs) and for trying a failover by hand.
#
# Usage:  PG_MAJOR=17|18 deploy/dev/pg_pair.sh up|down|promote|stop-primary|env
#
#   up            primary on 127.0.0.1:(55400+major), standby on 127.0.0.1:(55500+major),
#                 then print env lines on stdout:  eval "$(deploy/dev/pg_pair.sh up)"
#   stop-primary  stop the primary with `pg_ctl stop -m immediate` (a crash: no checkpoint)
#   promote       `pg_ctl promote` the standby (it becomes the primary, timeline 2)
#   down          stop both and delete their state (ok if not running)
#   env           print the env lines only
#
# The pair is set up the way docs/operations.md ("PostgreSQL failover") tells operators
# to: the standby streams from the physical slot `standby1` with hot_standby_feedback and
# sync_replication_slots = on (dbname in primary_conninfo), so it keeps a copy of every
# failover slot; the primary has synchronized_standby_slots = 'standby1', so logical
# walsenders never send a change the standby has not flushed. Failover slots need
# PostgreSQL 17+.
#
# The standby is made from the primary's data directory, copied while the primary is
# cleanly stopped (the npm server package has no pg_basebackup). Server binaries and the
# OS user come from deploy/dev/postgres.sh (`install`). State: <repo>/.state/pair<major>/.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
SELF="deploy/dev/pg_pair.sh"
PG_MAJOR=${PG_MAJOR:-18}
HOST=127.0.0.1
PRIMARY_PORT=$((55400 + PG_MAJOR))
STANDBY_PORT=$((55500 + PG_MAJOR))
STATE_DIR=$REPO_ROOT/.state/pair$PG_MAJOR
PRIMARY_DIR=$STATE_DIR/primary
STANDBY_DIR=$STATE_DIR/standby
READY_TIMEOUT_S=60

# shellcheck source=deploy/dev/lib.sh
. "$SCRIPT_DIR/lib.sh"

unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGPASSWORD PGPASSFILE PGSERVICE \
      PGSERVICEFILE PGOPTIONS PGDATA PGSSLMODE PGCLUSTER PGCONNECT_TIMEOUT || true

log() { printf 'pg_pair.sh[pg%s]: %s\n' "$PG_MAJOR" "$*" >&2; }
die() { printf 'pg_pair.sh[pg%s]: ERROR: %s\n' "$PG_MAJOR" "$*" >&2; exit 1; }

[[ $PG_MAJOR =~ ^[0-9]+$ ]] && ((PG_MAJOR >= 17)) ||
  die "failover slots need PostgreSQL 17+; PG_MAJOR=$PG_MAJOR"

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

pg_ctl() { as_pg "$PG_BIN/pg_ctl" "$@"; }
psql_at() { psql -X -q -v ON_ERROR_STOP=1 -h "$STATE_DIR/run" -p "$1" -U postgres -d postgres "${@:2}"; }
running() { [[ -f $1/postmaster.pid ]] && pg_ctl status -D "$1" >/dev/null 2>&1; }

start() {
  local dir=$1 name=$2
  pg_ctl start -D "$dir" -l "$STATE_DIR/$name.log" -w -t "$READY_TIMEOUT_S" -s >&2 || {
    tail -n 30 "$STATE_DIR/$name.log" >&2 || true
    die "starting the $name failed (log: $STATE_DIR/$name.log)"
  }
}

stop() {
  local dir=$1 mode=$2
  running "$dir" || return 0
  pg_ctl stop -D "$dir" -m "$mode" -w -t "$READY_TIMEOUT_S" -s >&2 || true
}

print_env() {
  printf 'export WALRELAY_PAIR_MAJOR=%q\n' "$PG_MAJOR"
  printf 'export WALRELAY_PAIR_PRIMARY_PORT=%q\n' "$PRIMARY_PORT"
  printf 'export WALRELAY_PAIR_STANDBY_PORT=%q\n' "$STANDBY_PORT"
}

cmd_up() {
  if running "$PRIMARY_DIR" && running "$STANDBY_DIR"; then
    log "already running"
    print_env
    return
  fi
  cmd_down
  reserve_ports "$PRIMARY_PORT" "$STANDBY_PORT"
  mkdir -p "$PRIMARY_DIR" "$STATE_DIR/run"
  chown -R "$OS_USER:" "$STATE_DIR"
  chmod 755 "$STATE_DIR" "$STATE_DIR/run"
  chmod 700 "$PRIMARY_DIR"
  as_pg "$PG_BIN/initdb" -D "$PRIMARY_DIR" -U postgres -E UTF8 --locale=C \
    --auth-local=trust --auth-host=scram-sha-256 --no-sync --no-instructions \
    >"$STATE_DIR/initdb.log" 2>&1 || { cat "$STATE_DIR/initdb.log" >&2; die "initdb failed"; }
  cat >>"$PRIMARY_DIR/postgresql.conf" <<EOF

# ---- walrelay failover pair (written by $SELF) ----
listen_addresses = '$HOST'
port = $PRIMARY_PORT
unix_socket_directories = '$STATE_DIR/run'
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
# Logical walsenders wait for the standby's physical slot: walrelay never receives
# (so never publishes) a change the standby does not have.
synchronized_standby_slots = 'standby1'
EOF
  cat >"$PRIMARY_DIR/pg_hba.conf" <<EOF
local   all          all                  trust
local   replication  all                  trust
host    all          all          $HOST/32   scram-sha-256
host    replication  all          $HOST/32   scram-sha-256
EOF
  start "$PRIMARY_DIR" primary
  psql_at "$PRIMARY_PORT" >&2 <<'SQL' || die "creating roles and the standby's slot failed"
SET client_min_messages = error;
ALTER ROLE postgres PASSWORD 'postgres';
CREATE ROLE walrelay LOGIN REPLICATION CREATEDB PASSWORD 'walrelay';
SELECT FROM pg_create_physical_replication_slot('standby1');
SQL
  # A base backup by copy: the primary stopped cleanly, its data directory copied.
  stop "$PRIMARY_DIR" fast
  cp -a "$PRIMARY_DIR" "$STANDBY_DIR"
  rm -f "$STANDBY_DIR/postmaster.pid"
  cat >>"$STANDBY_DIR/postgresql.conf" <<EOF

# ---- the standby (written by $SELF) ----
port = $STANDBY_PORT
primary_conninfo = 'host=$HOST port=$PRIMARY_PORT user=postgres password=postgres dbname=postgres application_name=standby1'
primary_slot_name = 'standby1'
sync_replication_slots = on
synchronized_standby_slots = ''
EOF
  as_pg touch "$STANDBY_DIR/standby.signal"
  start "$PRIMARY_DIR" primary
  start "$STANDBY_DIR" standby
  log "ready: primary $HOST:$PRIMARY_PORT, standby $HOST:$STANDBY_PORT (physical slot standby1)"
  print_env
}

cmd_down() {
  stop "$STANDBY_DIR" immediate
  stop "$PRIMARY_DIR" immediate
  rm -rf "$STATE_DIR"
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  stop-primary) stop "$PRIMARY_DIR" immediate ;;
  promote) pg_ctl promote -D "$STANDBY_DIR" -w -t "$READY_TIMEOUT_S" -s >&2 ;;
  env) print_env ;;
  *) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
