#!/usr/bin/env bash
# deploy/bench/large_txn.sh - one large transaction (issue 42 part 1): streamed
# while it runs (postgres.stream_in_progress = true: pgoutput protocol 2,
# streaming 'on') against sent after its commit (false: protocol 1, the server
# spills it to its own disk past logical_decoding_work_mem and decodes it again
# after the commit). See docs/benchmarks.md "Large transactions".
#
# Usage: deploy/bench/large_txn.sh [--rows N] [--runs N] [--modes "true false"]
#                                  [--work-mem 64MB] [--walrelay PATH]
#                                  [--kafka-extra 'max_in_flight_bytes = "16MiB"']
#
#   --rows N      rows of the one transaction (default 1000000)
#   --runs N      runs of each mode (default 3), alternating: true, false, true, ...
#   --modes L     the stream_in_progress values to measure (default "true false")
#   --work-mem S  logical_decoding_work_mem of the database (default 64MB)
#   --kafka-extra T  TOML lines added to walrelay's [kafka] section
#   --walrelay P  the binary (default: target/release/walrelay, built from this
#                 tree with `cargo build --release` first)
#
# Services: deploy/dev/postgres.sh up and deploy/dev/kafka.sh up; PG_PORT and
# KAFKA_PORT choose a cluster / broker of one's own (PG_MAJOR the server,
# default 18). They are left running, as by deploy/bench/run.sh.
#
# Setup, once: a database of its own with deploy/bench/workload/schema.sql (the
# outbox table of deploy/bench/run.sh and its 10,000 aggregates with ~430-byte
# jsonb order documents), a publication of public.outbox, and
# `ALTER DATABASE ... SET logical_decoding_work_mem` (so the walsender, which
# connects to that database, decodes with it; checked with SHOW over a
# replication connection; the server's other databases keep theirs).
# Per run (a fresh connector name = slot = topic prefix):
#   TRUNCATE the outbox, CHECKPOINT; walrelay starts (create_slot = true,
#   [snapshot] mode = "no_data", sslmode = "require", stream_spill_dir in this
#   run's state directory, [health] on a free port) and its /healthz says
#   "streaming"; its two topics (<name>.BenchOrder, <name>.BenchPayment) were
#   created beforehand with 3 partitions and LogAppendTime (BenchAdmin.java).
#   Then ONE transaction: BEGIN; INSERT of N rows (random aggregates of the
#   10,000, as workload/outbox_insert.pgbench with k = N); COMMIT. psql runs
#   `date` right before COMMIT is sent and right after it returns.
#   Right after COMMIT returned: walrelay's VmHWM so far, and how far its
#   walsender's decoding (pg_stat_replication.sent_lsn) is behind the WAL's end.
#   Until walrelay_records_acked_total (its /metrics, polled every 100 ms)
#   reaches N. Then:
#     commit -> last in Kafka   newest LogAppendTime over the 6 partitions
#                               (kcat) - the time COMMIT returned (ms)
#     commit -> first in Kafka  oldest first-record LogAppendTime - the same
#     commit -> acked (metrics) the first poll that saw N acked - the same
#     server                    pg_stat_replication_slots of the slot:
#                               spill_txns/bytes, stream_txns/bytes, total_bytes
#                               (delta from before BEGIN, read until two reads
#                               1 s apart agree)
#     walrelay                  VmHWM (peak RSS) and user+system CPU from
#                               /proc/<pid>, walrelay_stream_spilled_bytes_total
#                               and walrelay_streamed_transactions_total from
#                               /metrics, read just before SIGTERM
#     its walsender             user+system CPU from /proc/<active_pid>/stat,
#                               read at the same moment (its whole life: the
#                               connection's start to the end of the run)
#     the records               the topics' end offsets must sum to N
#   walrelay is stopped (SIGTERM), the slot dropped.
# Output: every run, then per mode the median with min–max, as Markdown on
# stdout (and in .state/bench/large-txn-<stamp>/results.md, with every config
# and log). Progress on stderr.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
ROWS=1000000
RUNS=3
MODES="true false"
WORK_MEM=64MB
KAFKA_EXTRA=""
BIN=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rows) ROWS=${2:?}; shift 2 ;;
    --runs) RUNS=${2:?}; shift 2 ;;
    --modes) MODES=${2:?}; shift 2 ;;
    --work-mem) WORK_MEM=${2:?}; shift 2 ;;
    --kafka-extra) KAFKA_EXTRA=${2:?}; shift 2 ;;
    --walrelay) BIN=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "large_txn.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
