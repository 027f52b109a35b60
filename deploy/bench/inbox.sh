#!/usr/bin/env bash
# deploy/bench/inbox.sh - the apply rate of `walrelay inbox` (docs/consumers.md)
# with 1 and with 8 workers, on the dev services.
#
# Usage: deploy/bench/inbox.sh [--events N] [--workers "1 8"] [--runs N] [--walrelay PATH]
#
#   --events N    outbox events in the topic (default 20000)
#   --workers L   worker counts to measure (default "1 8")
#   --runs N      runs of each (default 3; each printed, and the median)
#   --walrelay P  the binary (default target/release/walrelay, built if missing)
#
# Setup, once per invocation: a database with an outbox table of N rows
# (1,000 aggregates, ~200-byte jsonb payloads), published to Kafka by
# `walrelay republish` (the records walrelay streams: key = aggregate id, value
# = payload, header `id`) onto one topic of 3 partitions (the broker's
# auto-creation).
# Per run: a fresh consumer database with a business table, and `walrelay
# inbox` in a fresh consumer group reading the topic from the start; the
# handler is one upsert into the business table per event, in the inbox
# row's transaction (BEGIN, inbox INSERT, handler, COMMIT: four round trips
# per event). Rate = N / (last - first inbox row's received_at): the
# consumer's start and group join are not counted. Every event is checked to
# be applied once (count of the business table's rows = N, inbox = N).
# PostgreSQL over loopback TCP without TLS (sslmode=disable), synchronous
# commit on (the server's default).
set -euo pipefail
cd "$(dirname "$0")/../.."

EVENTS=20000
WORKERS="1 8"
RUNS=3
WALRELAY=target/release/walrelay
while [ $# -gt 0 ]; do
  case "$1" in
    --events) EVENTS="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --walrelay) WALRELAY="$2"; shift 2 ;;
    *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ ! -x "$WALRELAY" ]; then
  cargo build --release
fi

eval "$(deploy/dev/postgres.sh env 2>/dev/null)"
eval "$(deploy/dev/kafka.sh env 2>/dev/null)"
export PGPASSWORD=postgres
PORT="$WALRELAY_PG_PORT"
BROKERS="$WALRELAY_KAFKA_BROKERS"
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres "$@"; }

TAG="bench_inbox_$$"
DIR=".state/bench/$TAG"
mkdir -p "$DIR"
SRC="${TAG}_src"
TOPIC="${TAG}.ev.order"
cleanup() {
  for db in $(psql_ -d postgres -Atc "SELECT datname FROM pg_database WHERE datname LIKE '${TAG}%'"); do
    psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT

echo "setup: $EVENTS events into $TOPIC" >&2
psql_ -d postgres -c "CREATE DATABASE $SRC OWNER walrelay"
psql_ -d "$SRC" <<SQL
CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text,
  type text NOT NULL, payload jsonb, created_at timestamptz NOT NULL DEFAULT now());
ALTER TABLE outbox OWNER TO walrelay;
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), 'order', 'agg-' || (i % 1000), 'Created',
       jsonb_build_object('seq', i, 'customer', 'c-' || (i % 977), 'note', repeat('x', 150))
FROM generate_series(1, $EVENTS) AS i;
SQL
cat > "$DIR/relay.toml" <<TOML
[connector]
name = "$TAG"
[postgres]
host = "127.0.0.1"
port = $PORT
user = "walrelay"
password = "walrelay"
database = "$SRC"
slot = "${TAG}_slot"
publication = "${TAG}_pub"
[kafka]
brokers = "$BROKERS"
[[outbox]]
table = "public.outbox"
topic = "${TAG}.ev.{aggregatetype}"
TOML
"$WALRELAY" republish --config "$DIR/relay.toml" --where "true" >&2

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

printf "%-8s %-6s %12s\n" workers run "events/s"
for w in $WORKERS; do
  rates=""
  for run in $(seq 1 "$RUNS"); do
    DST="${TAG}_w${w}_r${run}"
    psql_ -d postgres -c "CREATE DATABASE $DST"
    psql_ -d "$DST" -c "CREATE TABLE orders (aggregate text PRIMARY KEY, body jsonb NOT NULL, events bigint NOT NULL)"
    cat > "$DIR/inbox_${w}_${run}.toml" <<TOML
[inbox]
name = "${DST}"
topics = ["$TOPIC"]
workers = $w
max_in_flight = 1000
[inbox.kafka]
brokers = "$BROKERS"
[inbox.postgres]
url = "postgres://postgres:postgres@127.0.0.1:$PORT/$DST?sslmode=disable"
[inbox.handler]
sql = "INSERT INTO orders VALUES (\$1, \$2::jsonb, 1) ON CONFLICT (aggregate) DO UPDATE SET body = EXCLUDED.body, events = orders.events + 1"
params = ["key", "value"]
TOML
    WALRELAY_LOG=warn "$WALRELAY" inbox --config "$DIR/inbox_${w}_${run}.toml" >"$DIR/inbox_${w}_${run}.log" 2>&1 &
    pid=$!
    until [ "$(psql_ -d "$DST" -Atc "SELECT count(*) FROM inbox" 2>/dev/null || echo 0)" -ge "$EVENTS" ]; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "walrelay inbox exited; log:" >&2; cat "$DIR/inbox_${w}_${run}.log" >&2; exit 1
      fi
      sleep 0.5
    done
    kill -TERM "$pid"; wait "$pid" || true
    read -r applied events secs < <(psql_ -d "$DST" -Atc "SELECT (SELECT count(*) FROM inbox), \
      (SELECT sum(events) FROM orders), \
      extract(epoch FROM max(received_at) - min(received_at)) FROM inbox" | tr '|' ' ')
    if [ "$applied" != "$EVENTS" ] || [ "$events" != "$EVENTS" ]; then
      echo "workers=$w run=$run: inbox $applied, applied $events, want $EVENTS each" >&2; exit 1
    fi
    rate=$(awk -v n="$EVENTS" -v s="$secs" 'BEGIN {printf "%.0f", n / s}')
    printf "%-8s %-6s %12s\n" "$w" "$run" "$rate"
    rates="$rates $rate"
  done
  printf "%-8s %-6s %12s\n" "$w" median "$(echo $rates | tr ' ' '\n' | median)"
done
