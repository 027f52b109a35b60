#!/usr/bin/env bash
# deploy/bench/incremental.sh - walrelay's incremental snapshot against its
# initial snapshot and against Debezium's incremental snapshot, on the same
# table, the same machine and broker.
#
# Usage: deploy/bench/incremental.sh [--rows N] [--chunk N] [--runs N] [--walrelay PATH]
#                                    [--watermarks auto|messages|read_only]
#                                    [--dbz-chunks "1024 4096"] [--dbz-poll-ms 500]
#
#   --rows N      outbox rows of ~430 bytes (default 200000)
#   --chunk N     [snapshot] chunk_rows of the incremental snapshot (default 4096)
#   --runs N      runs of each (default 3; the table prints each and the median)
#   --walrelay P  the binary (default target/release/walrelay, built if missing)
#   --watermarks M  [snapshot] watermarks of the incremental snapshot (default
#                 auto, which is messages for the dev role)
#   --dbz-chunks L  Debezium incremental.snapshot.chunk.size values, one D
#                 measurement each per run (default "1024 <--chunk>": Debezium's
#                 default and walrelay's chunk; "" leaves Debezium out)
#   --dbz-poll-ms N Debezium poll.interval.ms (default 500, Debezium's default
#                 and deploy/bench/run.sh's)
#
# Per run, on the dev services (deploy/dev/postgres.sh, deploy/dev/kafka.sh;
# PG_MAJOR selects the server, default 18; PG_PORT and KAFKA_PORT, as for
# those scripts, select other instances):
#   I  initial: a new connector with [snapshot] mode = "initial_only" creates
#      its slot and publishes the table; time = the `took` walrelay logs for
#      the snapshot (slot creation to every record acknowledged).
#   N  incremental: a connector with mode = "no_data" streams; `walrelay
#      snapshot --table public.outbox` asks for the table; time = from the
#      signal to `incremental snapshot completed` (every chunk acknowledged
#      and stored), by walrelay's own log timestamps.
#   D  Debezium's incremental snapshot: Kafka Connect standalone + Debezium's
#      PostgreSQL connector + Outbox Event Router as deploy/bench/run.sh runs
#      them (deploy/dev/connect.sh classpath, deploy/bench/connect/*.in
#      templates, bench.py's JVM flags), with snapshot.mode=no_data, a slot
#      and publication of its own and the signal table public.debezium_signal;
#      once it streams, an `execute-snapshot` row is inserted; time = from
#      just before that INSERT to the LogAppendTime of the last record;
#      peak RSS = the JVM's VmHWM when the last record is in (heap as
#      bench.py's CONNECT_JVM: -Xms256m -Xmx1g).
# I and N report walrelay's peak RSS (VmHWM), D the Connect JVM's. The
# records are counted in Kafka (high watermarks) to check that every row was
# published. N and D's topics are created beforehand (3 partitions, as the
# broker's auto-creation gives I, and LogAppendTime), so N also gets "signal
# -> last record in Kafka" measured exactly as D.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
ROWS=200000
CHUNK=4096
RUNS=3
BIN=$ROOT/target/release/walrelay
DBZ_CHUNKS=
DBZ_POLL_MS=500
WATERMARKS=auto
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rows) ROWS=${2:?}; shift 2 ;;
    --chunk) CHUNK=${2:?}; shift 2 ;;
    --runs) RUNS=${2:?}; shift 2 ;;
    --walrelay) BIN=${2:?}; shift 2 ;;
    --watermarks) WATERMARKS=${2:?}; shift 2 ;;
    --dbz-chunks) DBZ_CHUNKS=${2?}; DBZ_SET=1; shift 2 ;;
    --dbz-poll-ms) DBZ_POLL_MS=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "incremental.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n ${DBZ_SET:-} ]] || DBZ_CHUNKS="1024 $CHUNK"
log() { echo "bench: $*" >&2; }

[[ -x $BIN ]] || (cd "$ROOT" && cargo build --release >&2)
"$ROOT/deploy/dev/postgres.sh" up >&2
"$ROOT/deploy/dev/kafka.sh" up >&2
PG_MAJOR=${PG_MAJOR:-18}
PORT=${PG_PORT:-$((54300 + PG_MAJOR))}
BROKER=127.0.0.1:${KAFKA_PORT:-19092}
export PGPASSWORD=postgres
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres "$@"; }
# Kafka Connect + Debezium, resolved as deploy/bench/run.sh does it; its jars
# also run BenchAdmin.java (topic creation).
eval "$("$ROOT/deploy/dev/connect.sh" up)"
bench_py() { # <python statements>: run with deploy/bench/bench.py imported as `bench`
  python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import bench; $1" "$SCRIPT_DIR" "${@:2}"
}
# The Connect worker's JVM flags, heap included: bench.py's CONNECT_JVM.
read -r -a CONNECT_JVM <<<"$(bench_py 'print(" ".join(bench.CONNECT_JVM))')"

