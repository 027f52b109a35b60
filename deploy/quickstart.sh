#!/usr/bin/env bash
# deploy/quickstart.sh — see walrelay work, from nothing, on this machine.
#
# 1. starts PostgreSQL 18 and Kafka (deploy/dev/*.sh install what they need),
# 2. creates the database walrelay_quickstart with an outbox table,
# 3. builds walrelay and runs it with config/quickstart.toml,
# 4. inserts sample orders the way an application would (business row and
#    outbox row in one transaction),
# 5. prints the resulting Kafka records: topic, partition, key, headers, value.
#
# The services stay up afterwards so you can keep experimenting; stop them with
#   deploy/dev/postgres.sh down && deploy/dev/kafka.sh down
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
say() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }

say "starting PostgreSQL 18 and Kafka"
env_lines=$(PG_MAJOR=18 deploy/dev/postgres.sh up)
eval "$env_lines"
env_lines=$(deploy/dev/kafka.sh up)
eval "$env_lines"

deploy/dev/prereqs.sh
if [[ -n ${WALRELAY_QUICKSTART_BIN:-} ]]; then
  # deploy/test.sh runs the quickstart on the build it tests (debug).
  BIN=$WALRELAY_QUICKSTART_BIN
  [[ -x $BIN ]] || { echo "quickstart.sh: WALRELAY_QUICKSTART_BIN=$BIN is not an executable" >&2; exit 1; }
  say "using walrelay at $BIN"
else
  say "building walrelay (release; the first build compiles librdkafka and takes a few minutes)"
  cargo build --locked --release
  BIN=$ROOT/target/release/walrelay
fi

say "creating database walrelay_quickstart with tables orders and outbox"
deploy/dev/postgres.sh psql -q -c "DROP DATABASE IF EXISTS walrelay_quickstart WITH (FORCE)" >/dev/null
deploy/dev/postgres.sh psql -q -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'walrelay_quickstart'" >/dev/null
deploy/dev/postgres.sh psql -q -c "CREATE DATABASE walrelay_quickstart OWNER walrelay"
export PGPASSWORD=walrelay
APP_PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$WALRELAY_PG_PORT" -U walrelay -d walrelay_quickstart)
"${APP_PSQL[@]}" <<'SQL'
CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL, total numeric NOT NULL);
-- Debezium's outbox columns, so existing consumers keep working.
CREATE TABLE outbox (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregatetype text NOT NULL,
  aggregateid   text NOT NULL,
  type          text NOT NULL,
  payload       jsonb,
  created_at    timestamptz NOT NULL DEFAULT now()  -- for a lost slot's recovery
);
SQL

# Start from an empty offset store entry: a previous quickstart's offset would
# (rightly) make walrelay refuse the freshly created slot.
WORK=$ROOT/.state/quickstart
rm -rf "$WORK" && mkdir -p "$WORK"
sed "s/^name = \"quickstart\"/name = \"quickstart-$(date +%s)\"/" config/quickstart.toml >"$WORK/walrelay.toml"

say "checking the setup: walrelay check"
WALRELAY_PG_PASSWORD=walrelay "$BIN" check --config "$WORK/walrelay.toml"

say "running walrelay (log: $WORK/walrelay.log)"
WALRELAY_PG_PASSWORD=walrelay NO_COLOR=1 "$BIN" run --config "$WORK/walrelay.toml" >"$WORK/walrelay.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 360); do   # up to 180 s: a loaded machine starts slowly
  grep -q "streaming" "$WORK/walrelay.log" && break
  kill -0 $PID 2>/dev/null || { cat "$WORK/walrelay.log" >&2; exit 1; }
  sleep 0.5
done
grep -q "streaming" "$WORK/walrelay.log" || { echo "walrelay did not start streaming:" >&2; cat "$WORK/walrelay.log" >&2; exit 1; }

say "placing 3 orders (each: the order row and its outbox event in one transaction)"
for i in 1 2 3; do
  "${APP_PSQL[@]}" <<SQL
BEGIN;
WITH o AS (INSERT INTO orders (customer, total) VALUES ('customer-$i', $((i * 25)).50) RETURNING id, customer, total)
INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
SELECT 'order', o.id::text, 'OrderCreated', jsonb_build_object('orderId', o.id, 'customer', o.customer, 'total', o.total) FROM o;
COMMIT;
SQL
done
# A rolled-back order publishes nothing.
"${APP_PSQL[@]}" -c "BEGIN; INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', '999', 'OrderCreated', '{}'); ROLLBACK;"

# The three events by their ids (each record's `id` header): the topic is read
# from its beginning until all three are there — earlier quickstarts' records
# stay in it, and a read that starts at a time or an offset can start after a
# record walrelay has already published.
mapfile -t IDS < <("${APP_PSQL[@]}" -At -c "SELECT id FROM outbox ORDER BY created_at, id")
say "records on Kafka topic outbox.event.order (waiting for the events ${IDS[*]})"
# One record a line, fields split by tabs (jsonb's text form has none).
FORMAT='%t\t%p\t%o\t%k\t%h\t%s\n'
PICK='import sys
ids = sys.argv[1:]
found = {}
for line in sys.stdin.read().splitlines():
    f = line.split("\t", 5)
    if len(f) < 6:
        continue
    for i in ids:
        if i not in found and i in f[4].replace(",", " ").replace("=", " ").split():
            found[i] = "topic=%s partition=%s offset=%s key=%s\n  headers: %s\n  value:   %s" % tuple(f)
if len(found) == len(ids):
    print("\n".join(found[i] for i in ids))'
deadline=$((SECONDS + 120))
while :; do
  # kcat's exit status is not used: an absent topic (nothing published yet) is a reason to wait.
  records=$(kcat -b "$WALRELAY_KAFKA_BROKERS" -C -t outbox.event.order -o beginning -e -q -f "$FORMAT" 2>/dev/null || true)
  found=$(python3 -c "$PICK" "${IDS[@]}" <<<"$records")
  [[ -n $found ]] && { echo "$found"; break; }
  ((SECONDS < deadline)) || { echo "quickstart.sh: not every event reached Kafka within 120 s (log: $WORK/walrelay.log)" >&2; exit 1; }
  sleep 1
done

say "stopping walrelay (SIGTERM: flush, store offset, report position)"
kill -TERM $PID && wait $PID || true
trap - EXIT
tail -n 2 "$WORK/walrelay.log"
deploy/dev/postgres.sh psql -At -c "SELECT 'slot ' || slot_name || ' confirmed at ' || confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'walrelay_quickstart'"
say "done. Services are still running: deploy/dev/postgres.sh down && deploy/dev/kafka.sh down"
