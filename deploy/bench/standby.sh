#!/usr/bin/env bash
# deploy/bench/standby.sh - capture from the primary against capture from a hot
# standby: walrelay's drain rate, and the CPU each PostgreSQL server spends
# while walrelay drains the same backlog.
#
# Usage: deploy/bench/standby.sh [--rows N] [--runs N] [--walrelay PATH]
#
#   --rows N      outbox rows of ~350 bytes, in 10-row transactions (default 200000)
#   --runs N      runs of each mode (default 3; the table prints each and the median)
#   --walrelay P  the binary (default target/release/walrelay, built if missing)
#
# A primary/standby pair of its own (deploy/dev/pg_pair.sh, PAIR_NAME=benchpair,
# ports 55618/55718 unless PAIR_PORTS says otherwise; PG_MAJOR, default 18) and
# the dev broker (WALRELAY_KAFKA_BROKERS, default 127.0.0.1:19092). Per run and
# mode (P: capture_from = "primary", S: capture_from = "standby"), alternating:
#   1. a slot is created (on the primary for P, on the standby for S) and the
#      backlog is written on the primary after it; the standby replays it;
#   2. walrelay starts on the slot ([snapshot] mode = "no_data") and drains the
#      backlog; time = from its `streaming` log line (the start's lease, checks
#      and Kafka set-up left out) to the last record in Kafka (the topic's end
#      offsets, polled every 0.2 s, as deploy/bench/incremental.sh);
#   3. CPU = user + system seconds of each server's processes from walrelay's
#      start to the last record (the postmaster, its live children, and its
#      reaped children's totals from /proc/<pid>/stat), and walrelay's own.
# The point of S: the decoding (the walsender) moves from the primary to the
# standby; the primary's CPU during the drain is what capture costs it.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
ROWS=200000
RUNS=3
BIN=$ROOT/target/release/walrelay
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rows) ROWS=${2:?}; shift 2 ;;
    --runs) RUNS=${2:?}; shift 2 ;;
    --walrelay) BIN=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "standby.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
log() { echo "bench: $*" >&2; }

[[ -x $BIN ]] || (cd "$ROOT" && cargo build --release >&2)
BROKERS=${WALRELAY_KAFKA_BROKERS:-127.0.0.1:19092}
export PAIR_NAME=benchpair PAIR_PORTS=${PAIR_PORTS:-55618,55718} PG_MAJOR=${PG_MAJOR:-18}
pair() { "$ROOT/deploy/dev/pg_pair.sh" "$@"; }
eval "$(pair up)"
PRIMARY=$WALRELAY_PAIR_PRIMARY_PORT STANDBY=$WALRELAY_PAIR_STANDBY_PORT
STATE=$ROOT/.state/$PAIR_NAME
export PGPASSWORD=postgres
psql_() { # <port> <psql args>...
  psql -X -q -t -A -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres "${@:2}"
}

STAMP=$(date +%s)
DB=bench_sb_$STAMP
OUT=$ROOT/.state/bench/standby-$STAMP
mkdir -p "$OUT"
RELAY=
cleanup() {
  [[ -z $RELAY ]] || { kill -TERM "$RELAY" 2>/dev/null || true; wait "$RELAY" 2>/dev/null || true; }
  pair down >/dev/null 2>&1 || true
}
trap cleanup EXIT

log "database $DB on the pair (PostgreSQL $PG_MAJOR; output in $OUT)"
psql_ "$PRIMARY" -d postgres -c "CREATE DATABASE $DB OWNER walrelay"
psql_ "$PRIMARY" -d "$DB" <<'SQL'
CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text,
  type text NOT NULL, payload jsonb);
ALTER TABLE outbox OWNER TO walrelay;
CREATE PROCEDURE fill(n int) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n / 10 LOOP
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT gen_random_uuid(), 'order', 'agg-' || ((i * 10 + g) % 1000), 'Created',
           jsonb_build_object('n', i * 10 + g, 'pad', repeat('x', 300))
    FROM generate_series(1, 10) g;
    COMMIT;
  END LOOP;
END $$;
SQL

