#!/usr/bin/env bash
# deploy/test.sh — runs walrelay's whole test suite on a fresh machine.
#
# Brings up the real services (PostgreSQL 18 + Apache Kafka, via deploy/dev/*.sh,
# which install what they need), runs every cargo test against them, runs the
# failover test on a primary/standby pair of 17 and of 18, the benchmark smoke
# and the fault soaks, with the version-sensitive tests against PostgreSQL 14,
# 15, 16 and 17 running beside them, and takes everything down again (also on
# failure or Ctrl-C).
#
#   deploy/test.sh                  everything (what .ci/run calls)
#   WALRELAY_TEST_MAJORS="16" deploy/test.sh   limit the extra PostgreSQL majors
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
EXTRA_MAJORS=${WALRELAY_TEST_MAJORS-"14 15 16 17"}

T0=$SECONDS
# Each stage's line says when it started (UTC and minutes into the run): CI has a
# 30-minute budget, and these lines show where it went.
log() { printf '\n==> [%s +%dm%02ds] %s\n' "$(date -u +%H:%M:%S)" $(((SECONDS - T0) / 60)) $(((SECONDS - T0) % 60)) "$*" >&2; }

cleanup() {
  local rc=$?
  local pid
  for pid in ${matrix_pid:-} ${outage_pid:-} ${bench_pid:-} ${lost_slot_pid:-}; do kill -- "$pid" 2>/dev/null || true; done
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

# Test binaries by name. Stages that run beside others run them directly: a
# second `cargo test` would wait for the first one's lock.
declare -A TEST_BIN=()
while read -r name exe; do TEST_BIN[$name]=$exe; done < <(
  cargo test --locked --tests --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])')
# await_job <pid> <log> <what failed> <grep -E pattern of the lines to keep>:
# waits for a background stage; on failure prints its whole log and stops.
await_job() {
  if ! wait "$1"; then
    cat "$2" >&2
    echo "$3 failed (the output above)" >&2
    exit 1
  fi
  grep -E "$4" "$2" >&2 || true
}
run_test() { # run_test <tests/NAME.rs> [libtest args...]
  local exe=${TEST_BIN[$1]:-}
  [[ -x $exe ]] || { echo "cannot find the $1 test binary" >&2; return 1; }
  echo "     Running tests/$1.rs" >&2
  "$exe" "${@:2}"
}

# tests/kafka_outage.rs stops and starts its broker and mostly waits (a
# 360 s outage): it runs on a broker of its own (KAFKA_PORT=39092), beside
# the other tests instead of after them; then, in the same background job,
# the multi-instance tests (ha), the slow-acknowledgement tests (delivery),
# which mostly wait for leases and lingering producers, and the incremental
# snapshots, against the shared services (the two lanes take about as long).
BG_TESTS=(ha delivery incremental)
log "broker-outage tests (own broker), then ${BG_TESTS[*]}, in the background"
outage_env=$(KAFKA_PORT=39092 deploy/dev/kafka.sh up)
outage_log="$ROOT/.state/kafka_outage.log"
(
  (
    eval "$outage_env"
    export WALRELAY_KAFKA_BROKERS KAFKA_PORT=39092
    run_test kafka_outage
  ) && for t in "${BG_TESTS[@]}"; do run_test "$t" || exit 1; done
) >"$outage_log" 2>&1 &
outage_pid=$!

