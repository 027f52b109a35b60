#!/usr/bin/env bash
# deploy/bench/run.sh - walrelay throughput/latency benchmark, one command.
#
# Compares, on the same pre-filled outbox backlog and the same broker:
#   R  the ceiling: pg_recvlogical (pgoutput) draining the slot to a file
#   D  Debezium's PostgreSQL connector + Outbox Event Router on Kafka Connect
#   W  walrelay (target/release/walrelay; "not yet" until it exists and runs)
#   X  (only when asked for: --contenders "W X") walrelay as W with [kafka]
#      delivery = "exactly_once", counted and timed as a read_committed consumer
#      sees its records (throughput and latency passes)
# and prints a Markdown table (rows/s, ratio to R, CPU-s per million events,
# peak RSS, machine, versions; each number the median over the runs with its
# min–max beside it). With --snapshot also the initial snapshot of
# rows that predate every slot: C (COPY … ORDER BY id to /dev/null, the
# ceiling), D (Debezium snapshot.mode=initial), W (walrelay [snapshot]
# mode = "initial_only"). See docs/benchmarks.md.
#
# Usage:
#   deploy/bench/run.sh [--rows N] [--txn-sizes "1 10"] [--runs 3] [--writers 4]
#                       [--latency] [--latency-only] [--latency-rate 2000]
#                       [--latency-seconds 60] [--contenders "R D W"]  (of R D W S X)
#                       [--snapshot] [--snapshot-only] [--snapshot-rows 1000000]
#                       [--smoke] [--no-docs] [--keep] [--walrelay PATH]
#                       [--require-walrelay] [--dbz-...]
#   deploy/bench/run.sh --help            (all options)
#
#   --rows    default 1,000,000, raised per pass when one pg_recvlogical drain
#             of a 200,000-row probe shows the fastest drain would last under
#             ~10 s (a given --rows is used as is). The report warns, without
#             failing, when any drain lasted under 10 s: noise, not a result.
#   --smoke   2,000 rows, 1 run, K=1 and K=10, plus a latency pass at 200
#             rows/s (3 s warm-up + 10 s) and a 2,000-row snapshot pass:
#             every code path in ~2 min (CI); no calibration, no 10 s warning.
#   A full run (no --smoke, no --no-docs) rewrites the results section of
#   docs/benchmarks.md.
#
# What it sets up (idempotent; first run resolves everything):
#   PostgreSQL  deploy/dev/postgres.sh up   (PG_MAJOR selects 14..18, default 18)
#   Kafka       deploy/dev/kafka.sh up      (also installs kcat)
#   Connect +   deploy/dev/connect.sh up: deploy/bench/connect/pom.xml resolved by
#   Debezium    Maven into .deps/bench/connect-<kafka>-debezium-<debezium>/libs (git-ignored)
#   state       .state/bench/<timestamp>/   (configs, logs, results.md; git-ignored)
#
# Progress goes to stderr; the results table to stdout (and results.md).
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
POM="$SCRIPT_DIR/connect/pom.xml"

log() { echo "bench: $*" >&2; }
die() { log "error: $*"; exit 1; }

for a in "$@"; do
    case "$a" in
        -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
                     exec python3 "$SCRIPT_DIR/bench.py" --help ;;
    esac
done

is_root() { [[ $(id -u) -eq 0 ]]; }

apt_install() { # <command that is missing> <debian package>
    is_root || die "'$1' is missing; install it: sudo apt-get install -y $2"
    log "'$1' not found; installing Debian package '$2' ..."
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "$2" </dev/null >&2; then
        apt-get update -q </dev/null >&2 || die "apt-get update failed"
        apt-get install -y -q --no-install-recommends "$2" </dev/null >&2 || die "apt-get install $2 failed"
    fi
}

# ---- tools -----------------------------------------------------------------
command -v python3 >/dev/null 2>&1 || apt_install python3 python3-minimal
command -v java >/dev/null 2>&1 || apt_install java openjdk-17-jdk-headless
# BenchAdmin.java runs as a single-file source program: needs the JDK's compiler.
command -v javac >/dev/null 2>&1 || apt_install javac openjdk-17-jdk-headless
command -v mvn >/dev/null 2>&1 || apt_install mvn maven

# ---- services --------------------------------------------------------------
log "PostgreSQL: deploy/dev/postgres.sh up"
env_lines=$("$REPO_ROOT/deploy/dev/postgres.sh" up)
eval "$env_lines"
# pgbench ships in Debian's postgresql-client (installed by postgres.sh).
command -v pgbench >/dev/null 2>&1 || apt_install pgbench postgresql-client
command -v pg_recvlogical >/dev/null 2>&1 || apt_install pg_recvlogical postgresql-client
log "Kafka: deploy/dev/kafka.sh up"
env_lines=$("$REPO_ROOT/deploy/dev/kafka.sh" up)
eval "$env_lines"
command -v kcat >/dev/null 2>&1 || apt_install kcat kcat

# ---- Kafka Connect + Debezium classpath ---------------------------------------
# Shared with the Debezium compatibility test: deploy/dev/connect.sh resolves
# deploy/bench/connect/pom.xml into .deps/bench/connect-<kafka>-debezium-<debezium>/libs.
log "Kafka Connect + Debezium: deploy/dev/connect.sh up"
connect_env=$("$REPO_ROOT/deploy/dev/connect.sh" up) || die "deploy/dev/connect.sh up failed (see above)"
eval "$connect_env"
if [[ ${WALRELAY_KAFKA_VERSION:-} != "$WALRELAY_CONNECT_VERSION" ]]; then
    log "warning: broker is Kafka ${WALRELAY_KAFKA_VERSION:-?} but $POM pins connect-runtime $WALRELAY_CONNECT_VERSION"
fi

# ---- the binary ------------------------------------------------------------------
# Unless a binary is named (--walrelay, WALRELAY_BIN), bench.py runs
# target/release/walrelay: build it from this tree first, so a measurement
# never runs a binary older than the code it is reported for.
case " $* " in
    *" --walrelay "* | *" --walrelay="*) ;;
    *) if [[ -z "${WALRELAY_BIN:-}" ]]; then
           log "building target/release/walrelay from this tree"
           (cd "$REPO_ROOT" && cargo build --release --locked >&2) || die "cargo build --release failed"
       fi ;;
esac

# ---- run -------------------------------------------------------------------------
mkdir -p "$REPO_ROOT/.state/bench"
exec 9>"$REPO_ROOT/.state/bench/.lock"
flock -n 9 || die "another deploy/bench/run.sh is running (lock: .state/bench/.lock)"

export BENCH_REPO_ROOT="$REPO_ROOT"
export BENCH_CONNECT_LIBS="$WALRELAY_CONNECT_LIBS"
export BENCH_CONNECT_VERSION="$WALRELAY_CONNECT_VERSION"
export BENCH_DEBEZIUM_VERSION="$WALRELAY_DEBEZIUM_VERSION"
# bench.py inherits fd 9 and so holds the lock while it runs; its children
# (JVMs, walrelay, ...) do not (subprocess closes inherited fds).
exec python3 "$SCRIPT_DIR/bench.py" "$@"