log() { echo "bench: $*" >&2; }
die() { log "error: $*"; exit 1; }

STAMP=$(date -u +%Y%m%d-%H%M%S)
OUT=$ROOT/.state/bench/large-txn-$STAMP
mkdir -p "$OUT"

# ---- the binary: built from this tree unless named ---------------------------------
if [[ -z $BIN ]]; then
  log "building target/release/walrelay from this tree (cargo build --release)"
  (cd "$ROOT" && cargo build --release >&2) || die "cargo build --release failed"
  BIN=$ROOT/target/release/walrelay
  BUILT="this tree: $(git -C "$ROOT" rev-parse --short HEAD)"
  dirty=$(git -C "$ROOT" status --porcelain -- src Cargo.toml Cargo.lock | awk '{ print $2 }' | xargs)
  [[ -z $dirty ]] || BUILT+=" with uncommitted changes in $dirty"
else
  BUILT="given: $BIN"
fi
[[ -x $BIN ]] || die "no walrelay binary at $BIN"
# A copy, so a build during the runs cannot swap the binary under them.
cp "$BIN" "$OUT/walrelay"
BIN=$OUT/walrelay

# ---- services --------------------------------------------------------------------
eval "$("$ROOT/deploy/dev/postgres.sh" up)"
eval "$("$ROOT/deploy/dev/kafka.sh" up)"
PG_PORT_=$WALRELAY_PG_PORT
BROKERS=$WALRELAY_KAFKA_BROKERS
KAFKA_LIBS=$ROOT/.deps/kafka/$WALRELAY_KAFKA_VERSION/libs # kafka-clients for BenchAdmin.java
export PGPASSWORD=postgres
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT_" -U postgres "$@"; }