log "cargo test — everything else, against PostgreSQL 18"
tests=()
for f in tests/*.rs; do
  name=$(basename "$f" .rs)
  # lost_slot exceeds max_slot_wal_keep_size on purpose: it would make the
  # slot of the outage test running beside it lost too. It runs after.
  # failover crashes the primary of a pair of its own (below).
  case $name in
    kafka_outage | ha | delivery | incremental | lost_slot | failover) ;;
    *) tests+=(--test "$name") ;;
  esac
done
cargo test --locked --lib --bins "${tests[@]}"

log "waiting for the broker-outage, ${BG_TESTS[*]} tests"
await_job "$outage_pid" "$outage_log" "tests/kafka_outage.rs or one of ${BG_TESTS[*]}" "^test |test result"
KAFKA_PORT=39092 deploy/dev/kafka.sh down >/dev/null

# Tests that depend on the server version run against every supported major,
# each on a server of its own (port 543<major>), with test binaries run
# directly. All but the fault soak's major run in the background, beside the
# lost-slot, failover, benchmark and soak stages below (those mostly wait).
matrix() { # matrix <major>...
  local m env_lines
  for m in "$@"; do
    log "PostgreSQL $m"
    env_lines=$(PG_MAJOR=$m deploy/dev/postgres.sh up) || return 1
    eval "$env_lines"
    export WALRELAY_PG_MAJOR WALRELAY_PG_PORT WALRELAY_PG_SOCKET_DIR
    local t
    for t in services relay_matrix wire snapshot_reader pg_security; do run_test "$t" || return 1; done
    # These read catalog columns or call functions whose shape changes at 17
    # (invalidation_reason, pg_logical_emit_message's signature): the two
    # sides of that boundary. The lagging lost-slot case differs from the
    # runbook case only in walrelay's own timing: 18 runs it.
    if [[ $m == 14 || $m == 17 ]]; then
      run_test status || return 1
      run_test heartbeat || return 1
      run_test lost_slot --skip a_slot_lost_while_walrelay_lags || return 1
    fi
    # Snapshot, then stream end to end on 14 too (it exports the snapshot with
    # other syntax); the 1,000,000-row memory test measures walrelay alone and
    # runs on 18 only. 15-17 share 18's syntax (snapshot_reader covers them).
    if [[ $m == 14 ]]; then
      run_test snapshot --skip a_million_row_snapshot || return 1
    fi
    PG_MAJOR=$m deploy/dev/postgres.sh down >/dev/null
  done
}
SOAK_MAJOR=16   # deploy/soak.sh's PostgreSQL (its default SOAK_PG_MAJOR)
BG_MAJORS=() FG_MAJORS=()
for m in $EXTRA_MAJORS; do
  if [[ $m == "$SOAK_MAJOR" ]]; then FG_MAJORS+=("$m"); else BG_MAJORS+=("$m"); fi
done
matrix_log="$ROOT/.state/matrix.log"
if ((${#BG_MAJORS[@]})); then
  log "version-sensitive tests on PostgreSQL ${BG_MAJORS[*]}, in the background"
  ( matrix "${BG_MAJORS[@]}" ) >"$matrix_log" 2>&1 &
  matrix_pid=$!
fi

# The benchmark harness in its smoke mode (2,000 rows through pg_recvlogical,
# Debezium and walrelay), so it cannot rot; its numbers are not results. It
# runs beside the failover stage (that one has servers of its own).
log "benchmark harness, smoke mode, in the background"
bench_log="$ROOT/.state/bench_smoke.log"
deploy/bench/run.sh --smoke --walrelay "${CARGO_TARGET_DIR:-$ROOT/target}/debug/walrelay" --require-walrelay \
  >"$bench_log" 2>&1 &
bench_pid=$!

# PostgreSQL failover for real: a primary and a physical standby of 17 and of 18
# (failover slots need 17+), the primary crashed and the standby promoted under
# writers; walrelay follows by itself (tests/failover.rs).
for m in 18 17; do
  log "failover, PostgreSQL $m (deploy/dev/pg_pair.sh)"
  pair_env=$(PG_MAJOR=$m deploy/dev/pg_pair.sh up)
  (
    eval "$pair_env"
    export WALRELAY_PAIR_MAJOR WALRELAY_PAIR_PRIMARY_PORT WALRELAY_PAIR_STANDBY_PORT
    run_test failover
  )
  PG_MAJOR=$m deploy/dev/pg_pair.sh down >/dev/null
done

log "waiting for the benchmark smoke"
await_job "$bench_pid" "$bench_log" "deploy/bench/run.sh --smoke" "^bench: done"

# lost_slot lowers max_slot_wal_keep_size for the whole PostgreSQL 18 server,
# which would make other slots of that server lost too: nothing else uses it
# meanwhile. The soaks use services of their own, so it runs beside them.
log "lost slot, in the background (alone on PostgreSQL 18: it lowers max_slot_wal_keep_size)"
lost_slot_log="$ROOT/.state/lost_slot.log"
run_test lost_slot >"$lost_slot_log" 2>&1 &
lost_slot_pid=$!

# The fault soak, short version (~3 min): kills walrelay, stops its broker,
# restarts its PostgreSQL, terminates the walsender, then checks every event;
# meanwhile `walrelay inbox` consumes the topics, killed -9 every 2-8 s, and
# must have applied every committed event exactly once, in order.
# It uses services of its own (PostgreSQL 16, a broker on 29092) and takes
# them down again, so the matrix below finds PostgreSQL 16 as before.
log "fault soak, CI length (deploy/soak.sh --ci)"
SOAK_PG_MAJOR=$SOAK_MAJOR deploy/soak.sh --ci
# The same with delivery = "exactly_once": the faults that re-send a tail
# under at_least_once, and not one duplicate may reach a read_committed reader.
log "fault soak, exactly_once (deploy/soak.sh --exactly-once, 6 cycles)"
SOAK_PG_MAJOR=$SOAK_MAJOR deploy/soak.sh --exactly-once --cycles 6 --load 1-3 --outage 5-10 \
  --faults kill-9,sigterm,broker-stop,pg-restart-immediate,second-instance

log "waiting for the lost-slot tests"
await_job "$lost_slot_pid" "$lost_slot_log" "tests/lost_slot.rs" "^test |test result"

# The majors the fault soak does not use finish in the background (started
# above); the soak's major runs now that the soak has taken it down.
if ((${#FG_MAJORS[@]})); then
  matrix "${FG_MAJORS[@]}"
fi
log "waiting for the version-sensitive tests on PostgreSQL ${BG_MAJORS[*]:-(none)}"
[[ -z ${matrix_pid:-} ]] || await_job "$matrix_pid" "$matrix_log" "the version-sensitive tests" "^==>|Running |test result"
log "all tests passed"