cpu() { # <port>: CPU seconds of that server's processes so far
  local dir
  for dir in "$STATE/a" "$STATE/b"; do
    grep -qx "port = $1" <(grep '^port = ' "$dir/postgresql.conf" | tail -1) || continue
    python3 - "$(head -1 "$dir/postmaster.pid")" <<'PY'
import os, sys
tick = os.sysconf("SC_CLK_TCK")
def fields(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    return s[s.rindex(")") + 2:].split()  # from field 3 (state) on
root = sys.argv[1]
f = fields(root)
total = sum(int(x) for x in f[11:15])  # utime stime cutime cstime
for child in os.listdir("/proc"):
    if not child.isdigit():
        continue
    try:
        c = fields(child)
    except OSError:
        continue
    if c[1] == root:  # its parent is the postmaster
        total += sum(int(x) for x in c[11:15])
print(f"{total / tick:.2f}")
PY
    return
  done
  echo "no server on port $1" >&2
  return 1
}

records() { # <topic>: records in the topic (its partitions' end offsets summed)
  local parts p
  parts=$(kcat -b "$BROKERS" -L -t "$1" 2>/dev/null | grep -c "partition " || true)
  for ((p = 0; p < parts; p++)); do
    kcat -b "$BROKERS" -Q -t "$1:$p:-1" 2>/dev/null || true
  done | awk '{ n += $NF } END { print n + 0 }'
}

own_cpu() { # <pid>: user + system seconds of a live process
  awk -v t="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / t }' "/proc/$1/stat"
}

one() { # <mode P|S> <run>: prints "mode run rows/s primary_cpu standby_cpu walrelay_cpu"
  local mode=$1 run=$2 name slot_port capture end t0 t1 p0 p1 s0 s1 w got
  name=sb_$(tr 'PS' 'ps' <<<"$mode")_${STAMP}_$run
  psql_ "$PRIMARY" -d "$DB" -c "CREATE PUBLICATION ${name} FOR TABLE outbox"
  if [[ $mode == S ]]; then
    slot_port=$STANDBY
    capture="capture_from = \"standby\"
standby_host = \"127.0.0.1:$STANDBY\""
    # The standby creates the slot at the primary's next running-transactions record.
    (for _ in $(seq 1 30); do sleep 1; psql_ "$PRIMARY" -d postgres -c "SELECT pg_log_standby_snapshot()" >/dev/null; done) &
    local nudger=$!
    psql_ "$STANDBY" -d "$DB" -c "SELECT pg_create_logical_replication_slot('$name', 'pgoutput')" >/dev/null
    kill "$nudger" 2>/dev/null || true
  else
    slot_port=$PRIMARY
    capture=
    psql_ "$PRIMARY" -d "$DB" -c "SELECT pg_create_logical_replication_slot('$name', 'pgoutput')" >/dev/null
  fi
  psql_ "$PRIMARY" -d "$DB" -c "CALL fill($ROWS)"
  end=$(psql_ "$PRIMARY" -d postgres -c "SELECT pg_current_wal_lsn()")
  until [[ $(psql_ "$STANDBY" -d postgres -c "SELECT pg_last_wal_replay_lsn() >= '$end'") == t ]]; do sleep 0.2; done
  cat >"$OUT/$name.toml" <<TOML
[connector]
name = "$name"
[postgres]
host = "127.0.0.1:$PRIMARY"
$capture
user = "walrelay"
password = "walrelay"
database = "$DB"
slot = "$name"
publication = "$name"
[kafka]
brokers = "$BROKERS"
[snapshot]
mode = "no_data"
[[outbox]]
table = "public.outbox"
topic = "$name.{aggregatetype}"
TOML
  p0=$(cpu "$PRIMARY") s0=$(cpu "$STANDBY")
  "$BIN" run --config "$OUT/$name.toml" >"$OUT/$name.log" 2>&1 &
  RELAY=$!
  until grep -q ' streaming ' "$OUT/$name.log"; do
    kill -0 "$RELAY" 2>/dev/null || { log "$name: walrelay exited before streaming"; return 1; }
    sleep 0.05
  done
  t0=$(date +%s.%N)
  while :; do
    got=$(records "$name.order")
    ((got >= ROWS)) && break
    kill -0 "$RELAY" 2>/dev/null || { log "$name: walrelay exited with $got/$ROWS records"; return 1; }
    sleep 0.2
  done
  t1=$(date +%s.%N)
  p1=$(cpu "$PRIMARY") s1=$(cpu "$STANDBY") w=$(own_cpu "$RELAY")
  kill -TERM "$RELAY"
  wait "$RELAY" || true
  RELAY=
  for _ in $(seq 1 50); do # the walsender may take a moment to release the slot
    psql_ "$slot_port" -d postgres -c "SELECT pg_drop_replication_slot('$name')" >/dev/null 2>&1 && break
    sleep 0.2
  done
  awk -v m="$mode" -v r="$run" -v n="$ROWS" -v t0="$t0" -v t1="$t1" -v p0="$p0" -v p1="$p1" \
    -v s0="$s0" -v s1="$s1" -v w="$w" \
    'BEGIN { printf "%s %d %.0f %.2f %.2f %.2f\n", m, r, n / (t1 - t0), p1 - p0, s1 - s0, w }'
}

results=$OUT/results.txt
for run in $(seq 1 "$RUNS"); do
  for mode in P S; do
    log "run $run, ${mode}: draining $ROWS rows"
    one "$mode" "$run" | tee -a "$results" >&2
  done
done

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
echo "| mode | rows/s (each run) | median rows/s | primary CPU s (median) | standby CPU s (median) | walrelay CPU s (median) |"
echo "|---|---|---|---|---|---|"
for mode in P S; do
  rows=$(awk -v m="$mode" '$1 == m { printf "%s%s", sep, $3; sep = ", " }' "$results")
  printf '| %s | %s | %s | %s | %s | %s |\n' \
    "$([[ $mode == P ]] && echo 'capture_from = "primary"' || echo 'capture_from = "standby"')" "$rows" \
    "$(awk -v m="$mode" '$1 == m { print $3 }' "$results" | median)" \
    "$(awk -v m="$mode" '$1 == m { print $4 }' "$results" | median)" \
    "$(awk -v m="$mode" '$1 == m { print $5 }' "$results" | median)" \
    "$(awk -v m="$mode" '$1 == m { print $6 }' "$results" | median)"
done