DB=bench_ltxn_${STAMP//-/_}
PIDS=() # what we started and have not stopped yet
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  psql_ -d postgres -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
                        WHERE database = '$DB' AND NOT active" >/dev/null 2>&1 || true
  psql_ -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

log "database $DB (state in $OUT)"
psql_ -d postgres -c "CREATE DATABASE $DB"
psql_ -d "$DB" -f "$SCRIPT_DIR/workload/schema.sql" >/dev/null
psql_ -d "$DB" -c "CREATE PUBLICATION ${DB}_pub FOR TABLE public.outbox"
psql_ -d postgres -c "ALTER DATABASE $DB SET logical_decoding_work_mem = '$WORK_MEM'"
# What a walsender of this database decodes with (SHOW is a replication command).
WM=$(PGPASSWORD=walrelay psql -X -At "host=127.0.0.1 port=$PG_PORT_ user=walrelay dbname=$DB replication=database" \
       -c "SHOW logical_decoding_work_mem") || die "SHOW over a replication connection failed"
log "logical_decoding_work_mem of a walsender of $DB: $WM (server default: $(psql_ -d postgres -At -c 'SHOW logical_decoding_work_mem'))"
PG_VERSION=$(psql_ -d postgres -At -c "SHOW server_version")

# ---- helpers ---------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
metric() { # <port> <name>: its value (the first series), 0 if absent or unreadable
  local text
  text=$(curl -s --max-time 5 "http://127.0.0.1:$1/metrics" || true)
  awk -v n="$2" '!found && ($1 == n || index($1, n "{") == 1) { v = $2; found = 1 }
                 END { print found ? v : 0 }' <<<"$text"
}
cpu_s() { # <pid>: user+system CPU seconds so far
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat"
}
hwm_mib() { awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }
slot_stats() { # <slot>: spill_txns spill_bytes stream_txns stream_bytes total_txns total_bytes
  psql_ -d "$DB" -At -F ' ' -c "SELECT spill_txns, spill_bytes, stream_txns, stream_bytes, total_txns, total_bytes
                                 FROM pg_stat_replication_slots WHERE slot_name = '$1'"
}
checkpoints() { psql_ -d postgres -At -c "SELECT num_timed + num_requested FROM pg_stat_checkpointer"; }
partition_ts() { # <topic> <offset spec>: LogAppendTime (ms) of one record per partition, one a line
  local p
  for p in 0 1 2; do
    kcat -b "$BROKERS" -C -q -e -t "$1" -p "$p" -o "$2" -c 1 -f '%T\n' 2>/dev/null || true
  done
}
end_offsets() { # <topic>: its partitions' end offsets summed
  local p
  for p in 0 1 2; do kcat -b "$BROKERS" -Q -t "$1:$p:-1" 2>/dev/null || true; done |
    awk '{ n += $NF } END { print n + 0 }'
}

config() { # <name> <stream_in_progress> <health port>
  cat <<TOML
[connector]
name = "$1"
[postgres]
host = "127.0.0.1"
port = $PG_PORT_
user = "walrelay"
password = "walrelay"
database = "$DB"
slot = "$1"
publication = "${DB}_pub"
create_slot = true
create_publication = false
sslmode = "require"
stream_in_progress = $2
stream_spill_dir = "$OUT/spill"
[kafka]
brokers = "$BROKERS"
$KAFKA_EXTRA
[[outbox]]
table = "public.outbox"
topic = "$1.{aggregatetype}"
[snapshot]
mode = "no_data"
[health]
listen = "127.0.0.1:$3"
TOML
}
mkdir -p "$OUT/spill"

# Topics up front: 3 partitions, LogAppendTime (the broker's clock is this machine's).
topics=()
for ((run = 1; run <= RUNS; run++)); do
  for mode in $MODES; do
    topics+=("${mode}_$run.BenchOrder" "${mode}_$run.BenchPayment")
  done
done
# The connector names carry the stamp: a stored offset of an earlier invocation
# never meets a fresh slot.
tag=${STAMP//-/}
topics=("${topics[@]/#/lt${tag}_}")
java -cp "$KAFKA_LIBS/*" "$SCRIPT_DIR/BenchAdmin.java" ensure-topics "$BROKERS" 3 "${topics[@]}" >&2 ||
  die "could not create the topics"

one_run() { # <mode> <run>: appends one line to $OUT/runs.tsv
  local mode=$1 run=$2 name=lt${tag}_${mode}_$2 port pid t0 lsn0 lsn1 tb tc te acked t_acked
  local s0 s1 s2 ws_pid ws_cpu cpu hwm hwm_c behind spilled streamed n ts_last ts_first cp0 cp1 load
  port=$(free_port)
  config "$name" "$mode" "$port" >"$OUT/$name.toml"
  psql_ -d "$DB" -c "TRUNCATE public.outbox" -c "CHECKPOINT"
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$BIN" run --config "$OUT/$name.toml" >"$OUT/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  t0=$SECONDS
  # 200 "ok: streaming" (503 "unhealthy: not streaming yet" while it connects).
  until [[ $(curl -sf --max-time 2 "http://127.0.0.1:$port/healthz" 2>/dev/null || true) == "ok: streaming"* ]]; do
    kill -0 "$pid" 2>/dev/null || die "walrelay exited before streaming: $OUT/$name.log"
    ((SECONDS - t0 < 60)) || die "walrelay not streaming after 60 s: $OUT/$name.log"
    sleep 0.2
  done
  ws_pid=$(psql_ -d "$DB" -At -c "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$name'")
  s0=$(slot_stats "$name"); s0=${s0:-0 0 0 0 0 0}
  cp0=$(checkpoints)
  log "run $run, stream_in_progress = $mode: $name, one transaction of $ROWS rows (load $load)"
  psql_ -d "$DB" -At >"$OUT/$name.lsn" <<SQL
SELECT pg_current_wal_lsn();
\! date +%s.%N > $OUT/$name.t_begin
BEGIN;
INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), b.aggregatetype, b.aggregateid,
       (ARRAY['OrderCreated', 'OrderPaid', 'OrderShipped', 'OrderDelivered'])[1 + floor(random() * 4)::int],
       b.payload
FROM (SELECT 1 + floor(random() * 10000)::int AS a FROM generate_series(1, $ROWS)) AS g
JOIN public.bench_aggregate AS b USING (a);
\! date +%s.%N > $OUT/$name.t_commit_sent
COMMIT;
\! date +%s.%N > $OUT/$name.t_committed
\! awk '/^VmHWM/ { printf "%.0f", \$2 / 1024 }' /proc/$pid/status > $OUT/$name.hwm_committed
SELECT pg_current_wal_lsn();
SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), sent_lsn)::bigint, -1) FROM pg_stat_replication WHERE pid = ${ws_pid:-0};
SQL
  tb=$(cat "$OUT/$name.t_begin") tc=$(cat "$OUT/$name.t_commit_sent") te=$(cat "$OUT/$name.t_committed")
  lsn0=$(sed -n 1p "$OUT/$name.lsn") lsn1=$(sed -n 2p "$OUT/$name.lsn") behind=$(sed -n 3p "$OUT/$name.lsn")
  hwm_c=$(cat "$OUT/$name.hwm_committed")
  # Until every record is acknowledged (acks=all): no progress for 180 s is a failure.
  local last=-1 since=$SECONDS
  while :; do
    acked=$(metric "$port" walrelay_records_acked_total)
    ((acked >= ROWS)) && { t_acked=$(date +%s.%N); break; }
    kill -0 "$pid" 2>/dev/null || die "walrelay exited with $acked/$ROWS acked: $OUT/$name.log"
    if ((acked != last)); then last=$acked since=$SECONDS; fi
    ((SECONDS - since < 180)) || die "walrelay stuck at $acked/$ROWS acked for 180 s: $OUT/$name.log"
    sleep 0.1
  done
  # The server's counters settle once the walsender has sent the commit.
  s1=$(slot_stats "$name")
  for _ in $(seq 1 15); do
    sleep 1
    s2=$(slot_stats "$name")
    [[ $s2 == "$s1" ]] && break
    s1=$s2
  done
  cp1=$(checkpoints)
  spilled=$(metric "$port" walrelay_stream_spilled_bytes_total)
  streamed=$(metric "$port" walrelay_streamed_transactions_total)
  hwm=$(hwm_mib "$pid")
  cpu=$(cpu_s "$pid")
  ws_cpu=$( [[ -n $ws_pid && -r /proc/$ws_pid/stat ]] && cpu_s "$ws_pid" || echo "")
  kill -TERM "$pid"
  wait "$pid" || log "walrelay exited non-zero after SIGTERM: $OUT/$name.log"
  local keep=() p
  for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
  for _ in $(seq 1 60); do # the walsender may take a moment to let go of it
    psql_ -d postgres -At -c "SELECT pg_drop_replication_slot('$name')" >/dev/null 2>&1 && break
    sleep 0.5
  done
  n=$(( $(end_offsets "$name.BenchOrder") + $(end_offsets "$name.BenchPayment") ))
  ((n == ROWS)) || log "warning: $name's topics hold $n records, expected $ROWS"
  ts_last=$( { partition_ts "$name.BenchOrder" -1; partition_ts "$name.BenchPayment" -1; } | sort -n | tail -1)
  ts_first=$( { partition_ts "$name.BenchOrder" beginning; partition_ts "$name.BenchPayment" beginning; } | sort -n | head -1)
  local warns
  warns=$(grep -cE ' (WARN|ERROR) ' "$OUT/$name.log" || true)
  # shellcheck disable=SC2086
  printf '%s\n' "$(
    python3 - "$mode" "$run" "$name" "$load" "$tb" "$tc" "$te" "$t_acked" "$ts_first" "$ts_last" \
      "$lsn0" "$lsn1" "$hwm" "$cpu" "${ws_cpu:-nan}" "$spilled" "$streamed" "$n" "$((cp1 - cp0))" "$warns" \
      "$hwm_c" "${behind:--1}" $s0 $s2 <<'PY'
