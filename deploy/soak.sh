#!/usr/bin/env bash
# deploy/soak.sh — the fault soak (docs/reliability.md).
#
# Eight writers commit outbox rows (with rollbacks and insert-then-delete)
# while each cycle injects one fault: walrelay kill -9 or SIGTERM, the broker
# stopped for a while, PostgreSQL restarted (fast or immediate), the
# walsender terminated, a second walrelay instance started (it takes over
# when the first is killed), or — with --pair — the primary crashed and its
# standby promoted. At the end every committed event is checked against
# Kafka: 0 lost, 0 per-aggregate order breaks, every duplicate identical.
# Throughout, `walrelay inbox` (the reference consumer) consumes the topics
# into a business table in a database of its own and is killed -9 at random
# moments; at the end every committed event must have been applied exactly
# once (checked against the ledger the writers write in the same
# transaction), each aggregate's events in commit order, none quarantined.
#
#   deploy/soak.sh [--cycles N] [--ci] [--seed S] [--load MIN-MAX]
#                  [--outage MIN-MAX] [--out DIR] [--faults LIST] [--pair]
#                  [--exactly-once] [--rdkafka-debug CONTEXTS]
#                  [--no-inbox] [--inbox-kill MIN-MAX]
#
#   --cycles N        fault cycles (default 100, about 25 minutes)
#   --ci              the short version for CI: 9 cycles (every kind once),
#                     1-3 s of load between faults, broker outages of 5-10 s
#                     (~4 minutes)
#   --seed S          reproduce a run's fault schedule (default: the clock)
#   --load MIN-MAX    seconds of load before each fault (default 2-6)
#   --outage MIN-MAX  seconds the broker stays down (default 5-60)
#   --out DIR         report and walrelay log (default target/soak/<time>)
#   --faults LIST     only these kinds, comma-separated (kill-9, sigterm,
#                     broker-stop, pg-restart-fast, pg-restart-immediate,
#                     walsender-terminate, second-instance,
#                     incremental-snapshot, ddl, promote); default all
#                     (promote only with --pair)
#   --pair            run on a primary and a physical standby
#                     (deploy/dev/pg_pair.sh, PostgreSQL $SOAK_PG_MAJOR, then
#                     default 18; 17+), walrelay given both servers, which
#                     adds the `promote` fault
#   --exactly-once    walrelay with [kafka] delivery = "exactly_once", Kafka
#                     read as a read_committed consumer, and any duplicate
#                     a failure (at_least_once: identical duplicates pass)
#   --rdkafka-debug C librdkafka debug contexts for walrelay (e.g. broker,eos)
#   --no-inbox        without the inbox consumer (walrelay's side only)
#   --inbox-kill MIN-MAX  seconds between kill -9s of the inbox (default 2-8)
#
# It stops and restarts the services it uses, so it never uses the shared
# ones: PostgreSQL $SOAK_PG_MAJOR (default 16, port 543<major>) and a second
# broker on $SOAK_KAFKA_PORT (default 29092, via KAFKA_PORT in
# deploy/dev/kafka.sh). What it brings up it takes down again (also on
# failure or Ctrl-C); a service that was already running is reused and left
# running. walrelay is the debug build of this checkout (`cargo test`).
#
# WALRELAY_SOAK_CATCH_UP_SECS (default 180) is how long walrelay may take to
# catch up after a fault before the soak calls it a stall; a small value
# exercises the stall path (restart walrelay, drain, then check).
#
# Prints one summary line `SOAK PASS|FAIL: ...`; exit 1 on any loss, order
# break, differing duplicate, phantom record or stall, or — with the inbox —
# an event not applied, applied twice, applied out of order, quarantined, or
# an inbox that does not finish applying within 180 s of the end.
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"

CYCLES=100
LOAD=2-6
OUTAGE=5-60
SEED=0
OUT=""
FAULTS=all
RDKAFKA_DEBUG=""
PAIR=0
EXACTLY_ONCE=0
INBOX=1
INBOX_KILL=2-8
PG=${SOAK_PG_MAJOR:-}
KPORT=${SOAK_KAFKA_PORT:-29092}

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2; exit 2; }
log() { printf 'soak.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

while (($#)); do
  case $1 in
    --cycles) CYCLES=${2:?}; shift 2 ;;
    --ci) CYCLES=9; LOAD=1-3; OUTAGE=5-10; shift ;;
    --seed) SEED=${2:?}; shift 2 ;;
    --load) LOAD=${2:?}; shift 2 ;;
    --outage) OUTAGE=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --faults) FAULTS=${2:?}; shift 2 ;;
    --rdkafka-debug) RDKAFKA_DEBUG=${2:?}; shift 2 ;;
    --pair) PAIR=1; shift ;;
    --exactly-once) EXACTLY_ONCE=1; shift ;;
    --no-inbox) INBOX=0; shift ;;
    --inbox-kill) INBOX_KILL=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *) log "unknown argument '$1'"; usage ;;
  esac
done
[[ $CYCLES =~ ^[0-9]+$ && $CYCLES -ge 1 ]] || die "--cycles wants a positive number, got '$CYCLES'"
[[ $LOAD =~ ^[0-9]+-[0-9]+$ ]] || die "--load wants MIN-MAX seconds, got '$LOAD'"
[[ $OUTAGE =~ ^[0-9]+-[0-9]+$ ]] || die "--outage wants MIN-MAX seconds, got '$OUTAGE'"
[[ $SEED =~ ^[0-9]+$ ]] || die "--seed wants a number, got '$SEED'"
[[ $INBOX_KILL =~ ^[0-9]+-[0-9]+$ ]] || die "--inbox-kill wants MIN-MAX seconds, got '$INBOX_KILL'"
# The soak kills and restarts these: never the shared defaults.
[[ $KPORT != 19092 ]] || die "SOAK_KAFKA_PORT must not be the shared broker's 19092"
if ((PAIR)); then
  PG=${PG:-18}
  ((PG >= 17)) || die "--pair needs PostgreSQL 17+ (failover slots); SOAK_PG_MAJOR=$PG"
  # A pair of its own (not the failover test's): state .state/soakpair<major>.
  export PAIR_NAME=soakpair$PG PAIR_PORTS="$((57400 + PG)),$((57500 + PG))"
