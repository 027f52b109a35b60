#!/usr/bin/env python3
"""walrelay benchmark harness: R (pg_recvlogical ceiling), D (Debezium), W (walrelay), X (walrelay,
exactly_once).

Run it through deploy/bench/run.sh, which starts PostgreSQL and Kafka, resolves
the Kafka Connect + Debezium classpath and exports BENCH_* / WALRELAY_* env
variables. Standard library only. How each number is measured: docs/benchmarks.md.

Backlog size N (--rows): without --rows, 1,000,000 rows, raised per pass (throughput, table
events) when one R drain of a 200,000-row probe at the pass's largest K shows that the fastest
drain would last under MIN_DRAIN_S (10 s); the report says what the calibration decided, and warns
(without failing) when any drain of a full run lasted under 10 s anyway (not for --smoke).

Per transaction size K and run i:
  1. TRUNCATE the outbox table, create one fresh logical slot per contender
     (before the fill, so each must stream the whole backlog), fill N rows in
     K-row transactions with pgbench (several writers), record the end LSN,
     VACUUM + CHECKPOINT so no background work lands inside a measurement.
  2. R: pg_recvlogical --start --endpos=<end LSN> to a file; drain time = first
     byte .. last write.
  3. D: Kafka Connect standalone + Debezium + EventRouter; drain time = first ..
     last record's LogAppendTime, stopped once the topics' end offsets grew by N.
     Routing is verified against the database.
  4. W: walrelay run --config; same measurement and verification as D.
     "not yet" while target/release/walrelay is missing or does not deliver.
  X: walrelay as W with [kafka] delivery = "exactly_once" (selected with --contenders). End offsets
     also count transaction markers, so they only say when to look: once they grew by >= N and
     stood still for QUIET_S, every record since the start is read back read_committed (kcat) and
     counted; all N rows' ids exactly once, or the run fails. Drain time = first record's
     LogAppendTime .. the moment its transaction's offset-store record (the last record of each
     Kafka transaction, on wrbench.offsets, X's own offset topic) reached a read_committed consumer
     that follows that topic during the run: when the last record became visible.
  B: walrelay as W, run from another binary (--baseline PATH, e.g. a build of an earlier
     commit) and/or with other [kafka] settings (--baseline-kafka 'linger = "20ms"'): the
     before/after comparison of a change on the same backlog (throughput, table-events and latency
     passes).
  E: walrelay as W with [[outbox]] format = "cloudevents" in binary mode (ce_* headers, the payload
     as the value; throughput and latency passes); verified as W, by its ce_id header.
     The order of the contenders rotates from run to run.
  Each contender's slot is dropped right after its measurement.
Snapshot pass (--snapshot): N rows written while no slot of the database exists, then per run
  C: psql COPY (SELECT * FROM public.outbox ORDER BY id) TO STDOUT into /dev/null, start .. exit;
  D: Debezium snapshot.mode=initial (+ EventRouter, which routes its `r` events as inserts) on a
     slot it creates, start .. last record's LogAppendTime;
  W: walrelay with [snapshot] mode = "initial_only" on a slot it creates, start .. exit 0, then
     the records are verified as for D. "not yet" while walrelay has no [snapshot] section.
Table-events pass (--tables): public.bench_table (10 columns of mixed types, workload/table_events.sql)
  with 10,000 rows and a publication of its own; per K and run, fresh slots, then N UPDATEs in K-row
  transactions (workload/table_update.pgbench), then as in the throughput pass
  R: pg_recvlogical, counting Update messages;
  D: Debezium without the EventRouter, key and value through the JSON converter (schemas.enable=false),
     to wrbench.public.bench_table;
  W: walrelay with a [[table]] section (topic_prefix "wrbench") to the same topic.
  D and W must deliver N records; samples are checked as Debezium update events.
Latency pass (--latency): commit -> LogAppendTime for D and W; for X commit -> the moment a
  read_committed consumer (kcat, one per partition, following them during the run) received the
  record, i.e. after its Kafka transaction committed. X runs in the throughput and latency passes only.
Then the medians over runs, each with its min–max over the runs, go into Markdown tables.
"""

import argparse
import bisect
import datetime as dt
import json
import math
import mmap
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")

REPO = Path(os.environ.get("BENCH_REPO_ROOT", Path(__file__).resolve().parents[2]))
BENCH_DIR = REPO / "deploy" / "bench"
STATE_ROOT = REPO / ".state" / "bench"
CHILDREN_FILE = STATE_ROOT / "children"  # pids we started, for cleanup after a crash

DB = "walrelay_bench"
PUB = "wrbench_pub"
SLOT_PREFIX = "wrbench_"
# aggregatetype values written by workload/schema.sql -> topics (EventRouter default
# route.topic.replacement = outbox.event.${routedByValue}; walrelay's default is the same).
AGG_TYPES = ["BenchOrder", "BenchPayment"]
TOPICS = [f"outbox.event.{t}" for t in AGG_TYPES]
PARTITIONS = 3
# Table-events pass (--tables): an ordinary 10-column table (workload/table_events.sql) with
# TABLE_ROWS rows, a publication of its own, and the backlog = N updates of it
# (workload/table_update.pgbench). Debezium (topic.prefix=wrbench in
# connect/connector.properties.in) and walrelay ([table_defaults] topic_prefix) both write
# Debezium change events to TABLE_TOPIC.
TABLE = "public.bench_table"
TABLE_PUB = "wrbench_table_pub"
TABLE_ROWS = 10_000
TABLE_TOPIC_PREFIX = "wrbench"
TABLE_TOPIC = f"{TABLE_TOPIC_PREFIX}.{TABLE}"
TABLE_COLUMNS = {"id", "qty", "name", "sku", "price", "updated_at", "active", "attrs", "ref", "score"}
# What differs between the outbox pass and the table-events pass (run_r, run_kafka_contender).
OUTBOX_MODE = dict(prefix="", pub=PUB, table=None, pgoutput_tag="I")
TABLE_MODE = dict(prefix="tables-", pub=TABLE_PUB, table=TABLE, pgoutput_tag="U")

PG_HOST = os.environ.get("WALRELAY_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("WALRELAY_PG_PORT", "54318"))
PG_SUPER = ("postgres", "postgres")
PG_RELAY = ("walrelay", "walrelay")  # REPLICATION role created by deploy/dev/postgres.sh
BROKERS = os.environ.get("WALRELAY_KAFKA_BROKERS", "127.0.0.1:19092")
# Contender S: walrelay over the dev broker's SASL_SSL listener (SCRAM-SHA-512, TLS with
# host-name verification), as deploy/dev/kafka.sh prints it; the records are read back
# over PLAINTEXT (same cluster, same topics).
SASL_SSL = dict(
    brokers=os.environ.get("WALRELAY_KAFKA_SASL_SSL_BROKERS", ""),
    tls_dir=os.environ.get("WALRELAY_KAFKA_TLS_DIR", ""),
    user=os.environ.get("WALRELAY_KAFKA_SCRAM_USER", "walrelay"),
    password=os.environ.get("WALRELAY_KAFKA_SCRAM_PASSWORD", ""),
)

CONNECT_LIBS = os.environ.get("BENCH_CONNECT_LIBS", "")
CONNECT_VERSION = os.environ.get("BENCH_CONNECT_VERSION", "?")
DEBEZIUM_VERSION = os.environ.get("BENCH_DEBEZIUM_VERSION", "?")

# Connect worker JVM (see docs/benchmarks.md "Fair tuning"); Debezium's batch/queue sizes
# and poll interval are command-line options.
CONNECT_HEAP = ["-Xms256m", "-Xmx1g"]
# As Kafka's bin/kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS), heap capped at 1 GiB.
CONNECT_JVM = CONNECT_HEAP + [
    "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
]

POLL_S = 0.1          # Kafka end-offset poll interval (one `kcat -Q`, ~6 ms CPU)
R_POLL_S = 0.005      # pg_recvlogical: output file size + wait4 poll interval
# Contender X (delivery = "exactly_once"): its offset store, the last record of each of its Kafka
# transactions. A topic of its own (kafka.offsets_topic; W keeps walrelay's default,
# walrelay.offsets): a read_committed reader of a partition gets nothing past the first open
# transaction of ANY producer on it, and other connectors (the project's tests) run exactly_once
# transactions on walrelay.offsets; X's commits seen there arrived tens of ms, at times seconds, late.
OFFSETS_TOPIC = "wrbench.offsets"
# Contender E: the CloudEvents `source` attribute ([outbox.cloudevents] source).
CE_SOURCE = "/walrelay/bench"
QUIET_S = 0.5         # X: end offsets still this long (> transaction_max_time, 100 ms) before counting
# Backlogs: drains shorter than this measure start-up and the machine's moment more than the
# contender (at 200,000 rows, 1.1–2.8 s, W's rows/s at K=10 swung ±20 % between runs of one binary);
# the report warns when any drain (snapshot: start → done) was shorter (not for --smoke).
MIN_DRAIN_S = 10.0
DEFAULT_ROWS = 1_000_000        # --rows (without it: calibrated, see backlog_rows) and --snapshot-rows
CALIBRATION_ROWS = 200_000      # the probe R drains to calibrate a pass's backlog
MAX_CALIBRATED_ROWS = 5_000_000  # calibration never goes past this (time, and WAL the slots pin)

DOCS = REPO / "docs" / "benchmarks.md"
DOCS_BEGIN = "<!-- bench:results:begin (written by deploy/bench/run.sh; edit outside these markers) -->"
DOCS_END = "<!-- bench:results:end -->"


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


# --------------------------------------------------------------------------------------
# Processes we start: remembered in .state/bench/children so a crashed or killed
# harness's leftovers (a JVM holding a slot) are stopped by the next invocation.

_children = {}  # pid -> Popen
OUTAGES = []  # wall-clock times at which the broker did not answer


def spawn(cmd, marker, **kw):
    """Starts cmd in its own session; marker is a string in its argv we can recognise."""
    p = subprocess.Popen(cmd, start_new_session=True, **kw)
    _children[p.pid] = p
    with open(CHILDREN_FILE, "a") as f:
        f.write(f"{p.pid}\t{marker}\n")
    return p


def forget(p):
    _children.pop(p.pid, None)


def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def stop_process(p, grace_s=30.0):
    """SIGTERM, wait up to grace_s, then SIGKILL. Returns (exit code, rusage or None)."""
    ru = None
    if p.returncode is None:
        try:
            os.kill(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.05)
        else:
            log(f"pid {p.pid} still running {grace_s:.0f}s after SIGTERM; SIGKILL")
            os.kill(p.pid, signal.SIGKILL)
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
    forget(p)
    return p.returncode, ru


def cleanup_leftover_children():
    if not CHILDREN_FILE.exists():
        return
    for line in CHILDREN_FILE.read_text().splitlines():
        try:
            pid_s, marker = line.split("\t", 1)
            pid = int(pid_s)
        except ValueError:
            continue
        cmd = _cmdline(pid)
        if cmd and marker in cmd:
            log(f"stopping leftover process {pid} from an earlier bench run: {cmd[:120]}")
            try:
                os.kill(pid, signal.SIGTERM)
                for _ in range(300):
                    if _cmdline(pid) is None:
                        break
                    time.sleep(0.1)
                else:
                    os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    CHILDREN_FILE.unlink()


def stop_all_children():
    for p in list(_children.values()):
        try:
            stop_process(p, grace_s=15)
        except Exception as e:  # noqa: BLE001 - best effort during cleanup
            log(f"could not stop pid {p.pid}: {e}")


# --------------------------------------------------------------------------------------
# /proc accounting

def proc_cpu_s(pid):
    """utime+stime of the whole process (all threads), seconds; None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); utime/stime are fields 14/15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_status_kb(pid, field):
    """A KiB field of /proc/<pid>/status ("VmHWM", "VmRSS"); None if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def proc_hwm_kb(pid):
    """Peak resident set size (VmHWM), KiB; None if gone."""
    return proc_status_kb(pid, "VmHWM")


def loadavg():
    return float(Path("/proc/loadavg").read_text().split()[0])


def listener_pid(port):
    """The pid of the process listening on TCP `port` (the broker), or None."""
    out = subprocess.run(["ss", "-tlnpH", f"sport = :{port}"], capture_output=True, text=True).stdout
    m = re.search(r"pid=(\d+)", out)
    return int(m.group(1)) if m else None


class Neighbours:
    """CPU that a contender makes other processes on the same 2 cores spend while it drains:
    its walsender (every contender has one) and, for the Kafka contenders, the broker. Sampled
    from /proc at the contender's first record (`at_first`) and again until its last
    (`sample`); `drain_s()` = the difference. The broker's figure includes anything else it
    serves meanwhile (nothing, in a benchmark run)."""

    def __init__(self, slot, broker):
        self.slot, self.pids, self.first, self.last = slot, {}, {}, {}
        if broker:
            pid = listener_pid(int(BROKERS.split(",")[0].rsplit(":", 1)[1]))
            if pid:
                self.pids["broker"] = pid

    def at_first(self):
        ws = psql(f"SELECT active_pid FROM pg_replication_slots WHERE slot_name = '{self.slot}'", check=False)
        if ws.isdigit():
            self.pids["walsender"] = int(ws)
        for name, pid in self.pids.items():
            cpu = proc_cpu_s(pid)
            if cpu is not None:
                self.first[name] = self.last[name] = cpu

    def sample(self):
        for name in self.first:
            cpu = proc_cpu_s(self.pids[name])
            if cpu is not None:
                self.last[name] = cpu

    def drain_s(self):
        """{"cpu_walsender_s": …, "cpu_broker_s": …} for the processes found."""
        return {f"cpu_{name}_s": self.last[name] - self.first[name] for name in self.first}


# --------------------------------------------------------------------------------------
# PostgreSQL

def pg_env(user):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGPASSWORD"] = user[1]
    env["PGCONNECT_TIMEOUT"] = "10"
    return env


def psql(sql, db=DB, user=PG_SUPER, check=True):
    """Runs sql (one or more statements); returns unaligned, tuples-only stdout."""
    r = subprocess.run(
        ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", PG_HOST, "-p", str(PG_PORT),
         "-U", user[0], "-d", db, "-c", sql],
        env=pg_env(user), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise BenchError(f"psql failed ({sql[:80]}...): {r.stderr.strip()}")
    return r.stdout.strip()


def conninfo(user, replication=False):
    # TLS for every contender alike (the dev cluster runs with ssl = on); see
    # docs/benchmarks.md, "Workload".
    s = (f"host={PG_HOST} port={PG_PORT} dbname={DB} user={user[0]} password={user[1]} "
         "sslmode=require")
    return s + (" replication=database" if replication else "")


def drop_slot(name):
    """Drops a slot. A walsender still attached (its client is shutting down) gets 5 s to
    go away on its own, then is terminated."""
    t0 = time.monotonic()
    while True:
        row = psql(f"SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = '{name}'",
                   db="postgres")
        if not row:
            return
        active = int(row)
        if not active:
            psql(f"SELECT pg_drop_replication_slot('{name}')", db="postgres", check=False)
        elif time.monotonic() - t0 > 5:
            psql(f"SELECT pg_terminate_backend({active})", db="postgres", check=False)
        if time.monotonic() - t0 > 60:
            raise BenchError(f"could not drop replication slot {name}")
        time.sleep(0.2)


def drop_bench_slots():
    names = psql(f"SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE '{SLOT_PREFIX}%'",
                 db="postgres")
    for name in filter(None, names.splitlines()):
        log(f"dropping replication slot {name}")
        drop_slot(name)


def create_slot(name):
    return psql(f"SELECT lsn FROM pg_create_logical_replication_slot('{name}', 'pgoutput')")


def setup_database():
    drop_bench_slots()
    log(f"recreating database {DB}")
    psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", db="postgres")
    psql(f"CREATE DATABASE {DB}", db="postgres")
    r = subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", PG_HOST, "-p", str(PG_PORT), "-U", "postgres",
         "-d", DB, "-f", str(BENCH_DIR / "workload" / "schema.sql")],
        env=pg_env(PG_SUPER), capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"applying workload/schema.sql failed: {r.stderr.strip()}")
    psql(f"CREATE PUBLICATION {PUB} FOR TABLE public.outbox")


def pgbench(k, writers, transactions=None, rate=None, seconds=None, log_path=None, while_running=None,
            script="outbox_insert.pgbench", defines=()):
    """Runs the outbox insert script (or another workload/ script, with extra -D defines);
    returns (elapsed s, tps reported by pgbench).
    while_running(t_start) is called once the process runs (latency pass: timed samples)."""
    cmd = ["pgbench", "-n", "-M", "prepared", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_SUPER[0],
           "-c", str(writers), "-j", str(min(writers, 2)), "-D", f"k={k}",
           "-f", str(BENCH_DIR / "workload" / script)]
    for d in defines:
        cmd += ["-D", d]
    if transactions is not None:
        cmd += ["-t", str(transactions)]
    if rate is not None:
        cmd += ["-R", str(rate)]
    if seconds is not None:
        cmd += ["-T", str(seconds)]
    cmd.append(DB)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=pg_env(PG_SUPER), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if while_running:
        try:
            while_running(t0)
        except BaseException:
            p.kill()
            p.communicate()
            raise
    out, err = p.communicate()
    elapsed = time.monotonic() - t0
    if log_path:
        Path(log_path).write_text(out + err)
    if p.returncode != 0:
        raise BenchError(f"pgbench failed: {err.strip()[-500:]}")
    m = re.search(r"tps = ([0-9.]+)", out)
    return elapsed, float(m.group(1)) if m else None


# --------------------------------------------------------------------------------------
# Kafka