import sys
a = sys.argv[1:]
mode, run, name, load = a[0], a[1], a[2], a[3]
tb, tc, te, tack = map(float, a[4:8])
tfirst, tlast = int(a[8]) / 1000, int(a[9]) / 1000
def lsn(s):
    hi, lo = s.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)
wal = lsn(a[11]) - lsn(a[10])
s0, s2 = list(map(int, a[22:28])), list(map(int, a[28:34]))
d = [y - x for x, y in zip(s0, s2)]
print("\t".join(map(str, [mode, run, name, load, f"{tc - tb:.2f}", f"{te - tc:.3f}",
    f"{tfirst - te:.2f}", f"{tlast - te:.2f}", f"{tack - te:.2f}", f"{wal / 2**20:.0f}",
    d[0], d[1], d[2], d[3], d[4], d[5], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20],
    f"{int(a[21]) / 2**20:.0f}" if int(a[21]) >= 0 else "?"])))
PY
  )" >>"$OUT/runs.tsv"
  log "  $(tail -1 "$OUT/runs.tsv")"
}

log "walrelay: $BUILT; PostgreSQL $PG_VERSION; logical_decoding_work_mem $WM"
for ((run = 1; run <= RUNS; run++)); do
  for mode in $MODES; do one_run "$mode" "$run"; done
