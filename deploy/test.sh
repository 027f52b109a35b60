#!/usr/bin/env bash
# deploy/test.sh — runs walrelay's whole test suite on a fresh machine.
#
# Brings up the real services (PostgreSQL 18 + Apache Kafka, via deploy/dev/*.sh,
# which install what they need), runs every cargo test against them, runs the
# failover test on a primary/standby pair of 17 and of 18, then runs the
# version-sensitive tests against PostgreSQL 14, 15, 16 and 17 too, and takes
# everything down again (also on failure or Ctrl-C).
#
#   deploy/test.sh                  everything (what .ci/run calls)
#   WALRELAY_TEST_MAJORS="16" deploy/test.sh   limit the extra PostgreSQL majors
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
EXTRA_MAJORS=${WALRELAY_TEST_MAJORS-"14 15 16 17"}

log() { printf '\n==> %s\n' "$*" >&2; }

cleanup() {
  local rc=$?
  log "taking services down"
  for m in 18 $EXTRA_MAJORS; do PG_MAJOR=$m deploy/dev/postgres.sh down >/dev/null 2>&1 || true; done
  for m in 17 18; do PG_MAJOR=$m deploy/dev/pg_pair.sh down >/dev/null 2>&1 || true; done
  deploy/dev/kafka.sh down >/dev/null 2>&1 || true
  KAFKA_PORT=29092 deploy/dev/kafka.sh down >/dev/null 2>&1 || true   # the soak's broker
  KAFKA_PORT=39092 deploy/dev/kafka.sh down >/dev/null 2>&1 || true   # the outage tests' broker
  exit $rc
}
trap cleanup EXIT INT TERM

log "checking build prerequisites"
deploy/dev/prereqs.sh

log "alert rules: promtool check and rule unit tests"
deploy/prometheus/check.sh

log "building (first build compiles librdkafka: a few minutes)"
cargo build --locked --all-targets

log "deploy files: systemd-analyze, kubernetes-validate, hadolint"
deploy/validate.sh "${CARGO_TARGET_DIR:-$ROOT/target}/debug/walrelay"

log "starting PostgreSQL 18 and Kafka"
# `env_lines=$(... up)` and then eval, never eval "$(... up)": eval of the empty
# output of a failed `up` succeeds, and the tests would then run against the
# previous server (a PostgreSQL 16 that could not start once sent the matrix's
# tests to the stopped 15).
env_lines=$(PG_MAJOR=18 deploy/dev/postgres.sh up)
eval "$env_lines"
env_lines=$(deploy/dev/kafka.sh up)
eval "$env_lines"
export WALRELAY_PG_MAJOR WALRELAY_PG_PORT WALRELAY_PG_SOCKET_DIR WALRELAY_KAFKA_BROKERS

# Kafka Connect + Debezium for tests/debezium_compat.rs (and the benchmark
# below): jars only, no service. A resolution failure stops here, not as a
# skipped comparison.
log "resolving Kafka Connect + Debezium (deploy/dev/connect.sh)"
connect_env=$(deploy/dev/connect.sh up)
eval "$connect_env"
export WALRELAY_CONNECT_LIBS WALRELAY_CONNECT_VERSION WALRELAY_DEBEZIUM_VERSION