STAMP=$(date +%s)
DB=bench_inc_$STAMP
OUT=$ROOT/.state/bench/incremental-$STAMP
mkdir -p "$OUT"
PIDS=() # what we started and have not stopped yet
cleanup() {
  local p
  for p in "${PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${PIDS[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  psql_ -d postgres -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
                        WHERE database = '$DB' AND NOT active" >/dev/null 2>&1 || true
  psql_ -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
forget() { # <pid>: stopped by us, no longer the trap's business
  local keep=() p
  for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}
log "filling $DB with $ROWS rows (output in $OUT)"
psql_ -d postgres -c "CREATE DATABASE $DB OWNER walrelay"
psql_ -d "$DB" <<SQL
CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text,
  type text NOT NULL, payload jsonb, created_at timestamptz NOT NULL DEFAULT now());
ALTER TABLE outbox OWNER TO walrelay;
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), 'order', 'agg-' || (g % 1000), 'Created',
       jsonb_build_object('n', g, 'pad', repeat('x', 300))
FROM generate_series(1, $ROWS) g;
ANALYZE outbox;
-- Debezium's signal table (D only; walrelay signals through its own table).
CREATE TABLE debezium_signal (id text PRIMARY KEY, type text NOT NULL, data text);
ALTER TABLE debezium_signal OWNER TO walrelay;
SQL

config() { # <name> <mode>
  cat <<TOML
[connector]
name = "$1"
[postgres]
host = "127.0.0.1"
port = $PORT
user = "walrelay"
password = "walrelay"
database = "$DB"
slot = "$1"
publication = "${1}_pub"
[kafka]
brokers = "$BROKER"
[[outbox]]
table = "public.outbox"
topic = "$1.{aggregatetype}"
[snapshot]
mode = "$2"
chunk_rows = $CHUNK
watermarks = "$WATERMARKS"
TOML
}

records() { # <topic>: records in the topic (its partitions' end offsets summed)
  local parts p
  parts=$(kcat -b $BROKER -L -t "$1" 2>/dev/null | grep -c "partition " || true)
  for ((p = 0; p < parts; p++)); do
    kcat -b $BROKER -Q -t "$1:$p:-1" 2>/dev/null || true
  done | awk '{ n += $NF } END { print n + 0 }'
}

peak_kb() { awk '/VmHWM/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

ts() { # <log> <needle>: the epoch seconds of the first line with it
  grep -m1 -- "$2" "$1" | cut -d' ' -f1 | xargs -I{} date -d {} +%s.%N
}

last_append() { # <topic>: epoch seconds of its newest record's LogAppendTime (latest partition)
  local parts p
  parts=$(kcat -b $BROKER -L -t "$1" 2>/dev/null | grep -c "partition " || true)
  for ((p = 0; p < parts; p++)); do
    kcat -b $BROKER -C -q -e -t "$1" -p "$p" -o -1 -c 1 -f '%T\n' 2>/dev/null || true
  done | awk 'NF { if ($1 > m) m = $1 } END { printf "%.3f", m / 1000 }'
}

wait_records() { # <topic> <pid> <what>: until the topic holds ROWS records
  local last=0 since=$SECONDS got
  while :; do
    got=$(records "$1")
    ((got >= ROWS)) && return 0
    kill -0 "$2" 2>/dev/null || { log "$3 exited with $got/$ROWS records in $1"; return 1; }
    if ((got != last)); then last=$got since=$SECONDS; fi
    ((SECONDS - since > 120)) && { log "$3: stuck at $got/$ROWS records in $1 for 120 s"; return 1; }
    sleep 0.2
  done
}

fmt() { # <number>: rounded, with thousands separators
  awk -v x="$1" 'BEGIN { s = sprintf("%.0f", x); o = ""
    while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) }
    print s o }'
}

# N and D write to topics created beforehand: 3 partitions (the broker's
# num.partitions, which I's auto-created topic gets) and LogAppendTime, so the
# newest record's timestamp is the broker's append time.
topics=()
for run in $(seq 1 "$RUNS"); do
  topics+=("inc_n_${STAMP}_$run.order")
  for c in $DBZ_CHUNKS; do topics+=("inc_d${c}_${STAMP}_$run.order"); done