done

python3 - "$OUT/runs.tsv" "$ROWS" "$WM" "$PG_VERSION" "$BUILT" "$(nproc)" <<'PY' | tee "$OUT/results.md"
import statistics, sys
path, rows, wm, pgv, built, cores = sys.argv[1:]
cols = ["mode", "run", "name", "load", "insert_s", "commit_s", "c_first", "c_last", "c_acked", "wal_mib",
        "spill_txns", "spill_bytes", "stream_txns", "stream_bytes", "total_txns", "total_bytes",
        "rss_mib", "cpu_s", "ws_cpu_s", "w_spilled", "w_streamed", "records", "checkpoints", "warns",
        "rss_commit_mib", "behind_mib"]
runs = [dict(zip(cols, l.rstrip("\n").split("\t"))) for l in open(path) if l.strip()]
mib = lambda b: f"{int(b) / 2**20:,.0f}"
print(f"{int(rows):,} rows in one transaction; PostgreSQL {pgv}, logical_decoding_work_mem {wm}; "
      f"walrelay {built}; {cores} cores.\n")
print("| stream_in_progress | run | load | INSERT s | commit → first in Kafka s | commit → last in Kafka s "
      "| commit → acked (metrics) s | WAL MiB | server spill txns / MiB | server stream txns / MiB "
      "| walrelay spilled MiB | walsender behind at COMMIT MiB | walrelay peak RSS by COMMIT / at the end MiB "
      "| walrelay CPU-s | walsender CPU-s | records | checkpoints |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in runs:
    print(f"| {r['mode']} | {r['run']} | {r['load']} | {r['insert_s']} | {r['c_first']} | {r['c_last']} "
          f"| {r['c_acked']} | {r['wal_mib']} | {r['spill_txns']} / {mib(r['spill_bytes'])} "
          f"| {r['stream_txns']} / {mib(r['stream_bytes'])} | {mib(r['w_spilled'])} | {r['behind_mib']} "
          f"| {r['rss_commit_mib']} / {r['rss_mib']} "
          f"| {r['cpu_s']} | {r['ws_cpu_s']} | {int(r['records']):,} | {r['checkpoints']} |")
print()
def cell(vals, fmt):
    vals = sorted(vals)
    return f"{fmt(statistics.median(vals))} ({fmt(vals[0])}–{fmt(vals[-1])})"
f2 = lambda x: f"{x:.2f}"
f1 = lambda x: f"{x:.1f}"
f0 = lambda x: f"{x:,.0f}"
print("Median (min–max) over the runs:\n")
print("| stream_in_progress | runs | server spill_bytes MiB | server stream_bytes MiB | commit → last in Kafka s "
      "| commit → first in Kafka s | INSERT s | walsender behind at COMMIT MiB | walrelay peak RSS MiB "
      "| walrelay peak RSS by COMMIT MiB | walrelay_stream_spilled_bytes_total MiB | walrelay CPU-s | walsender CPU-s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for mode in dict.fromkeys(r["mode"] for r in runs):
    rs = [r for r in runs if r["mode"] == mode]
    g = lambda k, conv=float: [conv(r[k]) for r in rs]
    print(f"| {mode} | {len(rs)} | {cell([b / 2**20 for b in g('spill_bytes', int)], f0)} "
          f"| {cell([b / 2**20 for b in g('stream_bytes', int)], f0)} | {cell(g('c_last'), f2)} "
          f"| {cell(g('c_first'), f2)} | {cell(g('insert_s'), f1)} | {cell(g('behind_mib'), f0)} "
          f"| {cell(g('rss_mib'), f0)} | {cell(g('rss_commit_mib'), f0)} "
          f"| {cell([b / 2**20 for b in g('w_spilled', int)], f0)} | {cell(g('cpu_s'), f1)} "
          f"| {cell(g('ws_cpu_s'), f1)} |")
bad = [r["name"] for r in runs if int(r["records"]) != int(rows)]
warn = [f"{r['name']} ({r['warns']})" for r in runs if int(r["warns"])]
print(f"\nRecords in Kafka = {int(rows):,} in every run: {'yes' if not bad else 'NO: ' + ', '.join(bad)}. "
      f"walrelay log lines at WARN/ERROR: {', '.join(warn) if warn else 'none'}.")
PY
log "results: $OUT/results.md"