# tests/kafka_outage.rs stops and starts its broker and mostly waits (a
# 360 s outage): it runs on a broker of its own (KAFKA_PORT=39092), beside
# the other tests instead of after them. Its binary is run directly: a
# second `cargo test` would wait for the first one's lock.
log "broker-outage tests, on a broker of their own, in the background"
outage_env=$(KAFKA_PORT=39092 deploy/dev/kafka.sh up)
outage_bin=$(cargo test --locked --test kafka_outage --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "kafka_outage":
        print(m["executable"])')
[[ -x $outage_bin ]] || { echo "cannot find the kafka_outage test binary" >&2; exit 1; }
outage_log="$ROOT/.state/kafka_outage.log"
(
  eval "$outage_env"
  export WALRELAY_KAFKA_BROKERS KAFKA_PORT=39092
  exec "$outage_bin" >"$outage_log" 2>&1
) &
outage_pid=$!

log "cargo test — everything else, against PostgreSQL 18"
tests=()
for f in tests/*.rs; do
  name=$(basename "$f" .rs)
  # lost_slot exceeds max_slot_wal_keep_size on purpose: it would make the
  # slot of the outage test running beside it lost too. It runs after.
  # failover crashes the primary of a pair of its own (below).
  [[ $name == kafka_outage || $name == lost_slot || $name == failover ]] || tests+=(--test "$name")
done
cargo test --locked --lib --bins "${tests[@]}"

log "waiting for the broker-outage tests"
if ! wait "$outage_pid"; then
  cat "$outage_log" >&2
  echo "tests/kafka_outage.rs failed (its output above)" >&2
  exit 1
fi
grep -E "^test |test result" "$outage_log" >&2 || true
KAFKA_PORT=39092 deploy/dev/kafka.sh down >/dev/null

log "lost slot (alone: it lowers max_slot_wal_keep_size for the whole server)"
cargo test --locked --test lost_slot

# PostgreSQL failover for real: a primary and a physical standby of 17 and of 18
# (failover slots need 17+), the primary crashed and the standby promoted under
# writers; walrelay follows by itself (tests/failover.rs).
for m in 18 17; do
  log "failover, PostgreSQL $m (deploy/dev/pg_pair.sh)"
  pair_env=$(PG_MAJOR=$m deploy/dev/pg_pair.sh up)
  (
    eval "$pair_env"
    export WALRELAY_PAIR_MAJOR WALRELAY_PAIR_PRIMARY_PORT WALRELAY_PAIR_STANDBY_PORT
    cargo test --locked --test failover
  )
  PG_MAJOR=$m deploy/dev/pg_pair.sh down >/dev/null
done

# The benchmark harness in its smoke mode (2,000 rows through pg_recvlogical,
# Debezium and walrelay), so it cannot rot; its numbers are not results.
log "benchmark harness, smoke mode"
deploy/bench/run.sh --smoke --walrelay "${CARGO_TARGET_DIR:-$ROOT/target}/debug/walrelay" --require-walrelay >/dev/null

# The fault soak, short version (~3 min): kills walrelay, stops its broker,
# restarts its PostgreSQL, terminates the walsender, then checks every event.
# It uses services of its own (PostgreSQL 16, a broker on 29092) and takes
# them down again, so the matrix below finds PostgreSQL 16 as before.
log "fault soak, CI length (deploy/soak.sh --ci)"
deploy/soak.sh --ci
# The same with delivery = "exactly_once": the faults that re-send a tail
# under at_least_once, and not one duplicate may reach a read_committed reader.
log "fault soak, exactly_once (deploy/soak.sh --exactly-once, 6 cycles)"
deploy/soak.sh --exactly-once --cycles 6 --load 1-3 --outage 5-10 \
  --faults kill-9,sigterm,broker-stop,pg-restart-immediate,second-instance

# Tests that depend on the server version run against every supported major.
for m in $EXTRA_MAJORS; do
  log "PostgreSQL $m"
  env_lines=$(PG_MAJOR=$m deploy/dev/postgres.sh up)
  eval "$env_lines"
  export WALRELAY_PG_MAJOR WALRELAY_PG_PORT WALRELAY_PG_SOCKET_DIR
  cargo test --locked --test services --test relay_matrix --test wire --test snapshot_reader \
    --test pg_security
  # These read catalog columns or call functions whose shape changes at 17
  # (invalidation_reason, pg_logical_emit_message's signature): the two
  # sides of that boundary.
  if [[ $m == 14 || $m == 17 ]]; then
    cargo test --locked --test status --test heartbeat --test lost_slot
  fi
  # Snapshot, then stream end to end on 14 too (it exports the snapshot with
  # other syntax); the 1,000,000-row memory test measures walrelay alone and
  # runs on 18 only. 15-17 share 18's syntax (snapshot_reader covers them).
  if [[ $m == 14 ]]; then
    cargo test --locked --test snapshot -- --skip a_million_row_snapshot
  fi
  PG_MAJOR=$m deploy/dev/postgres.sh down >/dev/null
done
log "all tests passed"