else
  PG=${PG:-16}
  [[ ,$FAULTS, != *,promote,* ]] || die "the promote fault needs --pair"
fi
OUT=${OUT:-$ROOT/target/soak/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)

pg() {
  if ((PAIR)); then PG_MAJOR=$PG deploy/dev/pg_pair.sh "$@"; else PG_MAJOR=$PG deploy/dev/postgres.sh "$@"; fi
}
kafka() { KAFKA_PORT=$KPORT deploy/dev/kafka.sh "$@"; }

PG_OURS=0
KAFKA_OURS=0
cleanup() {
  local rc=$?
  # A walrelay (or walrelay inbox) the soak started outlives an interrupted
  # soak: stop it, found by its config path (unique to this run), by pid.
  local f pid
  for f in $(grep -laF -e "$OUT/walrelay.toml" -e "$OUT/walrelay-2.toml" -e "$OUT/inbox.toml" \
      /proc/[0-9]*/cmdline 2>/dev/null || true); do
    pid=${f#/proc/}; pid=${pid%/cmdline}
    [[ $pid != "$$" ]] && kill -KILL "$pid" 2>/dev/null && log "stopped leftover walrelay (pid $pid)"
  done
  # Keep the services' logs with the report (evidence) before `down`.
  cp "$ROOT/.state/kafka-$KPORT/logs/server.log" "$OUT/kafka-server.log" 2>/dev/null || true
  cp "$ROOT/.state/pg$PG/postgres.log" "$OUT/postgres.log" 2>/dev/null || true
  cp "$ROOT/.state/${PAIR_NAME:-none}"/{a,b}.log "$OUT/" 2>/dev/null || true
  if ((KAFKA_OURS)); then log "taking the soak broker down"; kafka down >/dev/null 2>&1 || true; fi
  if ((PG_OURS)); then log "taking PostgreSQL $PG down"; pg down >/dev/null 2>&1 || true; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building (debug)"
cargo build --locked --all-targets >&2

if ((PAIR)); then
  # Always a new pair: a promotion leaves it changed.
  PG_OURS=1
  env_lines=$(pg up)
  eval "$env_lines"
  WALRELAY_PG_PORT=$WALRELAY_PAIR_PRIMARY_PORT
  WALRELAY_PG_MAJOR=$PG
  WALRELAY_SOAK_PAIR_PORTS="$WALRELAY_PAIR_PRIMARY_PORT,$WALRELAY_PAIR_STANDBY_PORT"
  export WALRELAY_SOAK_PAIR_PORTS
else
  if pg status >/dev/null 2>&1; then
    log "reusing the running PostgreSQL $PG (the soak restarts it; it stays up afterwards)"
  else
    PG_OURS=1
  fi
  env_lines=$(pg up)
  eval "$env_lines"
fi
if kafka status >/dev/null 2>&1; then
  log "reusing the running broker on $KPORT (the soak stops it; it stays up afterwards)"
else
  KAFKA_OURS=1
fi
env_lines=$(kafka up)
eval "$env_lines"
export WALRELAY_PG_MAJOR WALRELAY_PG_PORT WALRELAY_PG_SOCKET_DIR WALRELAY_PG_TLS_DIR WALRELAY_KAFKA_BROKERS

# librdkafka's debug lines reach walrelay's log at trace level.
if [[ -n $RDKAFKA_DEBUG ]]; then
  WALRELAY_LOG_FILTER=${WALRELAY_TEST_LOG:-info,walrelay::sink::kafka=trace}
else
  WALRELAY_LOG_FILTER=${WALRELAY_TEST_LOG:-info}
fi
log "soak: $CYCLES cycles, PostgreSQL $PG on $WALRELAY_PG_PORT, Kafka on $WALRELAY_KAFKA_BROKERS; output in $OUT"
rc=0
WALRELAY_SOAK=1 WALRELAY_SOAK_CYCLES=$CYCLES WALRELAY_SOAK_SEED=$SEED \
  WALRELAY_SOAK_FAULTS=$FAULTS WALRELAY_SOAK_RDKAFKA_DEBUG=$RDKAFKA_DEBUG \
  WALRELAY_SOAK_EXACTLY_ONCE=$EXACTLY_ONCE \
  WALRELAY_SOAK_INBOX=$INBOX WALRELAY_SOAK_INBOX_KILL=$INBOX_KILL \
  WALRELAY_SOAK_CATCH_UP_SECS=${WALRELAY_SOAK_CATCH_UP_SECS:-180} \
  WALRELAY_SOAK_LOAD=$LOAD WALRELAY_SOAK_OUTAGE=$OUTAGE WALRELAY_SOAK_OUT=$OUT \
  WALRELAY_TEST_LOG=$WALRELAY_LOG_FILTER \
  cargo test --locked --test soak -- --ignored --nocapture --exact fault_soak \
  >"$OUT/soak.log" 2>&1 || rc=$?

if [[ -f $OUT/report.txt ]]; then
  cat "$OUT/report.txt"   # its last line is the summary
else
  tail -n 40 "$OUT/soak.log" >&2
  echo "SOAK FAIL: no report (the soak did not finish; see $OUT/soak.log)"
fi
((rc == 0)) || exit 1