done
java -cp "$WALRELAY_CONNECT_LIBS/*" "$SCRIPT_DIR/BenchAdmin.java" ensure-topics $BROKER 3 "${topics[@]}" >&2

debezium() { # <name> <chunk>: D, Debezium's incremental snapshot; prints the table row
  local name=$1 chunk=$2 d=$OUT/$1 pid t0 last took n rate at_signal peak
  mkdir -p "$d"
  psql_ -d "$DB" -c "SET ROLE walrelay; CREATE PUBLICATION ${name}_pub FOR TABLE outbox, debezium_signal"
  bench_py 'bench.fill_template(sys.argv[2], sys.argv[3], BROKERS=sys.argv[5],
                                OFFSETS_FILE=sys.argv[4], REST_PORT=bench.free_port())' \
    "$SCRIPT_DIR/connect/worker.properties.in" "$d/worker.properties" "$d/offsets.dat" "$BROKER"
  # The connector of deploy/bench/run.sh (its defaults: max.batch.size 2048,
  # max.queue.size 8192, poll.interval.ms 500 unless --dbz-poll-ms), then what
  # an incremental snapshot needs; properties listed again below are dropped
  # from the template.
  bench_py 'bench.fill_template(sys.argv[2], sys.argv[3], PG_HOST="127.0.0.1", PG_PORT=sys.argv[4],
                                PG_USER="walrelay", PG_PASSWORD="walrelay", PG_DATABASE=sys.argv[5],
                                SLOT=sys.argv[6], PUBLICATION=sys.argv[6] + "_pub", SNAPSHOT_MODE="no_data",
                                MAX_BATCH=2048, MAX_QUEUE=8192, POLL_INTERVAL_MS=sys.argv[7])' \
    "$SCRIPT_DIR/connect/connector.properties.in" "$d/connector.tmpl" "$PORT" "$DB" "$name" "$DBZ_POLL_MS"
  {
    grep -Ev '^(name|topic\.prefix|table\.include\.list)=' "$d/connector.tmpl"
    cat <<PROPS

# deploy/bench/incremental.sh: Debezium's incremental snapshot.
name=$name
topic.prefix=$name
# The signal table is captured with the outbox (it is in the publication too).
# <schema>.<table>: Debezium 3.6.1 ignores the signal (and publishes it as a
# change event) when the name carries the database as well.
table.include.list=public.outbox,public.debezium_signal
signal.data.collection=public.debezium_signal
incremental.snapshot.chunk.size=$chunk
# Topics $name.<aggregatetype>, as walrelay's in this script.
transforms.outbox.route.topic.replacement=$name.\${routedByValue}
# The router only for the outbox table's records: the signal table's (the
# execute-snapshot row, the chunk watermarks) go unrouted to $name.public.debezium_signal.
transforms.outbox.predicate=outboxTable
predicates=outboxTable
predicates.outboxTable.type=org.apache.kafka.connect.transforms.predicates.TopicNameMatches
predicates.outboxTable.pattern=$name\\.public\\.outbox
PROPS
  } >"$d/connector.properties"
  java "${CONNECT_JVM[@]}" "-Dlog4j2.configurationFile=$SCRIPT_DIR/connect/log4j2.properties" \
    "-Dbench.log.file=$d/connect.log" -cp "$WALRELAY_CONNECT_LIBS/*" \
    org.apache.kafka.connect.cli.ConnectStandalone "$d/worker.properties" "$d/connector.properties" \
    </dev/null >"$d/jvm.out" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  # Streaming: the slot exists and the stream is read.
  until grep -qs "Processing messages" "$d/connect.log"; do
    kill -0 "$pid" 2>/dev/null || { log "Connect exited before streaming: $d/connect.log"; return 1; }
    sleep 0.1
  done
  sleep 1
  at_signal=$(peak_kb "$pid")
  t0=$(date +%s.%N)
  psql_ -d "$DB" -c "INSERT INTO debezium_signal VALUES ('$(cat /proc/sys/kernel/random/uuid)',
    'execute-snapshot', '{\"data-collections\": [\"public.outbox\"], \"type\": \"incremental\"}')"
  wait_records "$name.order" "$pid" "Kafka Connect ($d/connect.log)" || return 1
  peak=$(peak_kb "$pid")
  last=$(last_append "$name.order")
  took=$(awk -v a="$t0" -v b="$last" 'BEGIN { printf "%.2f", b - a }')
  kill -TERM "$pid"; wait "$pid" || true
  forget "$pid"
  for _ in $(seq 1 60); do # the walsender may take a moment to release it
    psql_ -d postgres -tAc "SELECT pg_drop_replication_slot('$name')" >/dev/null 2>&1 && break
    sleep 0.5
  done
  n=$(records "$name.order")
  ((n == ROWS)) || log "warning: $name.order holds $n records, expected $ROWS"
  rate=$(awk -v r="$ROWS" -v t="$took" 'BEGIN { printf "%.0f", r / t }')
  D_RATES[$chunk]+="$rate "
  echo "| $run | Debezium incremental (chunk $chunk) | $(fmt "$n") | $took s | $(fmt "$rate") | $(fmt $((peak / 1024))) MiB ($(fmt $((at_signal / 1024))) at the signal) | $took s ($(fmt "$rate") rows/s) |"
}