def ensure_topics(topics=TOPICS):
    """Creates the topics (default: the outbox topics) up front with LogAppendTime (latency mode
    needs the broker's append time; drain times are measured with it); returns
    {topic: [partition, ...]}."""
    r = subprocess.run(
        ["java", "-cp", f"{CONNECT_LIBS}/*", str(BENCH_DIR / "BenchAdmin.java"), "ensure-topics", BROKERS,
         str(PARTITIONS), *topics],
        capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise BenchError(f"BenchAdmin ensure-topics failed: {r.stderr.strip()[-2000:]}")
    for line in r.stdout.splitlines():
        log(f"topic {line}")
    # A topic just created can be missing from the next metadata response for a moment
    # (seen once in 2 December's A/B runs): ask again for up to 30 s before giving up.
    deadline = time.monotonic() + 30
    while True:
        out = subprocess.run(["kcat", "-b", BROKERS, "-L", "-J"], capture_output=True, text=True, timeout=30)
        meta = json.loads(out.stdout) if out.returncode == 0 else {"topics": []}
        parts = {t["topic"]: sorted(p["partition"] for p in t["partitions"])
                 for t in meta["topics"] if t["topic"] in topics}
        missing = [t for t in topics if not parts.get(t)]
        if not missing:
            return parts
        if time.monotonic() > deadline:
            raise BenchError(f"topics not visible in metadata after 30 s: {missing}")
        time.sleep(0.5)


def end_offsets(parts, patience_s=120):
    """{(topic, partition): high watermark}. High watermark = acknowledged by the in-sync
    replicas (acks=all), i.e. 'in Kafka'. The broker is shared with the project's tests, some
    of which stop and restart it: retry for up to patience_s (and say so) before giving up."""
    cmd = ["kcat", "-b", BROKERS, "-Q", "-m", "10"]
    for t, ps in parts.items():
        for p in ps:
            cmd += ["-t", f"{t}:{p}:-1"]
    want = sum(len(ps) for ps in parts.values())
    t0, warned = time.monotonic(), False
    while True:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        offs = {}
        for line in r.stdout.splitlines():
            m = re.match(r"(\S+) \[(\d+)\] offset (-?\d+)", line)
            if m:
                offs[(m.group(1), int(m.group(2)))] = int(m.group(3))
        if len(offs) == want and all(v >= 0 for v in offs.values()):
            if warned:
                log(f"  broker answers again after {time.monotonic() - t0:.0f}s")
            return offs
        if time.monotonic() - t0 > patience_s:
            raise BenchError(f"kcat -Q gave no complete end offsets for {patience_s}s: {r.stdout!r} "
                             f"{r.stderr.strip()[-300:]!r}")
        if not warned:
            log("  warning: the broker does not answer (a test stopping it?); results of this run "
                "include the outage")
            warned = True
            OUTAGES.append(time.time())
        time.sleep(1)


def delta(offs, base):
    return sum(offs[k] - base[k] for k in base)


def consume(topic, partition, start, count=None, fmt="%T\\t%k\\t%h\\t%s\\n", committed=False):
    """Records of one partition from offset start (to the end, or count records). committed:
    isolation.level=read_committed said explicitly (contender X; librdkafka's default too): only
    records of committed transactions, and the end is the last stable offset."""
    cmd = ["kcat", "-b", BROKERS, "-C", "-q", "-e", "-t", topic, "-p", str(partition), "-o", str(start),
           "-f", fmt]
    if committed:
        cmd += ["-X", "isolation.level=read_committed"]
    if count is not None:
        cmd += ["-c", str(count)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise BenchError(f"kcat consume {topic}[{partition}]@{start} failed: {r.stderr.strip()}")
    return [line.split("\t", 3) for line in r.stdout.splitlines() if line]


def parse_headers(h):
    out = {}
    for kv in filter(None, h.split(",")):
        k, _, v = kv.partition("=")
        out[k] = v
    return out


def verify_routing(parts, base, end, expected, got=None, committed=False, id_header="id"):
    """Checks that what arrived since `base` is the outbox backlog routed as the EventRouter
    routes it: topic = outbox.event.<aggregatetype>, key = aggregateid, header id = row id,
    value carrying the row's payload. Samples up to 5 records per partition and looks each
    one up in the database by its id header. Returns a short description; raises on mismatch.
    X: got = the records counted read_committed (end offsets also count transaction markers),
    and the samples are read read_committed. E: id_header = "ce_id" (CloudEvents binary mode)."""
    if got is None:
        got = delta(end, base)
    if got < expected:
        raise BenchError(f"only {got} of {expected} records arrived")
    samples = []
    for (topic, p), b in sorted(base.items()):
        if end[(topic, p)] > b:
            for rec in consume(topic, p, b, count=5, committed=committed):
                samples.append((topic, rec))
    if not samples:
        raise BenchError("no records to verify")
    ids = {}
    for topic, rec in samples:
        if len(rec) != 4:
            raise BenchError(f"unparseable record on {topic}: {rec!r}")
        _, key, headers, value = rec
        hid = parse_headers(headers).get(id_header)
        if not hid:
            raise BenchError(f"record on {topic} key={key!r} has no `{id_header}` header (headers: {headers!r})")
        try:
            uuid.UUID(hid)
        except ValueError:
            raise BenchError(f"`{id_header}` header {hid!r} on {topic} is not the outbox row's uuid") from None
        ids[hid] = (topic, key, value)
    id_list = ",".join(f"'{i}'" for i in ids)
    rows = psql(f"SELECT id, aggregatetype, aggregateid, payload->>'orderId' FROM public.outbox "
                f"WHERE id IN ({id_list})")
    found = {}
    for line in rows.splitlines():
        rid, atype, aid, order_id = line.split("|")
        found[rid] = (atype, aid, order_id)
    for hid, (topic, key, value) in ids.items():
        if hid not in found:
            raise BenchError(f"record {topic} key={key} id={hid}: no outbox row has this id")
        atype, aid, order_id = found[hid]
        if topic != f"outbox.event.{atype}":
            raise BenchError(f"record id={hid} is on {topic}, its aggregatetype is {atype}")
        if key != aid:
            raise BenchError(f"record id={hid} has key {key!r}, its aggregateid is {aid!r}")
        if order_id not in value:
            raise BenchError(f"record id={hid}: value does not carry the row's payload ({value[:120]!r})")
    note = f"{len(ids)} sampled records match their rows (topic, key, {id_header} header, payload)"
    if got > expected:
        note += f"; {got - expected} more records than rows (duplicates)"
    return note


def verify_table_events(base, end, expected):
    """Checks that what arrived on TABLE_TOPIC since `base` is the update backlog as Debezium's
    change events (JSON converter, schemas.enable=false): at least `expected` records; up to 5
    sampled per partition, each with key {"id": <id of an existing row>} and a value with
    op "u", before null (REPLICA IDENTITY DEFAULT), after = the ten columns with after.id = the
    key's id, and source naming the connector type, schema and table. Returns a short
    description; raises on mismatch."""
    got = delta(end, base)
    if got < expected:
        raise BenchError(f"only {got} of {expected} records arrived on {TABLE_TOPIC}")
    samples = []
    for (topic, p), b in sorted(base.items()):
        if end[(topic, p)] > b:
            samples += [(topic, p, rec) for rec in consume(topic, p, b, count=5)]
    if not samples:
        raise BenchError("no records to verify")
    schema, table = TABLE.split(".")
    for topic, p, rec in samples:
        where = f"record on {topic}[{p}]"
        if len(rec) != 4:
            raise BenchError(f"unparseable {where}: {rec!r}")
        _, key, _, value = rec
        try:
            k, v = json.loads(key), json.loads(value)
        except ValueError as e:
            raise BenchError(f"{where}: key {key[:80]!r} or value {value[:120]!r} is not JSON ({e})") from None
        if not (isinstance(k, dict) and list(k) == ["id"] and isinstance(k["id"], int)
                and 1 <= k["id"] <= TABLE_ROWS):
            raise BenchError(f"{where}: key {key!r} is not {{\"id\": <1..{TABLE_ROWS}>}}")
        if not isinstance(v, dict) or v.get("op") != "u" or v.get("before") is not None:
            raise BenchError(f"{where} key {key}: not an update event with before = null: {value[:200]!r}")
        after, source = v.get("after"), v.get("source") or {}
        if not isinstance(after, dict) or set(after) != TABLE_COLUMNS or after["id"] != k["id"]:
            raise BenchError(f"{where} key {key}: `after` is not the row's ten columns with its id: "
                             f"{value[:300]!r}")
        if (source.get("connector"), source.get("schema"), source.get("table")) != ("postgresql", schema, table):
            raise BenchError(f"{where} key {key}: source does not name postgresql/{schema}/{table}: {source!r}")
    note = (f"{got} records; {len(samples)} sampled are update events (op u, before null, ten columns, "
            f"key = after.id)")
    if got > expected:
        note += f"; {got - expected} more records than updates (duplicates)"
    return note


# Contenders A and J: the table pass with [[table]] format = "avro" / "json_schema".
REGISTRY_FORMATS = {"A": "avro", "J": "json_schema"}


def registry_url():
    url = os.environ.get("WALRELAY_REGISTRY_URL")
    if not url:
        raise BenchError("contenders A and J need a schema registry: run "
                         "`eval \"$(deploy/dev/registry.sh up)\"` first (WALRELAY_REGISTRY_URL)")
    return url


def consume_bytes(topic, partition, start, count):
    """(key, value) bytes of `count` records of one partition from offset start, binary-safe:
    kcat prints each record's key and value sizes, then their bytes."""
    cmd = ["kcat", "-b", BROKERS, "-C", "-q", "-e", "-t", topic, "-p", str(partition), "-o", str(start),
           "-c", str(count), "-f", "%K %S:%k%s"]
    r = subprocess.run(cmd, capture_output=True, timeout=300)
    if r.returncode != 0:
        raise BenchError(f"kcat consume {topic}[{partition}]@{start} failed: {r.stderr.decode().strip()}")
    out, data = [], r.stdout
    while data:
        head, _, data = data.partition(b":")
        klen, vlen = (max(int(x), 0) for x in head.split())
        out.append((data[:klen], data[klen:klen + vlen]))
        data = data[klen + vlen:]
    return out


def avro_long(data, at):
    """Avro's zigzag varint at data[at:]: (value, next position)."""
    shift = n = 0
    while True:
        b = data[at]
        n |= (b & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), at


def verify_registry_table_events(base, end, expected, fmt):
    """verify_table_events for contenders A and J: at least `expected` records; up to 5 sampled
    per partition, key and value each in Confluent's wire format (magic byte 0, a 4-byte schema
    id); J's bodies are then checked as verify_table_events checks the JSON ones; A's key body
    is the Key record's id and its value body starts with before = null (union branch 0), after
    present (branch 1) and after.id = the key's id."""
    got = delta(end, base)
    if got < expected:
        raise BenchError(f"only {got} of {expected} records arrived on {TABLE_TOPIC}")
    samples = []
    for (topic, p), b in sorted(base.items()):
        if end[(topic, p)] > b:
            samples += [(topic, p, rec) for rec in consume_bytes(topic, p, b, 5)]
    if not samples:
        raise BenchError("no records to verify")
    ids = set()
    for topic, p, (key, value) in samples:
        where = f"record on {topic}[{p}]"
        if len(key) < 6 or len(value) < 6 or key[0] != 0 or value[0] != 0:
            raise BenchError(f"{where}: key {key[:16]!r} / value {value[:16]!r} not in the wire format")
        ids.add((key[1:5], value[1:5]))
        if fmt == "json_schema":
            k, v = json.loads(key[5:]), json.loads(value[5:])
            if not (isinstance(k, dict) and list(k) == ["id"] and 1 <= k["id"] <= TABLE_ROWS):
                raise BenchError(f"{where}: key {key!r} is not {{\"id\": <1..{TABLE_ROWS}>}}")
            after = v.get("after") or {}
            if v.get("op") != "u" or v.get("before") is not None or set(after) != TABLE_COLUMNS \
                    or after["id"] != k["id"]:
                raise BenchError(f"{where}: not an update event of the key's row: {value[:300]!r}")
        else:
            kid, _ = avro_long(key, 5)
            if not 1 <= kid <= TABLE_ROWS:
                raise BenchError(f"{where}: key id {kid} is not in 1..{TABLE_ROWS}")
            if value[5:7] != b"\x00\x02" or avro_long(value, 7)[0] != kid:
                raise BenchError(f"{where}: value {value[:24]!r} is not before = null, after.id = {kid}")
    note = (f"{got} records; {len(samples)} sampled are {fmt} update events in the wire format "
            f"(schema ids {sorted(int.from_bytes(v, 'big') for _, v in ids)})")
    if got > expected:
        note += f"; {got - expected} more records than updates (duplicates)"
    return note


# --------------------------------------------------------------------------------------
# pgoutput stream file written by pg_recvlogical: count the Insert messages (verifies R).

def count_pgoutput_inserts(path, tag="I"):
    """Insert messages in the stream file (tag="U": Update messages)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return 0
        # mmap, not read(): keeps this process small (its RSS would otherwise be inherited
        # by the next fork) and the file is ~600 bytes per row.
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _walk_pgoutput(data, count_tag=tag)


def _walk_pgoutput(data, on_insert=None, partial=False, count_tag="I"):
    """Walks pg_recvlogical's pgoutput output (each message followed by '\\n'); returns the number
    of Insert messages (of count_tag messages: "U" counts Updates). on_insert(tuple_start,
    message_end) is called for each Insert. partial: the data may end inside a message (a stream
    still arriving); stop there."""
    i, n, inserts = 0, len(data), 0

    def cstring(j):
        e = data.find(b"\0", j)
        if e < 0:
            raise BenchError("pgoutput: unterminated string")
        return e + 1

    def tupledata(j):
        ncols = int.from_bytes(data[j:j + 2], "big")
        j += 2
        for _ in range(ncols):
            kind = data[j]
            j += 1
            if kind in (ord("t"), ord("b")):
                ln = int.from_bytes(data[j:j + 4], "big")
                j += 4 + ln
        return j

    while i < n:
        tag = chr(data[i])
        j = i + 1
        start = None
        try:
            if tag == "B":
                j += 20
            elif tag == "C":
                j += 25
            elif tag == "O":
                j = cstring(j + 8)
            elif tag == "R":
                j = cstring(cstring(j + 4)) + 1
                ncols = int.from_bytes(data[j:j + 2], "big")
                j += 2
                for _ in range(ncols):
                    j = cstring(j + 1) + 8
            elif tag == "Y":
                j = cstring(cstring(j + 4))
            elif tag == "I":
                start = j + 5
                j = tupledata(start)
            elif tag == "U":
                j += 4
                if chr(data[j]) in "KO":
                    j = tupledata(j + 1)
                j = tupledata(j + 1)
            elif tag == "D":
                j = tupledata(j + 5)
            elif tag == "T":
                nrel = int.from_bytes(data[j:j + 4], "big")
                j += 5 + 4 * nrel
            elif tag == "M":
                j = cstring(j + 9)
                j += 4 + int.from_bytes(data[j:j + 4], "big")
            else:
                raise BenchError(f"unexpected pgoutput message {tag!r} at byte {i}")
        except (BenchError, IndexError):
            if partial:  # the stream stops inside this message
                break
            raise
        if j >= n or data[j] != 0x0A:  # pg_recvlogical writes '\n' after each message
            if partial:
                break
            raise BenchError(f"pgoutput framing lost at byte {j}")
        if tag == count_tag:
            inserts += 1
        if tag == "I" and on_insert:
            on_insert(start, j)
        i = j + 1
    return inserts


# --------------------------------------------------------------------------------------
# Contenders

def fill_template(path, out, **vals):
    text = Path(path).read_text()
    for k, v in vals.items():
        text = text.replace(f"@{k}@", str(v))
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise BenchError(f"{path}: unfilled template variables {left}")
    Path(out).write_text(text)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def result(contender, k, run, n, **kw):
    r = dict(contender=contender, k=k, run=run, n=n, status="ok", rows_per_s=None, wall_s=None,
             first_s=None, drain_s=None, cpu_total_s=None, cpu_drain_s=None, rss_kb=None,
             cpu_walsender_s=None, cpu_broker_s=None, load1=loadavg(), verified="")
    r.update(kw)
    return r


def run_r(ctx, slot, k, run, n, end_lsn, mode=None):
    """mode: None for the outbox pass, TABLE_MODE for the table-events pass (another publication,
    and the backlog is Update messages)."""
    mode = mode or OUTBOX_MODE
    d = ctx.rundir / f"{mode['prefix']}k{k}-run{run}-R"
    d.mkdir()
    out = d / "stream.pgoutput"
    cmd = ["pg_recvlogical", "-d", conninfo(PG_RELAY), "--slot", slot, "--plugin=pgoutput",
           "-o", "proto_version=1", "-o", f"publication_names={mode['pub']}",
           "--start", f"--endpos={end_lsn}", "--no-loop", "-f", str(out)]
    res = result("R", k, run, n)
    log(f"  R: pg_recvlogical --endpos={end_lsn}")
    with open(d / "pg_recvlogical.log", "w") as errf:
        t0 = time.monotonic()
        p = spawn(cmd, str(out), stdout=subprocess.DEVNULL, stderr=errf, env=pg_env(PG_RELAY))
        t_first = cpu_first = None
        hwm_kb = 0
        deadline = t0 + max(300, n / 500)
        neighbours = Neighbours(slot, broker=False)
        while True:
            neighbours.sample()
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            now = time.monotonic()
            if pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                forget(p)
                break
            if t_first is None and out.exists() and out.stat().st_size > 0:
                t_first, t_first_wall, cpu_first = now, time.time(), proc_cpu_s(p.pid)
                neighbours.at_first()
            # Peak RSS from /proc (VmHWM belongs to the exec'd image). Not wait4()'s ru_maxrss:
            # Linux carries the pre-exec maxrss over exec, so it would report this Python
            # process's RSS at fork time.
            hwm = proc_hwm_kb(p.pid)
            if hwm:
                hwm_kb = max(hwm_kb, hwm)
            if now > deadline:
                stop_process(p)
                raise BenchError(f"pg_recvlogical did not reach {end_lsn} within {deadline - t0:.0f}s")
            time.sleep(R_POLL_S)
    if p.returncode != 0:
        raise BenchError(f"pg_recvlogical exited {p.returncode}: {(d / 'pg_recvlogical.log').read_text()[-500:]}")
    wall = now - t0
    cpu = ru.ru_utime + ru.ru_stime
    inserts = count_pgoutput_inserts(out, tag=mode["pgoutput_tag"])
    what = {"I": "Insert", "U": "Update"}[mode["pgoutput_tag"]]
    if inserts != n:
        raise BenchError(f"R streamed {inserts} {what} messages, expected {n}")
    if t_first is None:
        raise BenchError("pg_recvlogical exited before its output appeared (poll too slow?)")
    # Drain = first byte (polled every 5 ms) .. last write (the file's mtime), not .. exit:
    # pg_recvlogical only exits once the server confirms a position at or past --endpos
    # (a keepalive), which a Kafka-side measurement has no equivalent for.
    drain = max(out.stat().st_mtime_ns / 1e9 - t_first_wall, 1e-3)
    res.update(wall_s=wall, first_s=t_first - t0, rss_kb=hwm_kb or None, cpu_total_s=cpu,
               verified=f"{inserts} {what} messages in the stream file",
               drain_s=drain, rows_per_s=n / drain, cpu_drain_s=cpu - (cpu_first or 0.0),
               **neighbours.drain_s())
    size = out.stat().st_size
    if not ctx.args.keep:
        out.unlink()
    log(f"  R: {n} rows in {drain:.2f}s = {n / drain:,.0f} rows/s ({size / 1e6:.0f} MB of pgoutput), "
        f"CPU {cpu:.2f}s, RSS {hwm_kb / 1024:.1f} MiB")
    return res


def rel(path):
    try:
        return str(Path(path).relative_to(REPO))
    except ValueError:
        return str(path)


def log_tail(path, lines=2, width=300):
    try:
        tail = [l.strip() for l in Path(path).read_text(errors="replace").splitlines() if l.strip()][-lines:]
    except OSError:
        return ""
    return " / ".join(tail)[-width:]


def watch_kafka(ctx, p, parts, base, n, t0, first_timeout_s, stall_timeout_s, name, log_path,
                neighbours=None):
    """Polls end offsets until n new records are in Kafka. Returns timing/CPU samples (and
    samples `neighbours`, a Neighbours, at the first record and at the last)."""
    t_first = cpu_before_first = None
    last_count, last_change = 0, time.monotonic()
    cpu_prev = 0.0
    while True:
        if p.poll() is not None:
            forget(p)
            raise BenchError(f"{name} exited with code {p.returncode} before delivering "
                             f"({last_count}/{n} records): {log_tail(log_path)} (log: {rel(log_path)})")
        cpu_now = proc_cpu_s(p.pid)
        offs = end_offsets(parts)
        now = time.monotonic()
        count = delta(offs, base)
        if count > 0 and t_first is None:
            # CPU spent before the first record: the sample taken just before this poll.
            t_first, cpu_before_first = now, cpu_prev
            if neighbours:
                neighbours.at_first()
        if count >= n:
            if neighbours:
                neighbours.sample()
            return dict(t_done=now, t_first=t_first, cpu_before_first=cpu_before_first,
                        cpu_done=proc_cpu_s(p.pid), rss_kb=proc_hwm_kb(p.pid), offsets=offs, count=count)
        if count != last_count:
            last_count, last_change = count, now
        if count == 0 and now - t0 > first_timeout_s:
            raise BenchError(f"{name}: no record in Kafka {first_timeout_s:.0f}s after start; "
                             f"log: {rel(log_path)}")
        if count > 0 and now - last_change > stall_timeout_s:
            raise BenchError(f"{name}: stuck at {count}/{n} records for {stall_timeout_s:.0f}s; "
                             f"log: {rel(log_path)}")
        cpu_prev = cpu_now if cpu_now is not None else cpu_prev
        time.sleep(POLL_S)


def append_time_span(base, end):
    """(first, last) LogAppendTime in ms of the records in [base, end) over all partitions:
    the broker's own clock, to the millisecond, whatever our poll interval."""
    firsts, lasts = [], []
    for (topic, p), b in base.items():
        e = end[(topic, p)]
        if e > b:
            firsts += [int(r[0]) for r in consume(topic, p, b, count=1, fmt="%T\\n")]
            lasts += [int(r[0]) for r in consume(topic, p, e - 1, count=1, fmt="%T\\n")]
    return min(firsts), max(lasts)


def kafka_result(contender, k, run, n, t0, t0_wall, base, w, verified):
    """Drain time = last record's LogAppendTime - first record's (all topics and partitions);
    the end-offset polls only decide when to stop and when to sample CPU/RSS."""
    res = result(contender, k, run, n)
    first_ms, last_ms = append_time_span(base, w["offsets"])
    drain = (last_ms - first_ms) / 1000.0
    res.update(wall_s=w["t_done"] - t0, first_s=first_ms / 1000.0 - t0_wall, drain_s=drain,
               rows_per_s=n / drain if drain > 0 else None,
               cpu_total_s=w["cpu_done"], cpu_drain_s=w["cpu_done"] - (w["cpu_before_first"] or 0.0),
               rss_kb=w["rss_kb"], verified=verified)
    return res


def start_connect(ctx, d, slot, poll_ms, snapshot_mode="no_data", mode=None):
    """mode: TABLE_MODE for plain table change events: the same connector on mode's table and
    publication, WITHOUT the Outbox Event Router, the key through the JSON converter too
    (schemas.enable=false, as the value), so records are Debezium's plain envelope on
    wrbench.public.<table>."""
    mode = mode or OUTBOX_MODE
    offsets = d / "offsets.dat"
    fill_template(BENCH_DIR / "connect" / "worker.properties.in", d / "worker.properties",
                  BROKERS=BROKERS, OFFSETS_FILE=offsets, REST_PORT=free_port())
    props = d / "connector.properties"
    fill_template(BENCH_DIR / "connect" / "connector.properties.in", props,
                  PG_HOST=PG_HOST, PG_PORT=PG_PORT, PG_USER=PG_RELAY[0], PG_PASSWORD=PG_RELAY[1],
                  PG_DATABASE=DB, SLOT=slot, PUBLICATION=mode["pub"], SNAPSHOT_MODE=snapshot_mode,
                  MAX_BATCH=ctx.args.dbz_max_batch, MAX_QUEUE=ctx.args.dbz_max_queue, POLL_INTERVAL_MS=poll_ms)
    if mode["table"]:
        kept = [l for l in props.read_text().splitlines()
                if not l.startswith(("transforms", "table.include.list="))]
        kept += ["", "# Table-events pass (bench.py --tables): plain change events, no EventRouter.",
                 f"table.include.list={mode['table']}",
                 "key.converter=org.apache.kafka.connect.json.JsonConverter",
                 "key.converter.schemas.enable=false"]
        props.write_text("\n".join(kept) + "\n")
    connect_log = d / "connect.log"
    cmd = ["java", *CONNECT_JVM,
           f"-Dlog4j2.configurationFile={BENCH_DIR / 'connect' / 'log4j2.properties'}",
           f"-Dbench.log.file={connect_log}",
           "-cp", f"{CONNECT_LIBS}/*",
           "org.apache.kafka.connect.cli.ConnectStandalone", str(d / "worker.properties"),
           str(d / "connector.properties")]
    jvm_out = open(d / "jvm.out", "w")
    p = spawn(cmd, str(connect_log), stdin=subprocess.DEVNULL, stdout=jvm_out, stderr=subprocess.STDOUT)
    jvm_out.close()
    return p, connect_log


def start_walrelay(ctx, d, slot, name, snapshot_mode=None, sasl_ssl=False, mode=None, exactly_once=False,
                   health_port=None, cloudevents=False, binary=None, kafka_keys=None, registry_format=None):
    """Streaming (the slot exists, made by the harness), or with snapshot_mode the snapshot
    pass: walrelay creates the slot itself (its snapshot is the one the slot exports).
    sasl_ssl: over the SASL_SSL listener (contender S) instead of PLAINTEXT.
    exactly_once: `delivery = "exactly_once"` in [kafka] (contender X; the transaction_* keys at
    their defaults), and offsets_topic = OFFSETS_TOPIC (see there). health_port: a [health]
    section listening on 127.0.0.1:<port> (X: /metrics is read once, after the drain, for the
    transaction counters). cloudevents: the [[outbox]] section gets `format = "cloudevents"` in
    binary mode (contender E). binary: the walrelay binary to run (contender B: --baseline),
    default ctx.walrelay. kafka_keys: TOML lines added to [kafka] (contender B: --baseline-kafka).
    mode: TABLE_MODE replaces the [[outbox]] section by a [[table]] section for mode's table
    (topic prefix "wrbench", as Debezium's topic.prefix) and uses mode's publication.
    registry_format: the table pass's `format` ("avro": contender A, "json_schema": J), with a
    [kafka.schema_registry] section for $WALRELAY_REGISTRY_URL (deploy/dev/registry.sh)."""
    mode = mode or OUTBOX_MODE
    cfg = d / "walrelay.toml"
    fill_template(BENCH_DIR / "walrelay.toml.in", cfg, NAME=name, PG_HOST=PG_HOST, PG_PORT=PG_PORT,
                  PG_USER=PG_RELAY[0], PG_PASSWORD=PG_RELAY[1], PG_DATABASE=DB, SLOT=slot,
                  PUBLICATION=mode["pub"], BROKERS=SASL_SSL["brokers"] if sasl_ssl else BROKERS,
                  CREATE_SLOT="true" if snapshot_mode else "false")
    if mode["table"]:
        text = cfg.read_text()
        outbox = '[[outbox]]\ntable = "public.outbox"\n'
        if outbox not in text:
            raise BenchError(f"walrelay.toml.in: no `{outbox.strip()}` section to replace for the table pass")
        # The [[outbox]] section is the file's last; the comment lines just above it go with it.
        head = text.split(outbox)[0].splitlines(keepends=True)
        while head and head[-1].startswith("#"):
            head.pop()
        cfg.write_text("".join(head) + '# Table-events pass: Debezium change events to '
                       f'{TABLE_TOPIC_PREFIX}.<schema>.<table>, as Debezium\'s topic.prefix={TABLE_TOPIC_PREFIX}.\n'
                       f'[table_defaults]\ntopic_prefix = "{TABLE_TOPIC_PREFIX}"\n'
                       + (f'format = "{registry_format}"\n' if registry_format else '')
                       + f'\n[[table]]\nname = "{mode["table"]}"\n')
        if registry_format:
            # A and J write the same topic: J's subjects by record name
            # (wrbench.public.bench_table.Key/.Envelope) keep its JSON schemas apart
            # from A's Avro ones under <topic>-key/-value.
            strategy = "record" if registry_format == "json_schema" else "topic"
            with open(cfg, "a") as f:
                f.write(f'\n[kafka.schema_registry]\nurl = "{registry_url()}"\n'
                        f'subject_name_strategy = "{strategy}"\n')
    if cloudevents:
        text = cfg.read_text()
        outbox = '[[outbox]]\ntable = "public.outbox"\n'
        if outbox not in text:
            raise BenchError(f"walrelay.toml.in: no `{outbox.strip()}` section for format = \"cloudevents\"")
        cfg.write_text(text.replace(outbox, outbox + 'format = "cloudevents"\n\n[outbox.cloudevents]\n'
                                    f'mode = "binary"\nsource = "{CE_SOURCE}"\n', 1))
    if sasl_ssl:
        text = cfg.read_text()
        keys = (f'security_protocol = "sasl_ssl"\nsasl_mechanism = "SCRAM-SHA-512"\n'
                f'sasl_username = "{SASL_SSL["user"]}"\nsasl_password = "${{BENCH_KAFKA_PASSWORD}}"\n'
                f'ssl_ca = "{SASL_SSL["tls_dir"]}/ca.pem"\n')
        cfg.write_text(text.replace("[kafka]\n", "[kafka]\n" + keys, 1))
    if kafka_keys:
        text = cfg.read_text()
        if "[kafka]\n" not in text:
            raise BenchError("walrelay.toml.in: no [kafka] section for --baseline-kafka")
        cfg.write_text(text.replace("[kafka]\n", "[kafka]\n" + kafka_keys.rstrip("\n") + "\n", 1))
    if exactly_once:
        text = cfg.read_text()
        if "[kafka]\n" not in text:
            raise BenchError("walrelay.toml.in: no [kafka] section for delivery = \"exactly_once\"")
        keys = f'delivery = "exactly_once"\noffsets_topic = "{OFFSETS_TOPIC}"\n'
        cfg.write_text(text.replace("[kafka]\n", "[kafka]\n" + keys, 1))
    if health_port:
        with open(cfg, "a") as f:
            f.write(f'\n[health]\nlisten = "127.0.0.1:{health_port}"\n')
    if snapshot_mode:
        with open(cfg, "a") as f:
            f.write(f'\n[snapshot]\nmode = "{snapshot_mode}"\n')
    wlog = d / "walrelay.log"
    env = dict(os.environ)
    env.setdefault("WALRELAY_LOG", "info")
    env["BENCH_KAFKA_PASSWORD"] = SASL_SSL["password"]
    with open(wlog, "w") as f:
        p = spawn([str(binary or ctx.walrelay), "run", "--config", str(cfg)], str(cfg), stdin=subprocess.DEVNULL,
                  stdout=f, stderr=subprocess.STDOUT, env=env)
    return p, wlog


def verify_run(ctx, base, end, n, outages, mode=None, id_header="id", registry_format=None):
    """verify_routing's verdict (verify_table_events' in the table pass) on the records between
    base and end, marked DISTURBED when the broker stopped answering during the run
    (len(OUTAGES) grew past `outages`)."""
    if mode and mode["table"] and registry_format:
        verified = verify_registry_table_events(base, end, n, registry_format)
    elif mode and mode["table"]:
        verified = verify_table_events(base, end, n)
    else:
        verified = verify_routing(ctx.parts, base, end, n, id_header=id_header)
    if len(OUTAGES) > outages:
        verified += "; DISTURBED: the broker did not answer for a while during this run"
    return verified


def run_kafka_contender(ctx, contender, slot, k, run, n, mode=None):
    """mode: None for the outbox pass, TABLE_MODE for the table-events pass."""
    mode = mode or OUTBOX_MODE
    parts = ctx.tparts if mode["table"] else ctx.parts
    d = ctx.rundir / f"{mode['prefix']}k{k}-run{run}-{contender}"
    d.mkdir()
    base = end_offsets(parts)
    outages = len(OUTAGES)
    if contender == "D":
        log("  D: Kafka Connect standalone + Debezium PostgresConnector"
            + (f" (plain table events of {mode['table']})" if mode["table"] else " + EventRouter"))
        t0, t0_wall = time.monotonic(), time.time()
        p, plog = start_connect(ctx, d, slot, ctx.args.dbz_poll_ms, mode=mode)
        first_timeout, name = 240, "Kafka Connect"
    else:
        secured = contender == "S"
        binary = ctx.baseline if contender == "B" else ctx.walrelay
        log(f"  {contender}: {rel(binary)} run" + (" over SASL_SSL" if secured else "")
            + (" with format = \"cloudevents\" (binary mode)" if contender == "E" else "")
            + (f" with format = \"{REGISTRY_FORMATS[contender]}\"" if contender in REGISTRY_FORMATS else "")
            + (f", [[table]] {mode['table']}" if mode["table"] else ""))
        t0, t0_wall = time.monotonic(), time.time()
        p, plog = start_walrelay(ctx, d, slot,
                                 f"wrbench-{ctx.stamp}-{mode['prefix']}k{k}-run{run}-{contender.lower()}",
                                 sasl_ssl=secured, mode=mode, cloudevents=contender == "E", binary=binary,
                                 kafka_keys=ctx.args.baseline_kafka if contender == "B" else None,
                                 registry_format=REGISTRY_FORMATS.get(contender))
        first_timeout, name = 120, "walrelay"
    neighbours = Neighbours(slot, broker=True)
    try:
        w = watch_kafka(ctx, p, parts, base, n, t0, first_timeout, 90, name, plog, neighbours)
    finally:
        code, _ = stop_process(p)
    verified = verify_run(ctx, base, w["offsets"], n, outages, mode=mode,
                          id_header="ce_id" if contender == "E" else "id",
                          registry_format=REGISTRY_FORMATS.get(contender))
    res = kafka_result(contender, k, run, n, t0, t0_wall, base, w, verified)
    res.update(neighbours.drain_s())
    log(f"  {contender}: {n} rows in {res['drain_s']:.3f}s = {fmt(res['rows_per_s'], ',.0f')} rows/s "
        f"(first record {res['first_s']:.1f}s after start), CPU {res['cpu_total_s']:.2f}s "
        f"({res['cpu_drain_s']:.2f}s while draining), RSS {res['rss_kb'] / 1024:.0f} MiB; {verified}")
    if code not in (0, 143, -15):
        log(f"  {contender}: note: exited with code {code} after SIGTERM")
    return res


# --------------------------------------------------------------------------------------
# Contender X: walrelay with delivery = "exactly_once". Its records reach Kafka in transactions;
# each committed transaction adds a commit marker to every partition it wrote to and aborted
# records keep their offsets, so end offsets are not record counts, and a record counts only once
# a read_committed consumer can see it (its transaction committed).

def parse_lsn(text):
    """'16/B374D848' -> int."""
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


class KafkaTail:
    """A read_committed kcat consumer following one partition from offset `start` during a run
    (-u: unbuffered), its output read as it arrives: (wall time the line arrived, line) per
    record. A record reaches it once its transaction is committed (the broker serves a
    read_committed fetch only up to the last stable offset)."""

    def __init__(self, ctx, d, topic, partition, start, fmt):
        # A client.id unique to this process: the marker that lets a later run stop it if this
        # harness dies (see spawn), never another kcat.
        self.marker = f"client.id=wrbench-tail-{ctx.stamp}-{uuid.uuid4().hex[:8]}"
        cmd = ["kcat", "-b", BROKERS, "-C", "-u", "-q", "-X", "isolation.level=read_committed",
               "-X", self.marker, "-t", topic, "-p", str(partition), "-o", str(start), "-f", fmt]
        self.errf = open(d / f"tail-{topic}-{partition}.log", "w")
        self.p = spawn(cmd, self.marker, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.errf)
        self.lines, self.lock = [], threading.Lock()
        self.thread = threading.Thread(target=self._read, args=(self.p.stdout.fileno(),), daemon=True)
        self.thread.start()

    def _read(self, fd):
        buf = b""
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                return
            t = time.time()
            buf += b
            *done, buf = buf.split(b"\n")
            if done:
                with self.lock:
                    self.lines.extend((t, line.decode(errors="replace")) for line in done if line)

    def count(self):
        with self.lock:
            return len(self.lines)

    def snapshot(self):
        with self.lock:
            return list(self.lines)

    def stop(self):
        stop_process(self.p, grace_s=5)
        self.thread.join(5)
        self.p.stdout.close()
        self.errf.close()


class OffsetsTail:
    """X's commits as a read_committed consumer sees them: a KafkaTail of X's offset topic
    (OFFSETS_TOPIC, one partition) from its end before X starts. Every Kafka transaction of X ends with the
    offset-store record of the position it covers (JSON, `lsn` = the end LSN of the last
    PostgreSQL transaction in it), so the arrival of that record is the moment the transaction's
    records became visible. If the topic does not exist yet (a fresh broker, X's first run), the
    tail starts from offset 0 as soon as walrelay has created it; commits it reads
    late then are early ones, never the last one a drain waits for."""

    def __init__(self, ctx, d, connector):
        self.ctx, self.d, self.connector, self.tail = ctx, d, connector, None
        self.base = end_offsets({OFFSETS_TOPIC: [0]})[(OFFSETS_TOPIC, 0)] if self._exists() else 0

    @staticmethod
    def _exists():
        out = subprocess.run(["kcat", "-b", BROKERS, "-L", "-J"], capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            return False
        return any(t["topic"] == OFFSETS_TOPIC and t.get("partitions") for t in json.loads(out.stdout)["topics"])

    def ensure_started(self):
        if self.tail is None and (self.base > 0 or self._exists()):
            self.tail = KafkaTail(self.ctx, self.d, OFFSETS_TOPIC, 0, self.base, "%k\\t%s\\n")
        return self.tail is not None

    def commits(self):
        """[(arrival wall time, stored lsn)] of this connector's offset records, in order."""
        out = []
        for t, line in (self.tail.snapshot() if self.tail else []):
            key, _, value = line.partition("\t")
            if key != self.connector:
                continue
            try:
                out.append((t, parse_lsn(json.loads(value)["lsn"])))
            except (ValueError, KeyError, TypeError):
                continue
        return out

    def stop(self):
        if self.tail:
            self.tail.stop()


def covering_commit(commits, lsn, positions=None):
    """The arrival time of the first offset record with a stored position past `lsn` (a record's
    walrelay.lsn = its transaction's commit LSN; a stored position = the end LSN of the last
    whole transaction covered), i.e. the commit that made the record visible; None if not seen."""
    if positions is None:
        positions = [c[1] for c in commits]
    i = bisect.bisect_right(positions, lsn)
    return commits[i][0] if i < len(commits) else None


def scrape_metrics(port):
    """walrelay's transaction counters and histograms from its /metrics (X only): {name: value}."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError as e:
        log(f"  X: could not read /metrics: {e}")
        return {}
    out = {}
    for line in text.splitlines():
        m = re.match(r"(walrelay_kafka_transaction\w*?)(?:_total)?(?:\{[^}]*\})? (\S+)$", line)
        if m and not m.group(1).endswith("_bucket"):
            out[m.group(1)] = float(m.group(2))
    return out


def metrics_note(m):
    if not m:
        return "no metrics"
    c = m.get("walrelay_kafka_transactions_committed", 0)
    note = (f"{c:.0f} Kafka transactions committed, {m.get('walrelay_kafka_transactions_aborted', 0):.0f} "
            f"aborted, {m.get('walrelay_kafka_transactions_fenced', 0):.0f} fenced")
    rc, rs = m.get("walrelay_kafka_transaction_records_count"), m.get("walrelay_kafka_transaction_records_sum")
    sc, ss = m.get("walrelay_kafka_transaction_seconds_count"), m.get("walrelay_kafka_transaction_seconds_sum")
    if rc:
        note += f", {rs / rc:,.0f} records each on average"
    if sc:
        note += f", open {1000 * ss / sc:.0f} ms on average"
    return note


def log_problems(path):
    """walrelay's log lines at WARN or ERROR level (X: said in the run's verification note), but
    for librdkafka's "PartitionEOF" error, which W logs just the same at every start (the offset
    store's read reaching the end of its topic)."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [l.strip() for l in lines if re.search(r"\b(WARN|ERROR)\b", l) and "PartitionEOF" not in l]


def read_committed_records(parts, base):
    """Every record since `base`, read read_committed: [(topic, partition, LogAppendTime ms,
    headers dict)]. The end of each partition is its last stable offset."""
    out = []
    for (topic, p), b in sorted(base.items()):
        for rec in consume(topic, p, b, fmt="%T\\t%h\\n", committed=True):
            out.append((topic, p, int(rec[0]), parse_headers(rec[1] if len(rec) > 1 else "")))
    return out


def check_exactly_once(ids, expected_ids, what):
    """ids: the `id` headers read; expected_ids: the rows' ids. Returns (note, duplicates); raises
    if a row is missing or a record names no row."""
    seen = Counter(ids)
    dups = sum(v - 1 for v in seen.values() if v > 1)
    missing = [i for i in expected_ids if i not in seen]
    extra = [i for i in seen if i not in expected_ids]
    if missing:
        raise BenchError(f"{what}: {len(missing)} of {len(expected_ids)} rows never became visible "
                         f"read_committed (e.g. {missing[0]})")
    if extra:
        raise BenchError(f"{what}: {len(extra)} records name no row of the backlog (e.g. {extra[0]})")
    if dups:
        return f"EXACTLY-ONCE VIOLATED: {dups} duplicate records", dups
    return f"every row's id exactly once", 0


def watch_committed(ctx, p, parts, base, n, t0, first_timeout_s, stall_timeout_s, log_path, neighbours,
                    otail):
    """X's watch_kafka: the end offsets (polled as for W) count records, transaction markers and
    aborted records alike, so reaching base + n only means "maybe done". Once they have grown by
    >= n and stood still for QUIET_S (no transaction in progress: X commits at least every
    transaction_max_time while it has records), CPU, RSS and the neighbours are sampled and every
    record since `base` is read back read_committed and counted; fewer than n: go on polling.
    Nothing is read back while X drains."""
    t_first = cpu_before_first = None
    last_count, last_change = 0, time.monotonic()
    counted_at = None  # the offsets at the last read-back that found fewer than n
    cpu_prev = 0.0
    while True:
        otail.ensure_started()
        if p.poll() is not None:
            forget(p)
            raise BenchError(f"walrelay (exactly_once) exited with code {p.returncode} before delivering "
                             f"({last_count}/{n} offsets): {log_tail(log_path)} (log: {rel(log_path)})")
        cpu_now = proc_cpu_s(p.pid)
        offs = end_offsets(parts)
        now = time.monotonic()
        count = delta(offs, base)
        if count > 0 and t_first is None:
            t_first, cpu_before_first = now, cpu_prev
            neighbours.at_first()
        if count != last_count:
            last_count, last_change = count, now
        if count >= n and now - last_change >= QUIET_S and offs != counted_at:
            neighbours.sample()
            cpu_done, rss_kb = proc_cpu_s(p.pid), proc_hwm_kb(p.pid)
            recs = read_committed_records(parts, base)
            if len(recs) >= n:
                return dict(t_detected=now, t_first=t_first, cpu_before_first=cpu_before_first,
                            cpu_done=cpu_done, rss_kb=rss_kb, offsets=offs, records=recs)
            log(f"  X: end offsets grew by {count}, but only {len(recs)} of {n} records are committed; "
                f"waiting")
            counted_at = offs
        if count == 0 and now - t0 > first_timeout_s:
            raise BenchError(f"walrelay (exactly_once): no record in Kafka {first_timeout_s:.0f}s after start; "
                             f"log: {rel(log_path)}")
        if count > 0 and now - last_change > stall_timeout_s:
            raise BenchError(f"walrelay (exactly_once): end offsets stuck at base + {count} (n = {n}) for "
                             f"{stall_timeout_s:.0f}s; log: {rel(log_path)}")
        cpu_prev = cpu_now if cpu_now is not None else cpu_prev
        time.sleep(POLL_S)


def run_exactly_once(ctx, slot, k, run, n):
    """X in the throughput pass. Drain = the first record's LogAppendTime .. the arrival, at a
    read_committed consumer of walrelay's offset topic, of the offset record committed with the
    backlog's last record (the records' visibility to read_committed consumers, not their append).
    Verified: all n rows' ids exactly once, read_committed, plus verify_routing's samples."""
    parts = ctx.parts
    d = ctx.rundir / f"k{k}-run{run}-X"
    d.mkdir()
    base = end_offsets(parts)
    outages = len(OUTAGES)
    name = f"wrbench-{ctx.stamp}-k{k}-run{run}-x"
    log(f"  X: {rel(ctx.walrelay)} run, delivery = \"exactly_once\"")
    otail = OffsetsTail(ctx, d, name)
    port = free_port()
    t0, t0_wall = time.monotonic(), time.time()
    p, plog = start_walrelay(ctx, d, slot, name, exactly_once=True, health_port=port)
    neighbours = Neighbours(slot, broker=True)
    metrics = {}
    try:
        w = watch_committed(ctx, p, parts, base, n, t0, 120, 90, plog, neighbours, otail)
        metrics = scrape_metrics(port)
    finally:
        code, _ = stop_process(p)
        otail.stop()
    recs = w["records"]
    first_ms = min(r[2] for r in recs)
    last_ms = max(r[2] for r in recs)
    max_lsn = max(parse_lsn(r[3]["walrelay.lsn"]) for r in recs)
    commits = otail.commits()
    t_visible = covering_commit(commits, max_lsn)
    if t_visible is None:
        raise BenchError(f"X: the commit of the backlog's last transaction (commit LSN past "
                         f"{max_lsn >> 32:X}/{max_lsn & 0xFFFFFFFF:X}) never reached the {OFFSETS_TOPIC} tail "
                         f"({len(commits)} commits seen); log: {rel(plog)}")
    expected_ids = set(filter(None, psql("SELECT id FROM public.outbox").splitlines()))
    once, dups = check_exactly_once([r[3].get("id") for r in recs], expected_ids, "X")
    verified = verify_routing(parts, base, w["offsets"], n, got=len(recs), committed=True)
    drain = t_visible - first_ms / 1000.0
    problems = log_problems(plog)
    verified = (f"{len(recs):,} records read read_committed, {once}; {verified.split('; ')[0]}; "
                f"{metrics_note(metrics)}; last commit visible {1000 * t_visible - last_ms:.0f} ms after "
                f"the last append")
    if problems:
        verified += f"; walrelay logged {len(problems)} WARN/ERROR line(s), first: {problems[0][:200]}"
    if len(OUTAGES) > outages:
        verified += "; DISTURBED: the broker did not answer for a while during this run"
    res = result("X", k, run, n)
    res.update(wall_s=t_visible - t0_wall, first_s=first_ms / 1000.0 - t0_wall, drain_s=drain,
               rows_per_s=n / drain if drain > 0 else None, cpu_total_s=w["cpu_done"],
               cpu_drain_s=w["cpu_done"] - (w["cpu_before_first"] or 0.0), rss_kb=w["rss_kb"],
               verified=verified, append_drain_s=(last_ms - first_ms) / 1000.0, duplicates=dups,
               commits_seen=len(commits), metrics=metrics, log_problems=problems[:20])
    res.update(neighbours.drain_s())
    log(f"  X: {n} rows in {drain:.3f}s = {fmt(res['rows_per_s'], ',.0f')} rows/s to the last commit "
        f"(appends span {res['append_drain_s']:.3f}s; first record {res['first_s']:.1f}s after start), "
        f"CPU {res['cpu_total_s']:.2f}s ({res['cpu_drain_s']:.2f}s while draining), RSS "
        f"{res['rss_kb'] / 1024:.0f} MiB; {verified}")
    if code not in (0, 143, -15):
        log(f"  X: note: exited with code {code} after SIGTERM")
    return res


def walrelay_missing_reason(binary):
    if not binary.exists():
        return f"{rel(binary)} does not exist"
    if not os.access(binary, os.X_OK):
        return f"{binary} is not executable"
    return None


WALRELAY_CONTENDERS = "WBESXAJ"  # contenders that run a walrelay binary ("not yet" when it fails)


def not_yet_reason(ctx, c):
    """Why contender c cannot run (its binary is missing or failed earlier), or None."""
    if c == "B":
        return ctx.b_reason
    return ctx.w_reason if c in WALRELAY_CONTENDERS else None


def note_failure(ctx, c, e):
    """A walrelay contender failed: B's failure says nothing about the tree's binary, X's and
    E's, A's and J's nothing about W's (keep running them); W's or S's stops the binary's other
    runs."""
    if c == "B":
        ctx.b_reason = ctx.b_reason or str(e)
    elif c in "WS":
        ctx.w_reason = ctx.w_reason or str(e)


# --------------------------------------------------------------------------------------
# Throughput

def fill_backlog(ctx, k, rows, log_name, mode):
    """After the slots exist: writes a backlog of `rows` rows (rounded up to whole transactions
    of all writers) in k-row transactions, outbox INSERTs (OUTBOX_MODE) or UPDATEs of TABLE
    (TABLE_MODE), then VACUUM (ANALYZE) + CHECKPOINT so neither lands inside a measurement.
    Returns (n, end LSN, fill s, tps)."""
    per_txn = k * ctx.args.writers
    txns = -(-rows // per_txn)
    if mode["table"]:
        n = txns * per_txn  # every transaction updates exactly k rows (R's count proves it)
        # ids 1 .. blocks*k are updated, in blocks of k consecutive ids
        fill_s, tps = pgbench(k, ctx.args.writers, transactions=txns, log_path=ctx.rundir / log_name,
                              script="table_update.pgbench", defines=[f"blocks={TABLE_ROWS // k}"])
        end_lsn = psql("SELECT pg_current_wal_lsn()")
        psql(f"VACUUM (ANALYZE) {TABLE}")
        done = f"wrote {n} updates"
    else:
        fill_s, tps = pgbench(k, ctx.args.writers, transactions=txns, log_path=ctx.rundir / log_name)
        end_lsn = psql("SELECT pg_current_wal_lsn()")
        n = int(psql("SELECT count(*) FROM public.outbox"))
        if n != txns * per_txn:
            raise BenchError(f"fill wrote {n} rows, expected {txns * per_txn}")
        psql("VACUUM (ANALYZE) public.outbox")
        done = f"filled {n} rows"
    psql("CHECKPOINT")
    log(f"  {done} in {n // k} transactions by {ctx.args.writers} writers in {fill_s:.1f}s "
        f"({n / fill_s:,.0f} rows/s); end LSN {end_lsn}")
    return n, end_lsn, fill_s, tps


def backlog_rows(ctx, mode):
    """N of the throughput (OUTBOX_MODE) or table-events (TABLE_MODE) pass. --rows if given (as
    is, also by --smoke); otherwise DEFAULT_ROWS, raised if need be so that the fastest drain
    lasts at least MIN_DRAIN_S: one R drain of a CALIBRATION_ROWS probe at the pass's largest K
    (the fastest drains) on a slot of its own, then N = the rows R would drain in MIN_DRAIN_S
    + 20 % (suggest_rows), at least DEFAULT_ROWS, at most MAX_CALIBRATED_ROWS. The probe is not
    a result; what it decided goes into the report (ctx.calibration)."""
    if ctx.args.rows is not None:
        return ctx.args.rows
    what = "table-events" if mode["table"] else "throughput"
    k = max(ctx.tables_txn_sizes if mode["table"] else ctx.txn_sizes)
    slot = f"{SLOT_PREFIX}calibrate_{'t' if mode['table'] else 'o'}"
    log(f"== calibrating the {what} backlog: R drains a probe of {CALIBRATION_ROWS:,} rows at K={k}")
    if not mode["table"]:
        psql("TRUNCATE public.outbox")
    create_slot(slot)
    try:
        n, end_lsn, _, _ = fill_backlog(ctx, k, CALIBRATION_ROWS, f"{mode['prefix']}calibrate-fill.log", mode)
        r = run_r(ctx, slot, k, "calibrate", n, end_lsn, mode=mode)
    finally:
        drop_slot(slot)
    secs = r["drain_s"]
    want = suggest_rows(n, secs)
    rows = min(MAX_CALIBRATED_ROWS, max(DEFAULT_ROWS, want))
    probe = (f"Backlog calibrated: R (pg_recvlogical) drained a {n:,}-row probe at K={k} in {secs:.2f} s "
             f"({n / secs:,.0f} rows/s)")
    if rows == DEFAULT_ROWS:
        why = (f"the default {DEFAULT_ROWS:,} rows stand (≈ {DEFAULT_ROWS / n * secs:.0f} s at that rate, "
               f"≥ {MIN_DRAIN_S:.0f} s with 20 % to spare)")
    elif rows < want:
        why = f"N raised to the cap of {rows:,} rows (≥ {MIN_DRAIN_S:.0f} s would take {want:,})"
    else:
        why = (f"N raised from the default {DEFAULT_ROWS:,} to {rows:,} rows, so the fastest drain lasts "
               f"≥ ~{MIN_DRAIN_S:.0f} s (the rows R drains in {MIN_DRAIN_S:.0f} s, + 20 %)")
    ctx.calibration[what] = f"{probe}; {why}. `--rows N` skips the calibration."
    log(f"  {ctx.calibration[what]}")
    return rows


def throughput(ctx):
    results = []
    contenders = [c for c in ctx.contenders if c not in "AJ"]
    rows = backlog_rows(ctx, OUTBOX_MODE)
    for k in ctx.txn_sizes:
        for run in range(1, ctx.args.runs + 1):
            log(f"== K={k} run {run}/{ctx.args.runs}: backlog of {rows} rows")
            psql("TRUNCATE public.outbox")
            use = [c for c in contenders if not not_yet_reason(ctx, c)]
            slots = {c: f"{SLOT_PREFIX}{c.lower()}_k{k}_r{run}" for c in use}
            for s in slots.values():
                create_slot(s)
            n, end_lsn, fill_s, tps = fill_backlog(ctx, k, rows, f"k{k}-run{run}-fill.log", OUTBOX_MODE)
            ctx.fills.append(dict(k=k, run=run, n=n, fill_s=fill_s, tps=tps))
            # Rotate who goes first (run 1: R D W, run 2: D W R, run 3: W R D) so no contender
            # always gets the freshly written, just-checkpointed backlog first.
            rot = (run - 1) % len(contenders)
            for c in contenders[rot:] + contenders[:rot]:
                if not_yet_reason(ctx, c):
                    results.append(result(c, k, run, n, status=f"not yet ({not_yet_reason(ctx, c)})"))
                    continue
                try:
                    if c == "R":
                        r = run_r(ctx, slots[c], k, run, n, end_lsn)
                    elif c == "X":
                        r = run_exactly_once(ctx, slots[c], k, run, n)
                    else:
                        r = run_kafka_contender(ctx, c, slots[c], k, run, n)
                except BenchError as e:
                    if c not in WALRELAY_CONTENDERS:
                        raise
                    log(f"  {c}: not yet: {e}")
                    r = result(c, k, run, n, status=f"not yet ({e})")
                    if ctx.args.require_walrelay:
                        raise
                    note_failure(ctx, c, e)
                finally:
                    drop_slot(slots[c])
                results.append(r)
            for s in slots.values():
                drop_slot(s)
    return results


# --------------------------------------------------------------------------------------
# Table events: the same measurement as the throughput pass, on a backlog of updates of an
# ordinary 10-column table that D and W turn into Debezium change events.

def tables_setup(ctx):
    """(Re)creates public.bench_table with TABLE_ROWS rows and its publication (main() made the
    topic)."""
    log(f"== table events: {TABLE} with {TABLE_ROWS:,} rows, publication {TABLE_PUB}, topic {TABLE_TOPIC}")
    r = subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", f"rows={TABLE_ROWS}", "-h", PG_HOST,
         "-p", str(PG_PORT), "-U", "postgres", "-d", DB, "-f", str(BENCH_DIR / "workload" / "table_events.sql")],
        env=pg_env(PG_SUPER), capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"applying workload/table_events.sql failed: {r.stderr.strip()}")
    psql(f"DROP PUBLICATION IF EXISTS {TABLE_PUB}")
    psql(f"CREATE PUBLICATION {TABLE_PUB} FOR TABLE {TABLE}")
    if not ctx.tparts:
        raise BenchError(f"topic {TABLE_TOPIC} was not created at the start")


def table_contenders(ctx):
    """S, X and E are outbox-pass contenders only; A and J table-pass ones."""
    return [c for c in ctx.contenders if c not in "SXE"]


def tables(ctx):
    """Per K and run: fresh slots, N updates in K-row transactions, then R, D, W in rotation,
    exactly as throughput() does for the outbox backlog."""
    tables_setup(ctx)
    results = []
    contenders = table_contenders(ctx)
    for k in ctx.tables_txn_sizes:
        if TABLE_ROWS // k < 1:
            raise BenchError(f"table pass: K={k} is more than the table's {TABLE_ROWS} rows")
    rows = backlog_rows(ctx, TABLE_MODE)
    for k in ctx.tables_txn_sizes:
        for run in range(1, ctx.args.runs + 1):
            log(f"== table events K={k} run {run}/{ctx.args.runs}: backlog of {rows} updates")
            use = [c for c in contenders if not not_yet_reason(ctx, c)]
            slots = {c: f"{SLOT_PREFIX}t{c.lower()}_k{k}_r{run}" for c in use}
            for sl in slots.values():
                create_slot(sl)
            n, end_lsn, fill_s, tps = fill_backlog(ctx, k, rows, f"tables-k{k}-run{run}-fill.log", TABLE_MODE)
            ctx.tfills.append(dict(k=k, run=run, n=n, fill_s=fill_s, tps=tps))
            rot = (run - 1) % len(contenders)
            for c in contenders[rot:] + contenders[:rot]:
                if not_yet_reason(ctx, c):
                    results.append(result(c, k, run, n, status=f"not yet ({not_yet_reason(ctx, c)})"))
                    continue
                try:
                    if c == "R":
                        r = run_r(ctx, slots[c], k, run, n, end_lsn, mode=TABLE_MODE)
                    else:
                        r = run_kafka_contender(ctx, c, slots[c], k, run, n, mode=TABLE_MODE)
                except BenchError as e:
                    if c not in WALRELAY_CONTENDERS or ctx.args.require_walrelay:
                        raise
                    log(f"  {c}: not yet: {e}")
                    r = result(c, k, run, n, status=f"not yet ({e})")
                    note_failure(ctx, c, e)
                finally:
                    drop_slot(slots[c])
                results.append(r)
    return results


# --------------------------------------------------------------------------------------
# Idle: what a contender costs while nothing is written

def proc_switches(pid):
    """Context switches of every thread of `pid` (voluntary + involuntary), or None if gone:
    each one is a thread going to sleep or being put off the CPU, so their rate over an
    idle window counts wake-ups."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                    total += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return total


def idle_contenders(ctx):
    return [c for c in ctx.contenders if c in "RDWB"]


def idle(ctx):
    """Per contender: a fresh slot at the current position, the contender streaming from it,
    nothing written. After a warm-up, CPU (utime + stime of all threads) and context switches
    are read at the start and the end of a window; RSS at its end."""
    results = []
    warmup, secs = ctx.args.idle_warmup_seconds, ctx.args.idle_seconds
    for c in idle_contenders(ctx):
        if not_yet_reason(ctx, c):
            results.append(dict(contender=c, status=f"not yet ({not_yet_reason(ctx, c)})"))
            continue
        slot = f"{SLOT_PREFIX}idle_{c.lower()}"
        create_slot(slot)
        d = ctx.rundir / f"idle-{c}"
        d.mkdir()
        log(f"== idle {c}: {warmup}s warm-up, then {secs}s measured with nothing written")
        try:
            if c == "R":
                errf = open(d / "pg_recvlogical.log", "w")
                p = spawn(["pg_recvlogical", "-d", conninfo(PG_RELAY), "--slot", slot, "--plugin=pgoutput",
                           "-o", "proto_version=1", "-o", f"publication_names={OUTBOX_MODE['pub']}",
                           "--start", "-f", "/dev/null"], slot,
                          stdout=subprocess.DEVNULL, stderr=errf, env=pg_env(PG_RELAY))
                errf.close()
            elif c == "D":
                p, _ = start_connect(ctx, d, slot, ctx.args.dbz_poll_ms)
            else:
                p, _ = start_walrelay(ctx, d, slot, f"wrbench-{ctx.stamp}-idle-{c.lower()}",
                                      binary=ctx.baseline if c == "B" else ctx.walrelay)
            try:
                time.sleep(warmup)
                cpu0, sw0, t0 = proc_cpu_s(p.pid), proc_switches(p.pid), time.monotonic()
                time.sleep(secs)
                cpu1, sw1, t1 = proc_cpu_s(p.pid), proc_switches(p.pid), time.monotonic()
                rss = proc_status_kb(p.pid, "VmRSS")
                if None in (cpu0, cpu1, sw0, sw1) or p.poll() is not None:
                    raise BenchError(f"idle {c}: the process exited during the idle window (see {rel(d)})")
            finally:
                stop_process(p)
        finally:
            drop_slot(slot)
        window = t1 - t0
        r = dict(contender=c, window_s=window, cpu_s=cpu1 - cpu0, cpu_pct=100 * (cpu1 - cpu0) / window,
                 switches_per_s=(sw1 - sw0) / window, rss_kb=rss, status="ok")
        log(f"  {c}: {r['cpu_s']:.2f} CPU-s in {window:.0f}s ({r['cpu_pct']:.2f} % of a core), "
            f"{r['switches_per_s']:.0f} context switches/s, RSS {(rss or 0) / 1024:.0f} MiB")
        results.append(r)
    return results


def idle_table(idles):
    lines = ["#### Idle: nothing written", "",
             "| contender | CPU-s per minute | % of a core | context switches/s | RSS |",
             "|---|---:|---:|---:|---:|"]
    for r in idles:
        if r["status"] != "ok":
            lines.append(f"| {r['contender']} | {r['status']} | | | |")
            continue
        lines.append(f"| {r['contender']} | {60 * r['cpu_s'] / r['window_s']:.2f} | {r['cpu_pct']:.2f} | "
                     f"{r['switches_per_s']:.0f} | {fmt((r['rss_kb'] or 0) / 1024, '.0f')} MiB |")
    return lines


# --------------------------------------------------------------------------------------
# Latency: steady offered load, commit -> Kafka (LogAppendTime)

def percentile(sorted_vals, q):
    if not sorted_vals:
        return None
    # nearest-rank
    i = min(len(sorted_vals), max(1, math.ceil(q / 100 * len(sorted_vals)))) - 1
    return sorted_vals[i]


def latency_variants(ctx):
    """(label key, contender, Debezium poll.interval.ms): Debezium's streaming loop sleeps
    poll.interval.ms whenever the slot has nothing new, so at a modest steady load that
    setting, not throughput, decides its latency; we show the default and a low value."""
    out = []
    for c in ctx.contenders:
        if c == "D":
            out += [("D", c, ms) for ms in ctx.dbz_latency_poll_ms]
        elif c in ("R", "W", "B", "E", "X"):
            out.append((c, c, None))
    return out


class StreamTap:
    """pg_recvlogical's stdout, read as it arrives: (arrival time, bytes) per read."""

    def __init__(self, p):
        self.chunks, self.lock = [], threading.Lock()
        self.thread = threading.Thread(target=self._read, args=(p.stdout.fileno(),), daemon=True)
        self.thread.start()

    def _read(self, fd):
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return
            t = time.time()
            with self.lock:
                self.chunks.append((t, b))

    def snapshot(self):
        with self.lock:
            return list(self.chunks)

    def inserts(self):
        return _walk_pgoutput(b"".join(b for _, b in self.snapshot()), partial=True)

    def arrivals(self):
        """{first column (the outbox id) of each Insert: wall time its last byte arrived}."""
        chunks = self.snapshot()
        data = b"".join(b for _, b in chunks)
        ends, pos = [], 0
        for t, b in chunks:
            pos += len(b)
            ends.append((pos, t))
        out, k = {}, [0]

        def on_insert(start, end):
            # tuple: ncols (2 bytes), then the first column: kind (1), length (4), text
            ln = int.from_bytes(data[start + 3:start + 7], "big")
            rid = data[start + 7:start + 7 + ln].decode()
            while ends[k[0]][0] <= end:  # the chunk holding the message's last byte (+ '\n')
                k[0] += 1
            out[rid] = ends[k[0]][1]

        _walk_pgoutput(data, on_insert=on_insert, partial=True)
        return out


def wait_for(what, cond, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: not within {timeout_s}s")
        time.sleep(0.2)


def latency_r(ctx, d, slot, rate, secs, warmup):
    """R's latency: commit -> the row's Insert message read from pg_recvlogical's stdout. The
    floor any connector on this machine can reach: the walsender's own delay under the load."""
    cmd = ["pg_recvlogical", "-d", conninfo(PG_RELAY), "--slot", slot, "--plugin=pgoutput",
           "-o", "proto_version=1", "-o", f"publication_names={PUB}", "--start", "-f", "-"]
    errf = open(d / "pg_recvlogical.log", "w")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, env=pg_env(PG_RELAY))
    try:
        tap = StreamTap(p)
        warm = 4 * ctx.args.writers
        pgbench(1, ctx.args.writers, transactions=4)
        wait_for("R: warm-up rows in the stream", lambda: tap.inserts() >= warm, 120)
        since0 = psql("SELECT clock_timestamp()")
        since = psql(f"SELECT '{since0}'::timestamptz + interval '{warmup} seconds'")
        mark = {}

        def at_window_start(t_start):
            time.sleep(max(0.0, t_start + warmup - time.monotonic()))
            mark["cpu0"], mark["t0"] = proc_cpu_s(p.pid), time.monotonic()

        _, tps = pgbench(1, ctx.args.writers, rate=rate, seconds=warmup + secs, log_path=d / "pgbench.log",
                         while_running=at_window_start)
        n_all = int(psql(f"SELECT count(*) FROM public.outbox WHERE created_at > '{since0}'"))
        wait_for(f"R: all {n_all} rows in the stream", lambda: tap.inserts() >= warm + n_all, 240)
        cpu_s, window_s = proc_cpu_s(p.pid) - mark["cpu0"], time.monotonic() - mark["t0"]
        rss_kb = proc_hwm_kb(p.pid)
    finally:
        p.kill()
        p.wait()
        errf.close()
    arrived = tap.arrivals()
    lat, missing = [], 0
    for line in psql(f"SELECT id, (extract(epoch FROM created_at) * 1000000)::bigint FROM public.outbox "
                     f"WHERE created_at > '{since}'").splitlines():
        rid, us = line.split("|")
        if rid in arrived:
            lat.append(arrived[rid] * 1000.0 - int(us) / 1000.0)
        else:
            missing += 1
    if missing:
        raise BenchError(f"latency R: {missing} rows written during the window are not in the stream")
    return lat, tps, cpu_s, window_s, rss_kb


def latency_x(ctx, d, slot, rate, secs, warmup):
    """X's latency: commit -> the moment a read_committed consumer received the record, i.e. after
    its Kafka transaction committed. One KafkaTail per partition of the two topics, from their end
    offsets before X starts, runs through the whole pass (its arrival times are the measurement);
    the rest is as for W: 16 warm-up rows, then the offered load, only rows created after the
    warm-up count. Also computed from the same records, for the report: the append latency
    (LogAppendTime − created_at, W's measure) and the arrival of the offset record that committed
    each record (what the throughput pass uses for X's last commit), as a cross-check.
    Returns (latencies ms, tps, cpu_s, window_s, rss_kb, disturbed, extra fields)."""
    base0 = end_offsets(ctx.parts)
    outages = len(OUTAGES)
    name = f"wrbench-{ctx.stamp}-latency-x"
    otail = OffsetsTail(ctx, d, name)
    port = free_port()
    tails, p, metrics = {}, None, {}
    try:
        p, plog = start_walrelay(ctx, d, slot, name, exactly_once=True, health_port=port)
        for (topic, part), b in sorted(base0.items()):
            tails[(topic, part)] = KafkaTail(ctx, d, topic, part, b, "%T\\t%h\\n")

        def received():
            otail.ensure_started()
            if p.poll() is not None:
                forget(p)
                raise BenchError(f"walrelay (exactly_once) exited with code {p.returncode}: {log_tail(plog)} "
                                 f"(log: {rel(plog)})")
            return sum(t.count() for t in tails.values())

        warm = 4 * ctx.args.writers
        pgbench(1, ctx.args.writers, transactions=4)
        wait_for("X: warm-up rows visible to a read_committed consumer", lambda: received() >= warm, 240)
        time.sleep(1.0)
        since0 = psql("SELECT clock_timestamp()")
        since = psql(f"SELECT '{since0}'::timestamptz + interval '{warmup} seconds'")
        mark = {}

        def at_window_start(t_start):
            time.sleep(max(0.0, t_start + warmup - time.monotonic()))
            mark["cpu0"], mark["t0"] = proc_cpu_s(p.pid), time.monotonic()

        _, tps = pgbench(1, ctx.args.writers, rate=rate, seconds=warmup + secs, log_path=d / "pgbench.log",
                         while_running=at_window_start)
        n_all = int(psql(f"SELECT count(*) FROM public.outbox WHERE created_at > '{since0}'"))
        wait_for(f"X: all {n_all} rows visible to a read_committed consumer",
                 lambda: received() >= warm + n_all, 240)
        cpu_s, window_s = proc_cpu_s(p.pid) - mark["cpu0"], time.monotonic() - mark["t0"]
        rss_kb = proc_hwm_kb(p.pid)
        metrics = scrape_metrics(port)
    finally:
        if p is not None:
            stop_process(p)
        for t in tails.values():
            t.stop()
        otail.stop()
    created = {}
    for line in psql(f"SELECT id, (extract(epoch FROM created_at) * 1000000)::bigint FROM public.outbox "
                     f"WHERE created_at > '{since}'").splitlines():
        rid, us = line.split("|")
        created[rid] = int(us)
    all_ids = set(filter(None, psql("SELECT id FROM public.outbox").splitlines()))
    commits = otail.commits()
    positions = [c[1] for c in commits]
    seen_ids, lat, lat_append, lat_commit = [], [], [], []
    first = set()
    for tail in tails.values():
        for t, line in tail.snapshot():
            ts, _, headers = line.partition("\t")
            h = parse_headers(headers)
            rid = h.get("id")
            seen_ids.append(rid)
            if rid not in created or rid in first:
                continue
            first.add(rid)
            c_ms = created[rid] / 1000.0
            lat.append(t * 1000.0 - c_ms)
            lat_append.append(int(ts) - c_ms)
            tc = covering_commit(commits, parse_lsn(h["walrelay.lsn"]), positions)
            if tc is not None:
                lat_commit.append(tc * 1000.0 - c_ms)
    once, dups = check_exactly_once(seen_ids, all_ids, "latency X")
    if len(lat) != len(created):
        raise BenchError(f"latency X: {len(created) - len(lat)} rows written during the window never became "
                         f"visible read_committed")
    problems = log_problems(plog)
    lat_append.sort()
    lat_commit.sort()
    extra = dict(append_p50=percentile(lat_append, 50), append_p99=percentile(lat_append, 99),
                 commit_p50=percentile(lat_commit, 50), commit_p99=percentile(lat_commit, 99),
                 commit_n=len(lat_commit), duplicates=dups, metrics=metrics, log_problems=problems[:20],
                 note=f"{len(seen_ids):,} records read read_committed, {once}; {metrics_note(metrics)}")
    log(f"  X: append latency (LogAppendTime − created_at, as W's) p50 {extra['append_p50']:.1f} ms, "
        f"p99 {extra['append_p99']:.1f} ms; commit seen on {OFFSETS_TOPIC} p50 "
        f"{fmt(extra['commit_p50'], '.1f', '?')} ms, p99 {fmt(extra['commit_p99'], '.1f', '?')} ms "
        f"({len(lat_commit)} rows); {extra['note']}"
        + (f"; walrelay logged {len(problems)} WARN/ERROR line(s), first: {problems[0][:200]}" if problems else ""))
    return lat, tps, cpu_s, window_s, rss_kb, len(OUTAGES) > outages, extra


def latency(ctx):
    out = []
    rate, secs, warmup = ctx.args.latency_rate, ctx.args.latency_seconds, ctx.args.latency_warmup_seconds
    for label, c, poll_ms in latency_variants(ctx):
        if not_yet_reason(ctx, c):
            out.append(dict(contender=c, poll_ms=None, status=f"not yet ({not_yet_reason(ctx, c)})"))
            continue
        what = f" (poll.interval.ms={poll_ms})" if poll_ms is not None else ""
        log(f"== latency {c}{what}: {rate} rows/s (1-row transactions) for {warmup}s warm-up + {secs}s")
        psql("TRUNCATE public.outbox")
        slot = f"{SLOT_PREFIX}{c.lower()}_latency"
        create_slot(slot)
        d = ctx.rundir / (f"latency-{c}" + (f"-poll{poll_ms}" if poll_ms is not None else ""))
        d.mkdir()
        if c == "R":
            try:
                lat, tps, cpu_s, window_s, rss_kb = latency_r(ctx, d, slot, rate, secs, warmup)
            finally:
                drop_slot(slot)
            out.append(latency_result(ctx, d, c, None, what, lat, tps, cpu_s, window_s, rss_kb, False))
            continue
        if c == "X":
            try:
                lat, tps, cpu_s, window_s, rss_kb, disturbed, extra = latency_x(ctx, d, slot, rate, secs, warmup)
            except BenchError as e:
                if ctx.args.require_walrelay:
                    raise
                log(f"  X: not yet: {e}")
                out.append(dict(contender="X", poll_ms=None, status=f"not yet ({e})"))
                continue
            finally:
                drop_slot(slot)
            res = latency_result(ctx, d, c, None, what, lat, tps, cpu_s, window_s, rss_kb, disturbed)
            res.update(extra)
            out.append(res)
            continue
        p = None
        try:
            base0 = end_offsets(ctx.parts)
            outages = len(OUTAGES)
            t0 = time.monotonic()
            if c == "D":
                p, plog = start_connect(ctx, d, slot, poll_ms)
                name = "Kafka Connect"
            else:
                p, plog = start_walrelay(ctx, d, slot, f"wrbench-{ctx.stamp}-latency-{c.lower()}",
                                         cloudevents=c == "E", binary=ctx.baseline if c == "B" else None,
                                         kafka_keys=ctx.args.baseline_kafka if c == "B" else None)
                name = "walrelay"
            # Warm-up: a few rows, wait until they are in Kafka (the contender is streaming).
            warm = 4 * ctx.args.writers
            pgbench(1, ctx.args.writers, transactions=4)
            watch_kafka(ctx, p, ctx.parts, base0, warm, t0, 240, 90, name, plog)
            time.sleep(1.0)
            base = end_offsets(ctx.parts)
            since0 = psql("SELECT clock_timestamp()")
            # One pgbench run of warmup + window seconds at the offered rate; only rows
            # created after the warm-up count (steady state: JIT, caches, batching settled).
            since = psql(f"SELECT '{since0}'::timestamptz + interval '{warmup} seconds'")
            mark = {}

            def at_window_start(t_start):
                time.sleep(max(0.0, t_start + warmup - time.monotonic()))
                mark["cpu0"], mark["t0"] = proc_cpu_s(p.pid), time.monotonic()

            _, tps = pgbench(1, ctx.args.writers, rate=rate, seconds=warmup + secs, log_path=d / "pgbench.log",
                             while_running=at_window_start)
            n_all = int(psql(f"SELECT count(*) FROM public.outbox WHERE created_at > '{since0}'"))
            w = watch_kafka(ctx, p, ctx.parts, base, n_all, t0, 240, 90, name, plog)
            cpu_s, window_s = w["cpu_done"] - mark["cpu0"], w["t_done"] - mark["t0"]
            rss_kb = w["rss_kb"]
        except BenchError as e:
            if c not in WALRELAY_CONTENDERS or ctx.args.require_walrelay:
                raise
            out.append(dict(contender=c, poll_ms=None, status=f"not yet ({e})"))
            note_failure(ctx, c, e)
            continue
        finally:
            if p is not None:
                stop_process(p)
            drop_slot(slot)
        created = {}
        rows = psql(f"SELECT id, (extract(epoch FROM created_at) * 1000000)::bigint FROM public.outbox "
                    f"WHERE created_at > '{since}'")
        for line in rows.splitlines():
            rid, us = line.split("|")
            created[rid] = int(us)
        lat = []
        for (topic, part), b in base.items():
            for rec in consume(topic, part, b, fmt="%T\\t%h\\n"):
                ts, headers = rec[0], rec[1] if len(rec) > 1 else ""
                rid = parse_headers(headers).get("ce_id" if c == "E" else "id")
                if rid in created:
                    lat.append(int(ts) - created.pop(rid) / 1000.0)
        if created:
            raise BenchError(f"latency {c}: {len(created)} rows written during the window never reached Kafka")
        out.append(latency_result(ctx, d, c, poll_ms, what, lat, tps, cpu_s, window_s, rss_kb,
                                  len(OUTAGES) > outages))
    return out


def latency_result(ctx, d, c, poll_ms, what, lat, tps, cpu_s, window_s, rss_kb, disturbed):
    lat.sort()
    rate, secs = ctx.args.latency_rate, ctx.args.latency_seconds
    res = dict(contender=c, poll_ms=poll_ms, status="ok", disturbed=disturbed, offered=rate, achieved=tps,
               seconds=secs, n=len(lat), p50=percentile(lat, 50), p90=percentile(lat, 90),
               p99=percentile(lat, 99), p999=percentile(lat, 99.9), max=lat[-1],
               cpu_pct=100 * cpu_s / window_s, rss_kb=rss_kb, load1=loadavg())
    (d / "latencies_ms.txt").write_text("\n".join(f"{x:.1f}" for x in lat) + "\n")
    what_is = "rows in the stream" if c == "R" else "records"
    log(f"  {c}{what}: {len(lat)} {what_is}, p50 {res['p50']:.1f} ms, p99 {res['p99']:.1f} ms, "
        f"max {res['max']:.1f} ms, CPU {res['cpu_pct']:.0f}% of a core")
    return res


# --------------------------------------------------------------------------------------
# Snapshot: N rows already in the table, no slot yet; each contender reads them all.

SNAPSHOT_MODE_W = "initial_only"  # walrelay: snapshot the outbox tables, publish, confirm, exit 0
SNAPSHOT_K = 10                   # fill transaction size (any K leaves the same rows behind)


def snapshot_contenders(ctx):
    # The ceiling of this pass is C (COPY); --contenders R selects it, as it selects R above.
    # S (walrelay over SASL_SSL) is a throughput-pass contender only, X (exactly_once) one of the
    # throughput and latency passes.
    return [{"R": "C"}.get(c, c) for c in ctx.contenders if c not in "SXBEAJ"]


def snapshot_fill(ctx):
    """Empties the table, makes sure no slot of the bench database exists, writes N rows with
    the throughput workload, then VACUUM (ANALYZE) + CHECKPOINT. Returns the row count."""
    n_want = ctx.args.snapshot_rows
    log(f"== snapshot: {n_want} existing rows, no slot")
    drop_bench_slots()
    psql("TRUNCATE public.outbox")
    slots = psql(f"SELECT string_agg(slot_name, ', ') FROM pg_replication_slots WHERE database = '{DB}'",
                 db="postgres")
    if slots:
        raise BenchError(f"replication slots of {DB} exist before the snapshot fill ({slots}); "
                         f"a snapshot benchmark needs the rows to predate every slot")
    per_txn = SNAPSHOT_K * ctx.args.writers
    txns = -(-n_want // per_txn)
    fill_s, _ = pgbench(SNAPSHOT_K, ctx.args.writers, transactions=txns,
                        log_path=ctx.rundir / "snapshot-fill.log")
    n = int(psql("SELECT count(*) FROM public.outbox"))
    if n != txns * per_txn:
        raise BenchError(f"snapshot fill wrote {n} rows, expected {txns * per_txn}")
    # VACUUM sets hint bits and the visibility map (no reader pays for that) and reads the whole
    # table once, so every contender finds it in the page cache; CHECKPOINT keeps a checkpoint
    # out of the measurements.
    psql("VACUUM (ANALYZE) public.outbox")
    psql("CHECKPOINT")
    size = int(psql("SELECT pg_table_size('public.outbox')"))
    ctx.snap_fill = dict(n=n, fill_s=fill_s, table_bytes=size)
    log(f"  filled {n} rows in {fill_s:.1f}s ({n / fill_s:,.0f} rows/s); table {size / 1e6:.0f} MB")
    return n


def snap_result(contender, run, n, **kw):
    r = result(contender, None, run, n, kafka_s=None)
    r.update(kw)
    return r


def run_snapshot_c(ctx, run, n):
    """C: psql runs COPY (SELECT * … ORDER BY id) TO STDOUT over TLS and writes it to /dev/null
    (\\copy: the server sends COPY TO STDOUT, psql writes the file). Start -> exit."""
    d = ctx.rundir / f"snapshot-run{run}-C"
    d.mkdir()
    sql = r"\copy (SELECT * FROM public.outbox ORDER BY id) TO '/dev/null'"
    cmd = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-v", f"bench={d}", "-d", conninfo(PG_RELAY), "-c", sql]
    log("  C: psql COPY (SELECT * FROM public.outbox ORDER BY id) TO STDOUT > /dev/null")
    out_path = d / "psql.out"
    with open(out_path, "w") as out:
        t0 = time.monotonic()
        p = spawn(cmd, str(d), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                  env=pg_env(PG_RELAY))
        hwm_kb = 0
        deadline = t0 + max(300, n / 500)
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            now = time.monotonic()
            if pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                forget(p)
                break
            hwm = proc_hwm_kb(p.pid)
            if hwm:
                hwm_kb = max(hwm_kb, hwm)
            if now > deadline:
                stop_process(p)
                raise BenchError(f"C: psql did not finish within {deadline - t0:.0f}s")
            time.sleep(R_POLL_S)
    text = out_path.read_text(errors="replace")
    if p.returncode != 0:
        raise BenchError(f"C: psql exited {p.returncode}: {text.strip()[-500:]}")
    m = re.search(r"^COPY (\d+)$", text, re.M)
    if not m or int(m.group(1)) != n:
        raise BenchError(f"C: expected 'COPY {n}' from psql, got {text.strip()[-200:]!r}")
    wall = now - t0
    res = snap_result("C", run, n, wall_s=wall, rows_per_s=n / wall, cpu_total_s=ru.ru_utime + ru.ru_stime,
                      rss_kb=hwm_kb or None, verified=f"psql reported COPY {n}")
    log(f"  C: {n} rows in {wall:.2f}s = {n / wall:,.0f} rows/s, CPU {res['cpu_total_s']:.2f}s, "
        f"RSS {hwm_kb / 1024:.1f} MiB")
    return res


def snapshot_run_start(ctx, run, contender):
    """The run directory, a slot name free for the contender to create, the topics' end offsets
    and the outage count before a snapshot run."""
    d = ctx.rundir / f"snapshot-run{run}-{contender}"
    d.mkdir()
    slot = f"{SLOT_PREFIX}snap_{contender.lower()}_r{run}"
    drop_slot(slot)
    return d, slot, end_offsets(ctx.parts), len(OUTAGES)


def run_snapshot_d(ctx, run, n):
    """D: Debezium with snapshot.mode=initial on a slot it creates. Start (JVM launch) -> the
    last snapshot record's LogAppendTime."""
    d, slot, base, outages = snapshot_run_start(ctx, run, "D")
    log("  D: Kafka Connect standalone + Debezium PostgresConnector (snapshot.mode=initial) + EventRouter")
    t0, t0_wall = time.monotonic(), time.time()
    p, plog = start_connect(ctx, d, slot, ctx.args.dbz_poll_ms, snapshot_mode="initial")
    try:
        w = watch_kafka(ctx, p, ctx.parts, base, n, t0, 240, 90, "Kafka Connect", plog)
    finally:
        stop_process(p)
        drop_slot(slot)
    verified = verify_run(ctx, base, w["offsets"], n, outages)
    first_ms, last_ms = append_time_span(base, w["offsets"])
    done = last_ms / 1000.0 - t0_wall
    res = snap_result("D", run, n, wall_s=done, kafka_s=done, rows_per_s=n / done,
                      first_s=first_ms / 1000.0 - t0_wall, drain_s=(last_ms - first_ms) / 1000.0,
                      cpu_total_s=w["cpu_done"], rss_kb=w["rss_kb"], verified=verified)
    log(f"  D: {n} rows in {done:.2f}s from start = {n / done:,.0f} rows/s (first record "
        f"{res['first_s']:.1f}s after start), CPU {w['cpu_done']:.2f}s, RSS {w['rss_kb'] / 1024:.0f} MiB; "
        f"{verified}")
    return res


def run_snapshot_w(ctx, run, n):
    """W: walrelay with [snapshot] mode = "initial_only" on a fresh slot it creates, under a
    connector name never used before. Start -> exit 0; then N records must be in Kafka."""
    d, slot, base, outages = snapshot_run_start(ctx, run, "W")
    log(f"  W: {rel(ctx.walrelay)} run, [snapshot] mode = \"{SNAPSHOT_MODE_W}\"")
    t0, t0_wall = time.monotonic(), time.time()
    p, plog = start_walrelay(ctx, d, slot, f"wrbench-{ctx.stamp}-snapshot-run{run}",
                             snapshot_mode=SNAPSHOT_MODE_W)
    hwm_kb, count, last_change, next_poll, t_all = 0, 0, t0, t0 + 1.0, None
    try:
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            now = time.monotonic()
            if pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                forget(p)
                break
            hwm = proc_hwm_kb(p.pid)
            if hwm:
                hwm_kb = max(hwm_kb, hwm)
            if now >= next_poll:  # progress, only to give up on a walrelay that stalls
                got = delta(end_offsets(ctx.parts), base)
                if got != count:
                    count, last_change = got, now
                if count >= n and t_all is None:
                    t_all = now
                if count == 0 and now - t0 > 120:
                    raise BenchError(f"walrelay: no record in Kafka 120s after start; log: {rel(plog)}")
                if 0 < count < n and now - last_change > 90:
                    raise BenchError(f"walrelay: stuck at {count}/{n} records for 90s; log: {rel(plog)}")
                if t_all is not None and now - t_all > 60:
                    raise BenchError(f"walrelay: all {n} records are in Kafka but it has not exited "
                                     f"60s later (initial_only should exit 0); log: {rel(plog)}")
                next_poll = now + 1.0
            time.sleep(0.02)
    finally:
        if p.returncode is None:
            stop_process(p)
        drop_slot(slot)
    wall = now - t0
    if p.returncode != 0:
        tail = log_tail(plog, lines=3)
        raise BenchError(f"walrelay exited with code {p.returncode} after {wall:.1f}s: {tail} "
                         f"(log: {rel(plog)})")
    end = end_offsets(ctx.parts)
    verified = verify_run(ctx, base, end, n, outages)
    first_ms, last_ms = append_time_span(base, end)
    res = snap_result("W", run, n, wall_s=wall, rows_per_s=n / wall, kafka_s=last_ms / 1000.0 - t0_wall,
                      first_s=first_ms / 1000.0 - t0_wall, drain_s=(last_ms - first_ms) / 1000.0,
                      cpu_total_s=ru.ru_utime + ru.ru_stime, rss_kb=hwm_kb or None, verified=verified)
    log(f"  W: {n} rows, exit 0 after {wall:.2f}s = {n / wall:,.0f} rows/s (first record "
        f"{res['first_s']:.1f}s, last {res['kafka_s']:.1f}s after start), CPU {res['cpu_total_s']:.2f}s, "
        f"RSS {hwm_kb / 1024:.0f} MiB; {verified}")
    return res


def snapshot(ctx):
    contenders = snapshot_contenders(ctx)
    n = snapshot_fill(ctx)
    out = []
    for run in range(1, ctx.args.runs + 1):
        log(f"== snapshot run {run}/{ctx.args.runs}: {n} rows")
        rot = (run - 1) % len(contenders)
        for c in contenders[rot:] + contenders[:rot]:
            reason = ctx.w_reason or ctx.ws_reason
            if c == "W" and reason:
                out.append(snap_result("W", run, n, status=f"not yet ({reason})"))
                continue
            try:
                r = {"C": run_snapshot_c, "D": run_snapshot_d, "W": run_snapshot_w}[c](ctx, run, n)
            except BenchError as e:
                if c != "W" or ctx.args.require_walrelay:
                    raise
                log(f"  W: not yet: {e}")
                ctx.ws_reason = str(e)
                r = snap_result("W", run, n, status=f"not yet ({e})")
            out.append(r)
    return out


# --------------------------------------------------------------------------------------
# Report

def sh(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def machine_info(ctx):
    cpu_model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem_kb = next(int(l.split()[1]) for l in Path("/proc/meminfo").read_text().splitlines()
                  if l.startswith("MemTotal:"))
    java = sh(["java", "-version"]).splitlines()
    walrelay = "—"
    if not walrelay_missing_reason(ctx.walrelay):
        walrelay = sh([str(ctx.walrelay), "--version"]).splitlines()[0]
    baseline = None
    if "B" in ctx.contenders and not walrelay_missing_reason(ctx.baseline):
        baseline = f"{sh([str(ctx.baseline), '--version']).splitlines()[0]} ({ctx.baseline})"
        if ctx.args.baseline_kafka:
            baseline += f" with [kafka] {ctx.args.baseline_kafka!r}"
    git = sh(["git", "-C", str(REPO), "describe", "--always", "--dirty"])
    return dict(
        cores=os.cpu_count(), cpu_model=cpu_model, mem_gib=mem_kb / 1024 / 1024,
        kernel=os.uname().release,
        postgres=psql("SHOW server_version", db="postgres"),
        pg_recvlogical=sh(["pg_recvlogical", "--version"]), pgbench=sh(["pgbench", "--version"]),
        kafka=os.environ.get("WALRELAY_KAFKA_VERSION", "?"), connect=CONNECT_VERSION, debezium=DEBEZIUM_VERSION,
        baseline=baseline, java=java[0] if java else "?", kcat=sh(["kcat", "-V"]).splitlines()[0],
        walrelay=walrelay, git=git,
    )


def fmt(v, spec, none="—"):
    return none if v is None else format(v, spec)


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def value_range(vals):
    """(min, max) of the values that are not None, or None for fewer than two: the spread that
    fmt_med prints beside a median."""
    vals = [v for v in vals if v is not None]
    return (min(vals), max(vals)) if len(vals) > 1 else None


def with_medians(row, samples):
    """Puts into `row`, for each key of `samples` (key -> the per-run values), the median and,
    under row["range"][key], the (min, max) over the runs. Returns `row`."""
    rng = row.setdefault("range", {})
    for key, vals in samples.items():
        row[key] = median(vals)
        rng[key] = value_range(vals)
    return row


def fmt_med(row, key, spec, none="—"):
    """A median over runs with its spread: `128,400 (121,655–146,843)` = median (min–max over the
    runs). Just the value after one run, or when every run prints the same."""
    v = row.get(key)
    if v is None:
        return none
    text = format(v, spec)
    r = row.get("range", {}).get(key)
    if r:
        lo, hi = format(r[0], spec), format(r[1], spec)
        if lo != hi:
            text += f" ({lo}–{hi})"
    return text


def fmt_vals(vals, spec):
    """fmt_med of a plain list of per-run values."""
    return fmt_med(with_medians({}, dict(v=vals)), "v", spec)


def fmt_range(row, key, spec):
    """Only the spread of fmt_med, as " (min–max)", or "" (one run, or all runs the same)."""
    r = row.get("range", {}).get(key)
    if not r:
        return ""
    lo, hi = format(r[0], spec), format(r[1], spec)
    return "" if lo == hi else f" ({lo}–{hi})"


def summarize(results, contenders, txn_sizes):
    """Per K and contender: medians over runs, each with its (min, max) in row["range"]; ratios
    are per run (same backlog, same minute), then the median (and range) of those."""
    rows = []
    for k in txn_sizes:
        by_run = {}
        for r in results:
            if r["k"] == k:
                by_run.setdefault(r["run"], {})[r["contender"]] = r
        for c in contenders:
            rs = [runs[c] for runs in by_run.values() if c in runs]
            ok = [r for r in rs if r["status"] == "ok"]
            if not ok:
                rows.append(dict(k=k, contender=c, status=rs[0]["status"] if rs else "not run"))
                continue

            def ratios(other):
                vals = []
                for runs in by_run.values():
                    a, b = runs.get(c), runs.get(other)
                    if a and b and a["status"] == b["status"] == "ok" and a["rows_per_s"] and b["rows_per_s"]:
                        vals.append(a["rows_per_s"] / b["rows_per_s"])
                return vals

            def per_m(key):
                return [r[key] / r["n"] * 1e6 if r.get(key) is not None else None for r in ok]

            rows.append(with_medians(dict(k=k, contender=c, status="ok", runs=len(ok), n=ok[0]["n"]), dict(
                rows_per_s=[r["rows_per_s"] for r in ok],
                x_r=ratios("R"), x_d=ratios("D"), x_w=ratios("W"),
                first_s=[r["first_s"] for r in ok], wall_s=[r["wall_s"] for r in ok],
                drain_s=[r["drain_s"] for r in ok],
                cpu_per_m=per_m("cpu_total_s"), cpu_drain_per_m=per_m("cpu_drain_s"),
                rss_mib=[r["rss_kb"] and r["rss_kb"] / 1024 for r in ok],
                walsender_per_m=per_m("cpu_walsender_s"), broker_per_m=per_m("cpu_broker_s"),
            )))
    return rows


def w_and_d_in_words(w, d, memory):
    """W's ratios to R and D and D's to R for one K, in words; `memory()` is
    the text after W's CPU ratio (called only when both ran)."""
    parts = []
    if w and w["status"] == "ok":
        s = f"W drains at **{fmt(w.get('x_r'), '.2f', '?')}× R**{fmt_range(w, 'x_r', '.2f')}"
        if d and d["status"] == "ok":
            s += (f" and **{fmt(w.get('x_d'), '.1f', '?')}× D**{fmt_range(w, 'x_d', '.1f')}, using "
                  f"{w['cpu_drain_per_m'] / d['cpu_drain_per_m']:.2f}× D's CPU per event (drain)"
                  + memory())
        parts.append(s)
    elif w:
        parts.append(f"W {w['status']}")
    if d and d["status"] == "ok":
        parts.append(f"D drains at {fmt(d.get('x_r'), '.2f', '?')}× R{fmt_range(d, 'x_r', '.2f')}")
    return parts


def against_w(o, w, who):
    """One contender's rate and CPU per event against W's in the same runs, in words."""
    if not (o and o["status"] == "ok" and w and w["status"] == "ok"):
        return []
    return [f"{who} drains at **{fmt(o.get('x_w'), '.2f', '?')}× W's rate**{fmt_range(o, 'x_w', '.2f')}, using "
            f"{o['cpu_drain_per_m'] / w['cpu_drain_per_m']:.2f}× W's CPU per event (drain)"]


def headline(summary, lat, snap_summary=(), snap_n=None):
    """The ratios, in words, first: they are what the benchmark is for."""
    out = []
    by = {(r["k"], r["contender"]): r for r in summary}
    for k in sorted({r["k"] for r in summary}):
        d, w = by.get((k, "D")), by.get((k, "W"))
        parts = w_and_d_in_words(w, d, lambda: f" and {w['rss_mib'] / d['rss_mib']:.3f}× its peak RSS")
        sec = by.get((k, "S"))
        if sec and sec["status"] == "ok" and w and w["status"] == "ok":
            parts.append(f"over SASL_SSL (S) walrelay drains at {fmt(sec.get('x_w'), '.2f', '?')}×"
                         f"{fmt_range(sec, 'x_w', '.2f')} its "
                         f"PLAINTEXT rate (W), using {sec['cpu_drain_per_m'] / w['cpu_drain_per_m']:.2f}× "
                         f"W's CPU per event (drain)")
        parts += against_w(by.get((k, "B")), w, "the baseline (B)")
        parts += against_w(by.get((k, "E")), w, "with format = \"cloudevents\" (E)")
        xo = by.get((k, "X"))
        if xo and xo["status"] == "ok" and w and w["status"] == "ok":
            parts.append(f"with delivery = \"exactly_once\" (X) walrelay drains at **{fmt(xo.get('x_w'), '.2f', '?')}× "
                         f"its at-least-once rate (W)**{fmt_range(xo, 'x_w', '.2f')} to the last commit, using "
                         f"{xo['cpu_drain_per_m'] / w['cpu_drain_per_m']:.2f}× W's CPU per event (drain)")
        if parts:
            out.append(f"- K={k}: " + "; ".join(parts) + ".")
    ok = [l for l in lat if l["status"] == "ok"]
    if ok:
        bits = []
        order = {"R": 0, "W": 1, "B": 2, "E": 3, "X": 4, "D": 5}
        for l in sorted(ok, key=lambda l: (order.get(l["contender"], 3), l.get("poll_ms") or 0)):
            who = f"D (poll.interval.ms={l['poll_ms']})" if l["contender"] == "D" else l["contender"]
            bits.append(f"{who} p50 {l['p50']:.0f} ms / p99 {l['p99']:.0f} ms")
        out.append(f"- Latency at {ok[0]['offered']:,} rows/s: " + "; ".join(bits) + ".")
    out += snapshot_headline(snap_summary, snap_n)
    if out:
        out = [HEADLINE_TITLE, ""] + out + [""]
    return out


NAMES = {"R": "R  pg_recvlogical (ceiling)", "D": "D  Debezium + EventRouter", "W": "W  walrelay",
         "B": "B  walrelay, baseline (--baseline, --baseline-kafka)",
         "E": "E  walrelay, format = \"cloudevents\" (binary mode)",
         "S": "S  walrelay over SASL_SSL (SCRAM-SHA-512, TLS)",
         "X": "X  walrelay, delivery = \"exactly_once\" (read_committed)"}
SNAP_NAMES = {"C": "C  COPY … ORDER BY id (ceiling)", "D": "D  Debezium snapshot.mode=initial + EventRouter",
              "W": f"W  walrelay [snapshot] {SNAPSHOT_MODE_W}"}


def summarize_snapshot(snaps, contenders):
    """Per contender: medians over runs, each with its (min, max) in row["range"]; ×C and ×D per
    run, then the median (and range) of those."""
    by_run = {}
    for r in snaps:
        by_run.setdefault(r["run"], {})[r["contender"]] = r
    rows = []
    for c in contenders:
        rs = [runs[c] for runs in by_run.values() if c in runs]
        ok = [r for r in rs if r["status"] == "ok"]
        if not ok:
            rows.append(dict(contender=c, status=rs[0]["status"] if rs else "not run"))
            continue

        def ratios(other):
            return [runs[c]["rows_per_s"] / runs[other]["rows_per_s"] for runs in by_run.values()
                    if c in runs and other in runs and runs[c]["status"] == runs[other]["status"] == "ok"]

        rows.append(with_medians(dict(contender=c, status="ok", runs=len(ok), n=ok[0]["n"]), dict(
            rows_per_s=[r["rows_per_s"] for r in ok], x_c=ratios("C"), x_d=ratios("D"),
            wall_s=[r["wall_s"] for r in ok], first_s=[r["first_s"] for r in ok],
            kafka_s=[r["kafka_s"] for r in ok],
            cpu_per_m=[r["cpu_total_s"] / r["n"] * 1e6 for r in ok],
            rss_mib=[r["rss_kb"] and r["rss_kb"] / 1024 for r in ok],
        )))
    return rows


def snapshot_headline(summary, n):
    by = {r["contender"]: r for r in summary}
    d, w = by.get("D"), by.get("W")
    parts = []
    if w and w["status"] == "ok":
        s = f"W snapshots at **{fmt(w.get('x_c'), '.2f', '?')}× C**{fmt_range(w, 'x_c', '.2f')}"
        if d and d["status"] == "ok":
            s += (f" and **{fmt(w.get('x_d'), '.1f', '?')}× D**{fmt_range(w, 'x_d', '.1f')}, with "
                  f"{w['rss_mib'] / d['rss_mib']:.3f}× D's peak RSS")
        parts.append(s)
    elif w:
        parts.append(f"W {w['status']}")
    if d and d["status"] == "ok":
        parts.append(f"D snapshots at {fmt(d.get('x_c'), '.2f', '?')}× C{fmt_range(d, 'x_c', '.2f')}")
    if not parts:
        return []
    return [f"- Snapshot of {n:,} rows: " + "; ".join(parts) + "."]


def drain_table(w, summary, names):
    """The per-K table of the throughput and table-events passes: every number a median over runs,
    with its min–max beside it (fmt_med)."""
    w("| K | contender | runs | rows/s | ×R | ×D | first record after start, s | start → all in Kafka, s "
      "| CPU-s / M events | CPU-s / M events, drain only | its walsender + the broker, CPU-s / M events, "
      "drain | peak RSS MiB |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in summary:
        if s["status"] != "ok":
            w(f"| {s['k']} | {names[s['contender']]} | | {s['status']} | | | | | | | | |")
            continue
        others = " + ".join(fmt_med(s, key, ",.1f") for key in ("walsender_per_m", "broker_per_m")
                            if s.get(key) is not None) or "—"
        xd = "" if s["contender"] in ("R", "D") else fmt_med(s, "x_d", ".2f")
        xr = "1" if s["contender"] == "R" else fmt_med(s, "x_r", ".2f")
        w(f"| {s['k']} | {names[s['contender']]} | {s['runs']} | {fmt_med(s, 'rows_per_s', ',.0f')} | {xr} | {xd} "
          f"| {fmt_med(s, 'first_s', '.1f')} | {fmt_med(s, 'wall_s', '.1f')} | {fmt_med(s, 'cpu_per_m', ',.1f')} "
          f"| {fmt_med(s, 'cpu_drain_per_m', ',.1f')} | {others} | {fmt_med(s, 'rss_mib', ',.0f')} |")
    w("")


def every_run_table(w, results, title):
    w(f"<details><summary>{title}</summary>")
    w("")
    w("| K | run | contender | status | rows/s | drain s | first record s | CPU-s total | CPU-s drain "
      "| walsender CPU-s drain | broker CPU-s drain | peak RSS MiB | load1 | verified |")
    w("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        w(f"| {r['k']} | {r['run']} | {r['contender']} | {r['status']} | {fmt(r['rows_per_s'], ',.0f')} "
          f"| {fmt(r['drain_s'], '.2f')} | {fmt(r['first_s'], '.2f')} | {fmt(r['cpu_total_s'], '.2f')} "
          f"| {fmt(r['cpu_drain_s'], '.2f')} | {fmt(r.get('cpu_walsender_s'), '.2f')} "
          f"| {fmt(r.get('cpu_broker_s'), '.2f')} | {fmt(r['rss_kb'] and r['rss_kb'] / 1024, ',.0f')} "
          f"| {r['load1']:.2f} | {r['verified']} |")
    w("")
    w("</details>")
    w("")


def tables_headline(summary):
    out = []
    by = {(r["k"], r["contender"]): r for r in summary}
    for k in sorted({r["k"] for r in summary}):
        d, wr = by.get((k, "D")), by.get((k, "W"))
        parts = w_and_d_in_words(wr, d, lambda: f", peak RSS {wr['rss_mib']:,.0f} MiB")
        parts += against_w(by.get((k, "B")), wr, "the baseline (B)")
        parts += against_w(by.get((k, "A")), wr, "with format = \"avro\" (A)")
        parts += against_w(by.get((k, "J")), wr, "with format = \"json_schema\" (J)")
        if parts:
            out.append(f"- Table events, K={k}: " + "; ".join(parts) + ".")
    return out


TABLE_NAMES = {"R": "R  pg_recvlogical (ceiling)", "D": "D  Debezium, plain table events", "W": "W  walrelay [[table]]",
               "B": "B  walrelay [[table]], baseline (--baseline, --baseline-kafka)",
               "A": "A  walrelay [[table]] format = \"avro\" (schema registry)",
               "J": "J  walrelay [[table]] format = \"json_schema\" (schema registry)"}


HEADLINE_TITLE = "Headline (medians over runs, min–max in parentheses; details below):"
SPREAD_NOTE = ("Every number is the median over the runs with its min–max over the runs in parentheses "
               "(no parentheses: one run, or every run gave the same value at the precision shown).")


def suggest_rows(n, secs):
    """A backlog that makes a drain of `n` rows that took `secs` last MIN_DRAIN_S, with 20 % to
    spare for the spread between runs, rounded up to two significant digits."""
    want = n * MIN_DRAIN_S * 1.2 / max(secs, 1e-3)
    step = 10 ** max(0, int(math.log10(max(want, 1))) - 1)
    return int(math.ceil(want / step) * step)


def noise_warnings(ctx, results=(), snaps=(), tres=()):
    """Markdown paragraphs, one per pass in which some contender's measured time (drain, or for
    the snapshot pass start → done) was under MIN_DRAIN_S: rows/s over so short a time measure
    start-up and the machine's moment more than the contender. Not for --smoke (tiny on purpose)."""
    if ctx.args.smoke:
        return []
    out = []
    for what, rs, key, option in (("throughput", results, "drain_s", "--rows"),
                                  ("table-events", tres, "drain_s", "--rows"),
                                  ("snapshot", snaps, "wall_s", "--snapshot-rows")):
        short = [r for r in rs if r["status"] == "ok" and r.get(key) is not None and r[key] < MIN_DRAIN_S]
        if not short:
            continue
        worst = min(short, key=lambda r: r[key])
        at = f"K={worst['k']}, " if worst.get("k") is not None else ""
        measured = "drains" if key == "drain_s" else "snapshots (start → done)"
        out.append(
            f"**Warning: these {what} numbers are dominated by noise.** {len(short)} of "
            f"{sum(1 for r in rs if r['status'] == 'ok')} {measured} took under {MIN_DRAIN_S:.0f} s "
            f"(shortest: {worst['contender']}, {at}run {worst['run']}, {worst[key]:.1f} s for "
            f"{worst['n']:,} rows). Measurements that short swing rows/s and the ratios by ±20 % between runs "
            f"of one binary (docs/benchmarks.md, \"Backlog size and spread\"). For drains of at least ~{MIN_DRAIN_S:.0f} s "
            f"re-run with `{option} {suggest_rows(worst['n'], worst[key])}`.")
    return out


def report(ctx, results, lat, info, started, finished, snaps=(), tres=(), idles=()):
    a = ctx.args
    lines = []
    w = lines.append
    w(f"### Results {started:%Y-%m-%d %H:%M} UTC ({'smoke' if a.smoke else 'full'} run)")
    w("")
    w(f"Command: `{ctx.command}` — wall time {(finished - started).total_seconds() / 60:.1f} min.")
    w("")
    w(f"Machine: {info['cores']} cores ({info['cpu_model']}), {info['mem_gib']:.1f} GiB RAM, Linux "
      f"{info['kernel']}; load average (1 min) {ctx.load_start:.2f} at start, {loadavg():.2f} at end — "
      f"the machine is shared, other work ran at the same time.")
    w("")
    w(f"Versions: PostgreSQL {info['postgres']} · {info['pg_recvlogical']} · Kafka broker {info['kafka']} · "
      f"Kafka Connect {info['connect']} · Debezium {info['debezium']} · {info['java']} · "
      f"walrelay: {info['walrelay']} (git {info['git']})"
      + (f"; B, the baseline: {info['baseline']}" if info.get("baseline") else "") + ".")
    w("")
    snap_summary = summarize_snapshot(snaps, snapshot_contenders(ctx)) if snaps else []
    tsummary = summarize(tres, table_contenders(ctx), ctx.tables_txn_sizes) if tres else []
    head = headline(summarize(results, ctx.contenders, ctx.txn_sizes) if results else [], lat,
                    snap_summary, ctx.snap_fill and ctx.snap_fill["n"])
    if tsummary:
        if head:
            head = head[:-1] + tables_headline(tsummary) + [""]
        else:
            head = [HEADLINE_TITLE, ""] + tables_headline(tsummary) + [""]
    for warning in noise_warnings(ctx, results, snaps, tres):
        log(warning.replace("**", ""))
        w(warning)
        w("")
    for line in head:
        w(line)
    if results:
        fills = {}
        for f in ctx.fills:
            fills.setdefault(f["k"], []).append(f["n"] / f["fill_s"])
        w(f"Throughput: backlog of {ctx.fills[0]['n'] if ctx.fills else (a.rows or DEFAULT_ROWS):,} outbox rows "
          f"(≈430-byte jsonb payload, 10,000 aggregates, 2 aggregate types), written by {a.writers} "
          f"concurrent pgbench writers in K-row transactions, slot created before the fill; "
          f"{a.runs} run(s). ×R and ×D are per-run ratios (same backlog, minutes apart), "
          f"then the median. {SPREAD_NOTE}")
        w("")
        if ctx.calibration.get("throughput"):
            w(ctx.calibration["throughput"])
            w("")
        drain_table(w, summarize(results, ctx.contenders, ctx.txn_sizes), NAMES)
        w("Fill rate (pgbench, for context): " + "; ".join(
            f"K={k}: {fmt_vals(v, ',.0f')} rows/s" for k, v in fills.items()) + ".")
        w("")
    if lat:
        w(f"Latency: offered load {a.latency_rate} rows/s in 1-row transactions ({a.writers} pgbench "
          f"writers, `--rate`), measured for {a.latency_seconds} s after a {a.latency_warmup_seconds} s "
          f"warm-up at the same rate; latency = Kafka LogAppendTime − the row's "
          f"created_at (clock_timestamp() at INSERT, microseconds before COMMIT); every row of the window "
          f"is matched by its `id` header. R (no Kafka side): the arrival of the row's Insert message on "
          f"pg_recvlogical's stdout − created_at, the walsender's own delay under the same load (the "
          f"floor for any connector on this machine).")
        if any(l["contender"] == "X" for l in lat):
            w("")
            w("X (exactly_once): latency = the moment a read_committed consumer (kcat, one per partition, "
              "following them during the run) received the record − created_at: its Kafka transaction had "
              "committed. Its append latency (LogAppendTime − created_at, W's measure) and the arrival of the "
              f"offset record its transaction committed with (on {OFFSETS_TOPIC}) are below the table.")
        w("")
        w("| contender | offered rows/s | achieved rows/s | records | p50 ms | p90 ms | p99 ms | p99.9 ms "
          "| max ms | CPU % of one core (window) | peak RSS MiB |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for l in lat:
            name = NAMES[l["contender"]]
            if l.get("poll_ms") is not None:
                name += f", poll.interval.ms={l['poll_ms']}" + (" (default)" if l["poll_ms"] == 500 else "")
            if l["status"] != "ok":
                w(f"| {name} | {l['status']} | | | | | | | | | |")
                continue
            if l.get("disturbed"):
                name += " (DISTURBED: broker outage)"
            w(f"| {name} | {l['offered']:,} | {fmt(l['achieved'], ',.0f')} | {l['n']:,} "
              f"| {l['p50']:.0f} | {l['p90']:.0f} | {l['p99']:.0f} | {l['p999']:.0f} | {l['max']:.0f} "
              f"| {l['cpu_pct']:.0f} | {l['rss_kb'] / 1024:,.0f} |")
        w("")
        for l in lat:
            if l["contender"] == "X" and l["status"] == "ok":
                w(f"X: append latency p50 {l['append_p50']:.0f} ms / p99 {l['append_p99']:.0f} ms; commit seen on "
                  f"{OFFSETS_TOPIC} p50 {fmt(l['commit_p50'], '.0f', '?')} ms / p99 {fmt(l['commit_p99'], '.0f', '?')} "
                  f"ms; {l['note']}" + (f"; walrelay logged {len(l['log_problems'])} WARN/ERROR line(s)"
                                        if l["log_problems"] else "") + ".")
                w("")
    if snaps:
        f = ctx.snap_fill
        w(f"Snapshot: {f['n']:,} outbox rows ({f['table_bytes'] / 1e6:,.0f} MB table; the same rows as the "
          f"throughput backlog, written in {SNAPSHOT_K}-row transactions) existing before any slot; each "
          f"contender reads all of them once, on a slot of its own created at its start (D and W) and "
          f"dropped after; {a.runs} run(s). rows/s = rows ÷ (start → done): C until psql "
          f"exits, D until its last record's LogAppendTime, W until it exits 0 (after its last record "
          f"is acknowledged and the slot confirmed). ×C and ×D are per-run ratios, then the median. "
          f"{SPREAD_NOTE}")
        w("")
        w("| contender | runs | rows/s | ×C | ×D | start → done, s | first record after start, s "
          "| start → all in Kafka, s | CPU-s / M rows | peak RSS MiB |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for x in snap_summary:
            name = SNAP_NAMES[x["contender"]]
            if x["status"] != "ok":
                w(f"| {name} | | {x['status']} | | | | | | | |")
                continue
            xc = "1" if x["contender"] == "C" else fmt_med(x, "x_c", ".2f")
            xd = fmt_med(x, "x_d", ".2f") if x["contender"] == "W" else ""
            w(f"| {name} | {x['runs']} | {fmt_med(x, 'rows_per_s', ',.0f')} | {xc} | {xd} | {fmt_med(x, 'wall_s', '.1f')} "
              f"| {fmt_med(x, 'first_s', '.1f')} | {fmt_med(x, 'kafka_s', '.1f')} | {fmt_med(x, 'cpu_per_m', ',.1f')} "
              f"| {fmt_med(x, 'rss_mib', ',.0f')} |")
        w("")
        w(f"Fill rate (pgbench, for context): {f['n'] / f['fill_s']:,.0f} rows/s.")
        w("")
    if tres:
        tfills = {}
        for f in ctx.tfills:
            tfills.setdefault(f["k"], []).append(f["n"] / f["fill_s"])
        w(f"Table events: backlog of {ctx.tfills[0]['n'] if ctx.tfills else (a.rows or DEFAULT_ROWS):,} UPDATEs of "
          f"`{TABLE}` (10 columns: int8 pk, int4, text, varchar, numeric(12,2), timestamptz, bool, jsonb, "
          f"uuid, float8; {TABLE_ROWS:,} rows, REPLICA IDENTITY DEFAULT), written by {a.writers} concurrent "
          f"pgbench writers in K-row transactions, slot created before the backlog; D = Debezium without "
          f"the EventRouter, JSON converter for key and value (schemas.enable=false), W = walrelay "
          f"`[[table]]`, both to `{TABLE_TOPIC}`; {a.runs} run(s), medians (min–max) and ratios per run as above.")
        w("")
        if ctx.calibration.get("table-events"):
            w(ctx.calibration["table-events"])
            w("")
        drain_table(w, tsummary, TABLE_NAMES)
        w("Update rate (pgbench, for context): " + "; ".join(
            f"K={k}: {fmt_vals(v, ',.0f')} rows/s" for k, v in tfills.items()) + ".")
        w("")
    if idles:
        for line in idle_table(idles):
            w(line)
        w("")
        w(f"Each contender streams from a fresh slot of the same database while nothing is written: "
          f"{a.idle_warmup_seconds} s of warm-up, then CPU (all threads, utime + stime), context switches "
          f"(all threads) and RSS over {a.idle_seconds} s. D is Kafka Connect's whole JVM.")
        w("")
    if OUTAGES:
        w(f"Note: the shared broker stopped answering {len(OUTAGES)} time(s) during this benchmark "
          f"(the project's outage tests stop and restart it); affected runs are marked in the list below.")
        w("")
    if results:
        every_run_table(w, results, "Every run")
    if tres:
        every_run_table(w, tres, "Every table-events run")
    if snaps:
        w("<details><summary>Every snapshot run</summary>")
        w("")
        w("| run | contender | status | rows/s | start → done s | first record s | all in Kafka s | CPU-s "
          "| peak RSS MiB | load1 | verified |")
        w("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in snaps:
            w(f"| {r['run']} | {r['contender']} | {r['status']} | {fmt(r['rows_per_s'], ',.0f')} "
              f"| {fmt(r['wall_s'], '.2f')} | {fmt(r['first_s'], '.2f')} | {fmt(r['kafka_s'], '.2f')} "
              f"| {fmt(r['cpu_total_s'], '.2f')} | {fmt(r['rss_kb'] and r['rss_kb'] / 1024, ',.0f')} "
              f"| {r['load1']:.2f} | {r['verified']} |")
        w("")
        w("</details>")
        w("")
    return "\n".join(lines)


def update_docs(md):
    text = DOCS.read_text() if DOCS.exists() else ""
    block = f"{DOCS_BEGIN}\n\n{md}\n{DOCS_END}"
    if DOCS_BEGIN in text and DOCS_END in text:
        head, rest = text.split(DOCS_BEGIN, 1)
        _, tail = rest.split(DOCS_END, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n## Results\n\n" + block + "\n"
    DOCS.write_text(text)
    log(f"wrote the results into {DOCS.relative_to(REPO)}")


# --------------------------------------------------------------------------------------

class Ctx:
    pass


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="deploy/bench/run.sh", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=None,
                    help=f"backlog size N of the throughput and table-events passes (default: {DEFAULT_ROWS}, "
                         f"raised per pass if one R drain of a {CALIBRATION_ROWS}-row probe shows that the "
                         f"fastest drain would last under ~{MIN_DRAIN_S:.0f} s; a given N is used as is). "
                         f"The report warns when any drain lasted under {MIN_DRAIN_S:.0f} s")
    ap.add_argument("--txn-sizes", default="1 10", help='rows per transaction K, e.g. "1 10" (default)')
    ap.add_argument("--runs", type=int, default=3,
                    help="runs per K; the tables show medians with their min–max (default 3)")
    ap.add_argument("--writers", type=int, default=4, help="concurrent pgbench writers (default 4)")
    ap.add_argument("--contenders", default="R D W",
                    help='subset of "R D W B E S X" (default "R D W"); B = walrelay run from the --baseline '
                         'binary (before/after a change); E = walrelay with format = "cloudevents" in binary '
                         'mode (throughput and latency passes); S = walrelay over the dev broker\'s '
                         'SASL_SSL listener (throughput pass only), to compare with W; X = walrelay with '
                         '[kafka] delivery = "exactly_once" (throughput and latency passes), counted and '
                         'timed as a read_committed consumer sees its records; A / J = walrelay with '
                         '[[table]] format = "avro" / "json_schema" (table pass only; needs '
                         'WALRELAY_REGISTRY_URL, deploy/dev/registry.sh)')
    ap.add_argument("--latency", action="store_true", help="also run the latency pass (R, D, W, X)")
    ap.add_argument("--latency-only", action="store_true", help="only the latency pass")
    ap.add_argument("--latency-rate", type=int, default=2000, help="offered rows/s (default 2000)")
    ap.add_argument("--latency-seconds", type=int, default=60, help="measured duration of the load (default 60)")
    ap.add_argument("--latency-warmup-seconds", type=int, default=15,
                    help="load before the measured window starts, not measured (default 15)")
    ap.add_argument("--dbz-max-batch", type=int, default=2048,
                    help="Debezium max.batch.size (default 2048, Debezium's default)")
    ap.add_argument("--dbz-max-queue", type=int, default=8192,
                    help="Debezium max.queue.size (default 8192, Debezium's default)")
    ap.add_argument("--dbz-poll-ms", type=int, default=500,
                    help="Debezium poll.interval.ms for the throughput runs (default 500, Debezium's default)")
    ap.add_argument("--dbz-latency-poll-ms", default="500 10",
                    help='Debezium poll.interval.ms values for the latency pass (default "500 10")')
    ap.add_argument("--snapshot", action="store_true",
                    help="also run the snapshot pass (C = COPY ceiling, D = Debezium snapshot.mode=initial, "
                         "W = walrelay [snapshot] initial_only) on rows that exist before any slot")
    ap.add_argument("--snapshot-only", action="store_true", help="only the snapshot pass")
    ap.add_argument("--snapshot-rows", type=int, default=DEFAULT_ROWS,
                    help=f"rows in the table for the snapshot pass (default {DEFAULT_ROWS})")
    ap.add_argument("--tables", action="store_true",
                    help="also run the table-events pass: a backlog of --rows UPDATEs of a 10-column table, "
                         "R = pg_recvlogical, D = Debezium plain table events (no EventRouter), W = walrelay "
                         "[[table]]")
    ap.add_argument("--tables-only", action="store_true", help="only the table-events pass")
    ap.add_argument("--tables-txn-sizes", default=None,
                    help="rows per transaction K for the table-events pass (default: --txn-sizes)")
    ap.add_argument("--idle", action="store_true",
                    help="also run the idle pass: CPU, wake-ups and RSS of R, D, W (and B) while nothing is written")
    ap.add_argument("--idle-only", action="store_true", help="only the idle pass")
    ap.add_argument("--idle-seconds", type=int, default=60, help="measured idle window (default 60)")
    ap.add_argument("--idle-warmup-seconds", type=int, default=30,
                    help="wait after a contender's start before the idle window (default 30)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny run for CI: 2000 rows, 1 run, K=1 and 10, 3+10 s latency pass at 200 rows/s, "
                         "a 2000-row snapshot pass, a 2000-update table-events pass at K=10; "
                         f"never touches docs/, no warning about drains under {MIN_DRAIN_S:.0f} s")
    default_bin = os.environ.get("WALRELAY_BIN") or str(
        Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target") / "release" / "walrelay")
    ap.add_argument("--walrelay", default=default_bin,
                    help="walrelay binary (default $WALRELAY_BIN, else $CARGO_TARGET_DIR/release/walrelay, "
                         "else target/release/walrelay)")
    ap.add_argument("--baseline", default=None,
                    help="contender B's walrelay binary, e.g. a release build of an earlier commit "
                         "(default: W's)")
    ap.add_argument("--baseline-kafka", default=None,
                    help='TOML lines added to contender B\'s [kafka] section, e.g. \'linger = "20ms"\': '
                         "W against the same binary with other producer settings")
    ap.add_argument("--require-walrelay", action="store_true",
                    help='fail instead of printing "not yet" when walrelay is missing or does not deliver')
    ap.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    ap.add_argument("--keep", action="store_true", help="keep the pg_recvlogical stream files")
    a = ap.parse_args(argv)
    if a.smoke:
        a.rows, a.runs, a.latency = 2000, 1, True
        a.latency_rate, a.latency_seconds, a.latency_warmup_seconds = 200, 10, 3
        a.snapshot, a.snapshot_rows = True, 2000
        a.tables, a.tables_txn_sizes = True, a.tables_txn_sizes or "10"
        a.idle, a.idle_seconds, a.idle_warmup_seconds = True, 5, 5
        a.no_docs = True
    if a.latency_only:
        a.latency = True
    if a.snapshot_only:
        a.snapshot = True
    if a.tables_only:
        a.tables = True
    if a.idle_only:
        a.idle = True
    if a.tables_txn_sizes is None:
        a.tables_txn_sizes = a.txn_sizes
    return a


def main(argv):
    args = parse_args(argv)
    if not CONNECT_LIBS:
        print("bench.py: run me through deploy/bench/run.sh (it sets BENCH_CONNECT_LIBS etc.)", file=sys.stderr)
        return 2
    ctx = Ctx()
    ctx.args = args
    ctx.command = "deploy/bench/run.sh" + ("" if not argv else " " + " ".join(
        a if re.fullmatch(r"[\w./=:-]+", a) else f"'{a}'" for a in argv))
    ctx.txn_sizes = [int(x) for x in args.txn_sizes.split()]
    ctx.tables_txn_sizes = [int(x) for x in args.tables_txn_sizes.split()]
    ctx.contenders = [c for c in "RDWBESXAJ" if c in args.contenders.upper().split()]
    ctx.dbz_latency_poll_ms = [int(x) for x in args.dbz_latency_poll_ms.split()]
    ctx.walrelay = Path(args.walrelay)
    ctx.w_reason = walrelay_missing_reason(ctx.walrelay) if set("WESXAJ") & set(ctx.contenders) else None
    if "B" in ctx.contenders and not (args.baseline or args.baseline_kafka):
        print("bench: error: contender B needs --baseline PATH (another walrelay binary) and/or --baseline-kafka "
              "(other [kafka] settings)", file=sys.stderr)
        return 1
    ctx.baseline = Path(args.baseline) if args.baseline else ctx.walrelay
    ctx.b_reason = walrelay_missing_reason(ctx.baseline) if "B" in ctx.contenders else None
    if "S" in ctx.contenders and not (SASL_SSL["brokers"] and SASL_SSL["password"]):
        print("bench: error: contender S needs the SASL_SSL listener: WALRELAY_KAFKA_SASL_SSL_BROKERS etc. "
              "(deploy/dev/kafka.sh up prints them; restart a broker started by an older kafka.sh)",
              file=sys.stderr)
        return 1
    ctx.ws_reason = None  # why W cannot run the snapshot pass (set by its first failure)
    ctx.snap_fill = None
    if ctx.w_reason and args.require_walrelay:
        print(f"bench: error: --require-walrelay: {ctx.w_reason}", file=sys.stderr)
        return 1
    started = dt.datetime.now(dt.timezone.utc)
    ctx.stamp = started.strftime("%Y%m%dT%H%M%SZ")
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    ctx.rundir = STATE_ROOT / ctx.stamp
    ctx.rundir.mkdir()
    latest = STATE_ROOT / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(ctx.stamp)
    ctx.load_start = loadavg()
    ctx.fills = []
    ctx.tfills = []
    ctx.calibration = {}  # pass -> what backlog_rows decided, for the report
    log(f"state and logs: {ctx.rundir.relative_to(REPO)}")
    if ctx.w_reason:
        log(f"W: not yet ({ctx.w_reason})")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    rc = 0
    results, lat, snaps, tres, idles = [], [], [], [], []
    tables_only = args.tables_only
    try:
        cleanup_leftover_children()
        setup_database()
        # One BenchAdmin (JVM) start for every topic of the run.
        parts = ensure_topics(TOPICS + ([TABLE_TOPIC] if args.tables or args.tables_only else []))
        ctx.parts = {t: parts[t] for t in TOPICS}
        ctx.tparts = {t: parts[t] for t in parts if t == TABLE_TOPIC}
        only = tables_only or args.latency_only or args.snapshot_only or args.idle_only
        if not only:
            results = throughput(ctx)
        if args.latency and not args.snapshot_only and (not tables_only or args.latency_only):
            lat = latency(ctx)
        if args.snapshot and (not tables_only or args.snapshot_only):
            snaps = snapshot(ctx)
        # --latency-only / --snapshot-only mean only that pass, unless --tables-only adds this one.
        if tables_only or (args.tables and not args.latency_only and not args.snapshot_only
                           and not args.idle_only):
            tres = tables(ctx)
        if args.idle_only or (args.idle and not only):
            idles = idle(ctx)
    except BenchError as e:
        log(f"error: {e}")
        rc = 1
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); cleaning up")
        rc = 130
    finally:
        stop_all_children()
        try:
            drop_bench_slots()
        except Exception as e:  # noqa: BLE001
            log(f"warning: could not drop bench slots: {e}")
        if CHILDREN_FILE.exists() and not _children:
            CHILDREN_FILE.unlink()
    if rc != 0:
        return rc
    finished = dt.datetime.now(dt.timezone.utc)
    info = machine_info(ctx)
    md = report(ctx, results, lat, info, started, finished, snaps, tres, idles)
    (ctx.rundir / "results.md").write_text(md + "\n")
    (ctx.rundir / "results.json").write_text(json.dumps(dict(results=results, latency=lat, snapshot=snaps,
                                                             tables=tres, idle=idles, info=info,
                                                             fills=ctx.fills,
                                                             snapshot_fill=ctx.snap_fill,
                                                             tables_fills=ctx.tfills),
                                                        indent=1, default=str))
    print(md)
    if not args.no_docs:
        update_docs(md)
    log(f"done in {(finished - started).total_seconds():.0f}s; results: {(ctx.rundir / 'results.md').relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
