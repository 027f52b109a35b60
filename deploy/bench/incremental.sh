#!/usr/bin/env bash
# deploy/bench/incremental.sh - walrelay's incremental snapshot against its
# initial snapshot, on the same table, the same machine and broker.
#
# Usage: deploy/bench/incremental.sh [--rows N] [--chunk N] [--runs N] [--walrelay PATH]
#
#   --rows N      outbox rows of ~430 bytes (default 200000)
#   --chunk N     [snapshot] chunk_rows of the incremental snapshot (default 4096)
#   --runs N      runs of each (default 3; the table prints each and the median)
#   --walrelay P  the binary (default target/release/walrelay, built if missing)
#
# Per run, on the dev services (deploy/dev/postgres.sh, deploy/dev/kafka.sh;
# PG_MAJOR selects the server, default 18):
#   I  initial: a new connector with [snapshot] mode = "initial_only" creates
#      its slot and publishes the table; time = the `took` walrelay logs for
#      the snapshot (slot creation to every record acknowledged).
#   N  incremental: a connector with mode = "no_data" streams; `walrelay
#      snapshot --table public.outbox` asks for the table; time = from the
#      signal to `incremental snapshot completed` (every chunk acknowledged
#      and stored), by walrelay's own log timestamps.
# Both report rows/s and walrelay's peak RSS (VmHWM). The records are counted
# in Kafka (high watermarks) to check that every row was published.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
ROWS=200000
CHUNK=4096
RUNS=3
BIN=$ROOT/target/release/walrelay
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rows) ROWS=${2:?}; shift 2 ;;
    --chunk) CHUNK=${2:?}; shift 2 ;;
    --runs) RUNS=${2:?}; shift 2 ;;
    --walrelay) BIN=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "incremental.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
log() { echo "bench: $*" >&2; }

[[ -x $BIN ]] || (cd "$ROOT" && cargo build --release >&2)
"$ROOT/deploy/dev/postgres.sh" up >&2
"$ROOT/deploy/dev/kafka.sh" up >&2
PG_MAJOR=${PG_MAJOR:-18}
PORT=$((54300 + PG_MAJOR))
export PGPASSWORD=postgres
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres "$@"; }

STAMP=$(date +%s)
DB=bench_inc_$STAMP
OUT=$ROOT/.state/bench/incremental-$STAMP
mkdir -p "$OUT"
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
brokers = "127.0.0.1:19092"
[[outbox]]
table = "public.outbox"
topic = "$1.{aggregatetype}"
[snapshot]
mode = "$2"
chunk_rows = $CHUNK
TOML
}

records() { # <topic>: records in the topic (its partitions' end offsets summed)
  local parts p
  parts=$(kcat -b 127.0.0.1:19092 -L -t "$1" 2>/dev/null | grep -c "partition " || true)
  for ((p = 0; p < parts; p++)); do
    kcat -b 127.0.0.1:19092 -Q -t "$1:$p:-1" 2>/dev/null || true
  done | awk '{ n += $NF } END { print n + 0 }'
}

peak_kb() { awk '/VmHWM/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

ts() { # <log> <needle>: the epoch seconds of the first line with it
  grep -m1 -- "$2" "$1" | cut -d' ' -f1 | xargs -I{} date -d {} +%s.%N
}

declare -a I_RATES N_RATES
for run in $(seq 1 "$RUNS"); do
  # I: initial_only.
  name=inc_i_${STAMP}_$run
  config "$name" initial_only >"$OUT/$name.toml"
  "$BIN" run --config "$OUT/$name.toml" >"$OUT/$name.log" 2>&1 &
  pid=$!
  peak=0
  while kill -0 "$pid" 2>/dev/null; do p=$(peak_kb "$pid"); ((p > peak)) && peak=$p; sleep 0.05; done
  wait "$pid" || { log "initial run failed: $OUT/$name.log"; exit 1; }
  took=$(grep -m1 "snapshot completed" "$OUT/$name.log" | sed -E 's/.* took=([0-9.]+)(m?s).*/\1 \2/' |
         awk '{ print ($2 == "ms") ? $1 / 1000 : $1 }')
  n=$(records "$name.order")
  rate=$(awk -v r="$ROWS" -v t="$took" 'BEGIN { printf "%.0f", r / t }')
  I_RATES+=("$rate")
  echo "| $run | initial (initial_only) | $n | $took s | $rate | $((peak / 1024)) MiB |"

  # N: incremental beside the stream.
  name=inc_n_${STAMP}_$run
  config "$name" no_data >"$OUT/$name.toml"
  "$BIN" run --config "$OUT/$name.toml" >"$OUT/$name.log" 2>&1 &
  pid=$!
  until grep -q "streaming" "$OUT/$name.log"; do sleep 0.1; done
  "$BIN" snapshot --config "$OUT/$name.toml" --table public.outbox >&2
  peak=0
  until grep -q "incremental snapshot completed" "$OUT/$name.log"; do
    p=$(peak_kb "$pid"); ((p > peak)) && peak=$p; sleep 0.05
  done
  took=$(awk -v a="$(ts "$OUT/$name.log" "signal: incremental snapshot requested")" \
             -v b="$(ts "$OUT/$name.log" "incremental snapshot completed")" 'BEGIN { printf "%.2f", b - a }')
  kill -TERM "$pid"; wait "$pid" || true
  n=$(records "$name.order")
  rate=$(awk -v r="$ROWS" -v t="$took" 'BEGIN { printf "%.0f", r / t }')
  N_RATES+=("$rate")
  echo "| $run | incremental (chunk $CHUNK) | $n | $took s | $rate | $((peak / 1024)) MiB |"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "median rows/s: initial $(median "${I_RATES[@]}"), incremental $(median "${N_RATES[@]}")"
psql_ -d postgres -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '$DB'" >/dev/null
psql_ -d postgres -c "DROP DATABASE $DB WITH (FORCE)" >/dev/null