declare -a I_RATES N_RATES NK_RATES
declare -A D_RATES
echo "| run | snapshot | records | time | rows/s | peak RSS | signal → last record in Kafka |"
echo "|---|---|---:|---:|---:|---:|---:|"
for run in $(seq 1 "$RUNS"); do
  # I: initial_only.
  name=inc_i_${STAMP}_$run
  config "$name" initial_only >"$OUT/$name.toml"
  "$BIN" run --config "$OUT/$name.toml" >"$OUT/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  peak=0
  while kill -0 "$pid" 2>/dev/null; do p=$(peak_kb "$pid"); ((p > peak)) && peak=$p; sleep 0.05; done
  wait "$pid" || { log "initial run failed: $OUT/$name.log"; exit 1; }
  forget "$pid"
  took=$(grep -m1 "snapshot completed" "$OUT/$name.log" | sed -E 's/.* took=([0-9.]+)(m?s).*/\1 \2/' |
         awk '{ printf "%.2f", ($2 == "ms") ? $1 / 1000 : $1 }')
  n=$(records "$name.order")
  rate=$(awk -v r="$ROWS" -v t="$took" 'BEGIN { printf "%.0f", r / t }')
  I_RATES+=("$rate")
  echo "| $run | walrelay initial (initial_only) | $(fmt "$n") | $took s | $(fmt "$rate") | $((peak / 1024)) MiB | — |"

  # N: incremental beside the stream.
  name=inc_n_${STAMP}_$run
  config "$name" no_data >"$OUT/$name.toml"
  "$BIN" run --config "$OUT/$name.toml" >"$OUT/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  until grep -q "streaming" "$OUT/$name.log"; do sleep 0.1; done
  t0=$(date +%s.%N)
  "$BIN" snapshot --config "$OUT/$name.toml" --table public.outbox >&2
  peak=0
  until grep -q "incremental snapshot completed" "$OUT/$name.log"; do
    kill -0 "$pid" 2>/dev/null || { log "incremental run exited: $OUT/$name.log"; exit 1; }
    p=$(peak_kb "$pid"); ((p > peak)) && peak=$p; sleep 0.05
  done
  took=$(awk -v a="$(ts "$OUT/$name.log" "signal: incremental snapshot requested")" \
             -v b="$(ts "$OUT/$name.log" "incremental snapshot completed")" 'BEGIN { printf "%.2f", b - a }')
  kill -TERM "$pid"; wait "$pid" || true
  forget "$pid"
  kafka=$(awk -v a="$t0" -v b="$(last_append "$name.order")" 'BEGIN { printf "%.2f", b - a }')
  n=$(records "$name.order")
  rate=$(awk -v r="$ROWS" -v t="$took" 'BEGIN { printf "%.0f", r / t }')
  N_RATES+=("$rate")
  krate=$(awk -v r="$ROWS" -v t="$kafka" 'BEGIN { printf "%.0f", r / t }')
  NK_RATES+=("$krate")
  echo "| $run | walrelay incremental (chunk $CHUNK) | $(fmt "$n") | $took s | $(fmt "$rate") | $((peak / 1024)) MiB | $kafka s ($(fmt "$krate") rows/s) |"

  # D: Debezium's incremental snapshot, once per chunk size.
  for c in $DBZ_CHUNKS; do
    debezium "inc_d${c}_${STAMP}_$run" "$c"
  done
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
line="median rows/s: walrelay initial $(fmt "$(median "${I_RATES[@]}")"), walrelay incremental $(fmt "$(median "${N_RATES[@]}")") ($(fmt "$(median "${NK_RATES[@]}")") to the last record in Kafka)"
for c in $DBZ_CHUNKS; do
  # shellcheck disable=SC2086
  line+=", Debezium incremental chunk $c $(fmt "$(median ${D_RATES[$c]})")"
done
echo "$line"
# The trap drops the slots and the database.
