//! The fault soak (issue 8): eight writers keep committing outbox rows —
//! with rolled-back transactions and insert-then-delete among them — while
//! each cycle injects one fault: `kill -9` of walrelay, SIGTERM of walrelay,
//! the broker stopped for a while, PostgreSQL restarted (fast or immediate
//! shutdown), the walsender terminated, or a second instance started (it
//! waits as a standby and takes over when the first is killed a moment
//! later). At the end every committed event is checked against Kafka.
//!
//! What it proves (each a number in the report; any non-zero fails the soak):
//! - **lost**: a committed outbox row with no record in Kafka.
//! - **order breaks**: per aggregate, the first copies of its events are
//!   not in commit order (or the aggregate spans partitions).
//! - **differing duplicates**: a re-sent record that is not byte-identical
//!   (topic, partition, key, value, headers) to its first copy.
//! - **phantoms**: a record whose id no committed transaction wrote (a
//!   rolled-back row, say); **mismatches**: a first copy whose topic, key or
//!   value differs from the committed row.
//!
//! Ground truth comes from the database, not from the writers' own view: a
//! COMMIT that fails when the server goes away may or may not have happened.
//! Each outbox insert also writes `soak_committed` in the same transaction,
//! so that table holds exactly the committed events, including those whose
//! outbox row was deleted again. Commit order per aggregate comes from
//! `soak_agg`: every insert bumps its aggregate's counter under the row
//! lock, which is held until commit, so the counter follows commit order.
//!
//! Duplicates are charged to the cycle whose fault caused them: after each
//! fault the soak waits until the slot has confirmed everything written up to
//! the recovery point (the re-sent tail is then in Kafka) and notes every
//! partition's high watermark; a duplicate between two such marks belongs to
//! that cycle's fault.
//!
//! The soak stops and restarts the services it is given, so it runs only
//! from `deploy/soak.sh`, which brings up its own PostgreSQL and broker
//! (never the shared ones); hence `#[ignore]` for plain `cargo test`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use support::*;
use tokio_postgres::{Client, NoTls};

/// Aggregates `agg-0..AGGREGATES`; types `invoice` (n % 3 == 0) and `order`.
const AGGREGATES: usize = 200;
const WRITERS: usize = 8;
/// How long the relay may take to catch up after a fault before the soak
/// calls it a stall (`WALRELAY_SOAK_CATCH_UP_SECS` overrides it, e.g. to
/// exercise the stall path; the final drain always gets this much).
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(180);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Fault {
    Kill9,
    Term,
    BrokerStop,
    PgRestartFast,
    PgRestartImmediate,
    WalsenderTerminate,
    /// A second instance with the same configuration starts (a rolling
    /// update, a copy started by mistake), waits as a standby, and takes
    /// over when the first is killed (-9) a moment later.
    SecondInstance,
    /// `walrelay snapshot --table public.outbox` (an incremental snapshot
    /// beside the stream), then `kill -9` of walrelay a moment later, in
    /// the middle of its chunks; the restart goes on from the last stored
    /// chunk.
    IncrementalSnapshot,
    /// DDL on the outbox table under load: a column added with a volatile
    /// default, which rewrites the table (`ALTER TABLE … ADD COLUMN …
    /// DEFAULT random()`), during an incremental snapshot when one runs.
    Ddl,
    /// On a primary/standby pair (`deploy/soak.sh --pair`, PostgreSQL 17+):
    /// once the standby has synchronized walrelay's failover slot, the
    /// primary crashes (`pg_ctl stop -m immediate`), the standby is
    /// promoted, and a new standby is made of the old primary's node.
    Promote,
}

const FAULTS: [Fault; 10] = [
    Fault::Kill9,
    Fault::Term,
    Fault::BrokerStop,
    Fault::PgRestartFast,
    Fault::PgRestartImmediate,
    Fault::WalsenderTerminate,
    Fault::SecondInstance,
    Fault::IncrementalSnapshot,
    Fault::Ddl,
    Fault::Promote,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Kill9 => "kill-9",
            Fault::Term => "sigterm",
            Fault::BrokerStop => "broker-stop",
            Fault::PgRestartFast => "pg-restart-fast",
            Fault::PgRestartImmediate => "pg-restart-immediate",
            Fault::WalsenderTerminate => "walsender-terminate",
            Fault::SecondInstance => "second-instance",
            Fault::IncrementalSnapshot => "incremental-snapshot",
            Fault::Ddl => "ddl",
            Fault::Promote => "promote",
        }
    }
}

/// Soak parameters, from the environment `deploy/soak.sh` sets.
#[derive(Debug)]
struct Params {
    cycles: usize,
    seed: u64,
    /// Seconds of load before each fault.
    load_secs: (u64, u64),
    /// Seconds the broker stays down.
    outage_secs: (u64, u64),
    /// Pause between one writer's transactions.
    writer_pause: Duration,
    out_dir: PathBuf,
    pg_major: String,
    /// The fault kinds to draw from (`WALRELAY_SOAK_FAULTS`, names joined by
    /// commas; default all), e.g. to chase one kind's defect.
    faults: Vec<Fault>,
    /// librdkafka `debug` contexts for walrelay's producer (evidence).
    rdkafka_debug: String,
    /// `delivery = "exactly_once"`: any duplicate fails the soak.
    exactly_once: bool,
    /// Stall deadline per cycle.
    catch_up: Duration,
    /// `walrelay inbox` consumes the topics throughout (`WALRELAY_SOAK_INBOX`,
    /// default on) and is killed -9 every `inbox_kill_secs` (a range).
    inbox: bool,
    inbox_kill_secs: (u64, u64),
}

fn range_env(name: &str, default: &str) -> (u64, u64) {
    let v = env_or(name, default);
    let (a, b) = v
        .split_once('-')
        .unwrap_or_else(|| panic!("{name}={v}: expected <min>-<max> seconds"));
    let (a, b): (u64, u64) = (
        a.trim().parse().expect("range min"),
        b.trim().parse().expect("range max"),
    );
    assert!(a <= b, "{name}={v}: min above max");
    (a, b)
}

impl Params {
    fn from_env() -> Params {
        assert_eq!(
            std::env::var("WALRELAY_SOAK").as_deref(),
            Ok("1"),
            "the fault soak stops and restarts its PostgreSQL and Kafka: run it with \
             deploy/soak.sh, which brings up services of its own"
        );
        let seed = env_or("WALRELAY_SOAK_SEED", "0").parse().expect("seed");
        let seed = if seed == 0 {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1)
        } else {
            seed
        };
        Params {
            cycles: env_or("WALRELAY_SOAK_CYCLES", "6").parse().expect("cycles"),
            seed,
            load_secs: range_env("WALRELAY_SOAK_LOAD", "2-6"),
            outage_secs: range_env("WALRELAY_SOAK_OUTAGE", "5-60"),
            writer_pause: Duration::from_millis(
                env_or("WALRELAY_SOAK_WRITER_PAUSE_MS", "30")
                    .parse()
                    .expect("pause"),
            ),
            out_dir: PathBuf::from(env_or(
                "WALRELAY_SOAK_OUT",
                &std::env::temp_dir().join("walrelay-soak").to_string_lossy(),
            )),
            pg_major: pg_major(),
            faults: match env_or("WALRELAY_SOAK_FAULTS", "all").as_str() {
                // `promote` needs the pair.
                "all" => FAULTS
                    .into_iter()
                    .filter(|f| *f != Fault::Promote || pair_ports().is_some())
                    .collect(),
                list => list
                    .split(',')
                    .map(|n| {
                        FAULTS
                            .into_iter()
                            .find(|f| f.name() == n.trim())
                            .unwrap_or_else(|| panic!("WALRELAY_SOAK_FAULTS: unknown fault {n:?}"))
                    })
                    .collect(),
            },
            rdkafka_debug: env_or("WALRELAY_SOAK_RDKAFKA_DEBUG", ""),
            exactly_once: env_or("WALRELAY_SOAK_EXACTLY_ONCE", "0") == "1",
            catch_up: Duration::from_secs(
                env_or(
                    "WALRELAY_SOAK_CATCH_UP_SECS",
                    &CATCH_UP_DEADLINE.as_secs().to_string(),
                )
                .parse()
                .expect("WALRELAY_SOAK_CATCH_UP_SECS"),
            ),
            inbox: env_or("WALRELAY_SOAK_INBOX", "1") == "1",
            inbox_kill_secs: range_env("WALRELAY_SOAK_INBOX_KILL", "2-8"),
        }
    }
}

// ---------------------------------------------------------------------------
// PostgreSQL helpers that survive server restarts
// ---------------------------------------------------------------------------

/// The two ports of the primary/standby pair the soak runs on with
/// `deploy/soak.sh --pair` (`WALRELAY_SOAK_PAIR_PORTS`), else `None`.
fn pair_ports() -> Option<Vec<u16>> {
    let ports = std::env::var("WALRELAY_SOAK_PAIR_PORTS").ok()?;
    Some(
        ports
            .split(',')
            .map(|p| p.trim().parse().expect("WALRELAY_SOAK_PAIR_PORTS"))
            .collect(),
    )
}

/// A superuser connection to `database`: on a pair, to whichever server is
/// the primary now (not in recovery).
async fn try_connect(database: &str) -> Result<Client, String> {
    let Some(ports) = pair_ports() else {
        return connect_url(&pg_superuser_url(database)).await;
    };
    for port in ports {
        let url = format!("postgres://postgres:postgres@127.0.0.1:{port}/{database}");
        let Ok(client) = connect_url(&url).await else {
            continue;
        };
        if let Ok(row) = client.query_one("SELECT pg_is_in_recovery()", &[]).await
            && !row.get::<_, bool>(0)
        {
            return Ok(client);
        }
    }
    Err("no primary".into())
}

async fn connect_url(url: &str) -> Result<Client, String> {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The standby of the pair: a connection to the server in recovery.
async fn connect_standby() -> Option<Client> {
    for port in pair_ports()? {
        let url = format!("postgres://postgres:postgres@127.0.0.1:{port}/postgres");
        let Ok(client) = connect_url(&url).await else {
            continue;
        };
        if let Ok(row) = client.query_one("SELECT pg_is_in_recovery()", &[]).await
            && row.get::<_, bool>(0)
        {
            return Some(client);
        }
    }
    None
}

/// Connects, retrying while the server restarts.
async fn connect_retry(database: &str) -> Client {
    wait_for(
        "PostgreSQL to accept connections",
        Duration::from_secs(120),
        || async { try_connect(database).await.ok() },
    )
    .await
}

async fn slot_state(database: &str, slot: &str) -> Option<(u64, Option<i32>)> {
    let client = try_connect(database).await.ok()?;
    let row = client
        .query_opt(
            "SELECT confirmed_flush_lsn::text, active_pid FROM pg_replication_slots \
             WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .ok()??;
    let lsn: Option<String> = row.get(0);
    Some((parse_lsn(&lsn?), row.get(1)))
}

async fn current_lsn(database: &str) -> u64 {
    let client = connect_retry(database).await;
    let row = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .expect("pg_current_wal_lsn");
    parse_lsn(&row.get::<_, String>(0))
}

fn run_script(script: &str, env: &[(&str, &str)], args: &[&str]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let mut cmd = std::process::Command::new(&path);
    cmd.args(args).stdout(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let status = cmd.status().expect("run a service script");
    assert!(status.success(), "{script} {args:?} failed ({status})");
}

// ---------------------------------------------------------------------------
// Writers
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct WriterStats {
    commits: AtomicU64,
    rollbacks: AtomicU64,
    insert_then_delete: AtomicU64,
    cleanup_deletes: AtomicU64,
    /// Transactions that failed (server gone, COMMIT outcome unknown, ...).
    failed: AtomicU64,
    reconnects: AtomicU64,
    /// Ids inserted by transactions that were rolled back on purpose.
    rolled_back_ids: std::sync::Mutex<Vec<String>>,
}

const INSERT_ROW: &str = "
WITH s AS (UPDATE soak_agg SET seq = seq + 1 WHERE agg = $1 RETURNING seq),
     o AS (INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
           SELECT gen_random_uuid(), $2, $1, 'Created',
                  jsonb_build_object('w', $3::int, 'aseq', s.seq, 'pad', $4::text)
           FROM s
           RETURNING id, aggregatetype, aggregateid, payload)
INSERT INTO soak_committed (id, aggregatetype, aggregateid, seq, payload, writer)
SELECT o.id, o.aggregatetype, o.aggregateid, s.seq, o.payload, $3::int FROM o, s
RETURNING id::text";

/// One writer: transactions of 1..=5 rows until `stop`. 10 % roll back,
/// 10 % delete their rows again before committing, and now and then a
/// separate transaction deletes rows of an earlier committed one (the
/// outbox cleanup an application does). Errors (the server restarting)
/// drop the connection and reconnect.
async fn writer(
    w: i32,
    database: String,
    seed: u64,
    pause: Duration,
    stop: Arc<AtomicBool>,
    stats: Arc<WriterStats>,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ (u64::try_from(w).unwrap_or(0) << 32));
    let mut client: Option<Client> = None;
    let mut last_committed: Vec<String> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let c = match &client {
            Some(c) if !c.is_closed() => c,
            _ => {
                match try_connect(&database).await {
                    Ok(c) => {
                        stats.reconnects.fetch_add(1, Ordering::Relaxed);
                        client = Some(c);
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
                continue;
            }
        };
        let roll = rng.random_range(0..100u32);
        if roll < 4 && !last_committed.is_empty() {
            let ids = std::mem::take(&mut last_committed);
            match c
                .execute(
                    "DELETE FROM outbox WHERE id = ANY($1::text[]::uuid[])",
                    &[&ids],
                )
                .await
            {
                Ok(_) => {
                    stats.cleanup_deletes.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    client = None;
                }
            }
            continue;
        }
        let n = rng.random_range(1..=5usize);
        let mut aggs: Vec<usize> = (0..n).map(|_| rng.random_range(0..AGGREGATES)).collect();
        // Row locks on soak_agg in one global order: no deadlocks.
        aggs.sort_unstable();
        let rollback = roll < 14;
        let delete_again = !rollback && roll < 24;
        let result: Result<Vec<String>, tokio_postgres::Error> = async {
            c.batch_execute("BEGIN").await?;
            let mut ids = Vec::with_capacity(n);
            for agg in &aggs {
                let kind = if agg % 3 == 0 { "invoice" } else { "order" };
                let pad = "x".repeat(32 + agg % 64);
                let row = c
                    .query_one(INSERT_ROW, &[&format!("agg-{agg}"), &kind, &w, &pad])
                    .await?;
                ids.push(row.get::<_, String>(0));
            }
            if delete_again {
                c.execute(
                    "DELETE FROM outbox WHERE id = ANY($1::text[]::uuid[])",
                    &[&ids],
                )
                .await?;
            }
            c.batch_execute(if rollback { "ROLLBACK" } else { "COMMIT" })
                .await?;
            Ok(ids)
        }
        .await;
        match result {
            Ok(ids) if rollback => {
                stats.rollbacks.fetch_add(1, Ordering::Relaxed);
                stats
                    .rolled_back_ids
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(ids);
            }
            Ok(ids) => {
                stats.commits.fetch_add(1, Ordering::Relaxed);
                if delete_again {
                    stats.insert_then_delete.fetch_add(1, Ordering::Relaxed);
                } else {
                    last_committed = ids;
                }
            }
            Err(_) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                client = None;
            }
        }
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
}

// ---------------------------------------------------------------------------
// The relay under supervision
// ---------------------------------------------------------------------------

/// Runs walrelay and restarts it when it exits, counting exits nobody asked
/// for (a transient fault should be retried inside the process).
struct Supervised {
    relay: RelayProcess,
    config_path: PathBuf,
    unexpected_exits: Vec<String>,
}

impl Supervised {
    fn start(config_path: &Path) -> Supervised {
        Supervised {
            relay: RelayProcess::start_with(config_path, &[]),
            config_path: config_path.to_owned(),
            unexpected_exits: Vec::new(),
        }
    }

    fn restart(&mut self) {
        self.relay = RelayProcess::start_with(&self.config_path, &[]);
    }

    /// Starts a second instance beside the running one, on a copy of the
    /// configuration (the same settings; a log of its own), which becomes
    /// the supervised one from now on. Returns the first.
    fn start_second(&mut self) -> RelayProcess {
        let other = if self.config_path.ends_with("walrelay.toml") {
            self.config_path.with_file_name("walrelay-2.toml")
        } else {
            self.config_path.with_file_name("walrelay.toml")
        };
        std::fs::copy(&self.config_path, &other).expect("copy the configuration");
        self.config_path = other;
        std::mem::replace(
            &mut self.relay,
            RelayProcess::start_with(&self.config_path, &[]),
        )
    }

    /// Restarts the relay if it exited on its own; `cycle` for the record.
    fn check(&mut self, cycle: usize) {
        if let Ok(Some(status)) = self.relay.child.try_wait() {
            let tail: String = self
                .relay
                .log()
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n    ");
            eprintln!("soak: cycle {cycle}: walrelay exited on its own ({status}); restarting");
            self.unexpected_exits
                .push(format!("cycle {cycle}: {status}; log tail:\n    {tail}"));
            self.restart();
        }
    }
}

// ---------------------------------------------------------------------------
// Kafka
// ---------------------------------------------------------------------------

/// A consumer as `read_committed` readers see the topics (librdkafka's
/// default, said explicitly): records of aborted transactions never come.
fn reader(group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", unique(group))
        .set("enable.auto.commit", "false")
        .set("allow.auto.create.topics", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .expect("Kafka consumer")
}

/// High watermark of every partition of `topics` (missing topics: none).
fn high_watermarks(
    consumer: &BaseConsumer,
    topics: &[String],
) -> Option<BTreeMap<(String, i32), i64>> {
    let mut out = BTreeMap::new();
    for topic in topics {
        let md = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .ok()?;
        for t in md
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
        {
            for p in t.partitions() {
                let (_, high) = consumer
                    .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
                    .ok()?;
                out.insert((topic.clone(), p.id()), high);
            }
        }
    }
    Some(out)
}

/// Reads every record below `ends` and hands it to `f`, one topic at a
/// time (an end of partition names no topic). A partition is done at its
/// end as the reader sees it (the last offsets may be transaction markers,
/// which no consumer is handed) or at a record at or past `ends`.
fn read_all(
    consumer: &BaseConsumer,
    ends: &BTreeMap<(String, i32), i64>,
    mut f: impl FnMut(Consumed),
) {
    use rdkafka::error::KafkaError;
    use rdkafka::{Offset, TopicPartitionList};
    let topics: std::collections::BTreeSet<&String> = ends.keys().map(|(t, _)| t).collect();
    let deadline = Instant::now() + Duration::from_secs(900);
    for topic in topics {
        let mut tpl = TopicPartitionList::new();
        let mut left: HashMap<i32, i64> = HashMap::new();
        for ((t, p), high) in ends {
            if t == topic && *high > 0 {
                tpl.add_partition_offset(topic, *p, Offset::Beginning)
                    .expect("assign");
                left.insert(*p, *high);
            }
        }
        if left.is_empty() {
            continue;
        }
        consumer.assign(&tpl).expect("assign");
        while !left.is_empty() {
            assert!(
                Instant::now() < deadline,
                "reading the soak's topics took over 15 minutes"
            );
            let m = match consumer.poll(Duration::from_millis(200)) {
                None => continue,
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    left.remove(&p);
                    continue;
                }
                Some(m) => m.unwrap_or_else(|e| panic!("consumer error: {e}")),
            };
            if left
                .get(&m.partition())
                .is_some_and(|high| m.offset() + 1 >= *high)
            {
                left.remove(&m.partition());
            }
            f(Consumed::from_message(&m));
        }
    }
}

// ---------------------------------------------------------------------------
// The inbox consumer under the soak (docs/reliability.md, "The inbox")
// ---------------------------------------------------------------------------

/// The business table of the inbox's database: one row per apply, with no
/// key on the event id, so an event applied twice shows as two rows; `n`
/// is the apply order (one key's records are applied one at a time, each
/// after the previous one committed, so `n` follows their apply order).
const INBOX_BUSINESS_TABLE: &str = "CREATE TABLE soak_applied (
    n bigserial PRIMARY KEY, event_id uuid NOT NULL, aggregateid text NOT NULL,
    aseq bigint NOT NULL)";

/// The handler: the event's id, its aggregate (the record key) and its
/// commit-order number (`aseq` in the payload, the ledger's `seq`).
const INBOX_HANDLER_SQL: &str = "INSERT INTO soak_applied (event_id, aggregateid, aseq) \
    VALUES ($1::uuid, $2, ($3::jsonb->>'aseq')::bigint)";

#[derive(Debug, Default)]
struct InboxStats {
    starts: usize,
    kills: usize,
    /// Kills after which a partition's inbox held an event at or past the
    /// group's committed offset: the database transaction had committed,
    /// the Kafka offset commit had not (the next instance re-reads it).
    kills_mid_commit: usize,
    /// Kills after which the committed offsets or the inbox could not be
    /// read (the broker stopped, PostgreSQL restarting): not classified.
    kills_unclassified: usize,
    /// Summed over the instances' last `/metrics` scrapes (an instance's
    /// last moments before a kill are not counted: lower bounds).
    applied: u64,
    duplicates: u64,
    retries: u64,
    /// Exits nobody asked for (each restarted), with the log tail.
    exits: Vec<String>,
    final_exit: String,
}

/// `walrelay inbox` (the real binary), restarted after each kill.
struct SoakInbox {
    config_path: PathBuf,
    log_path: PathBuf,
    listen: String,
    group: String,
    database: String,
    topics: Vec<String>,
    child: std::process::Child,
    /// The running instance's last scrape: applied, duplicates, retries.
    last: (u64, u64, u64),
    stats: InboxStats,
}

fn metric_value(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
}

impl SoakInbox {
    fn start(out_dir: &Path, database: &str, topics: &[String]) -> SoakInbox {
        let config_path = out_dir.join("inbox.toml");
        let log_path = config_path.with_extension("log");
        let _ = std::fs::remove_file(&log_path);
        let mut inbox = SoakInbox {
            config_path,
            log_path,
            listen: String::new(),
            group: unique("soak_inbox"),
            database: database.to_owned(),
            topics: topics.to_vec(),
            child: std::process::Command::new("true").spawn().expect("spawn"),
            last: (0, 0, 0),
            stats: InboxStats::default(),
        };
        inbox.spawn();
        inbox
    }

    /// Writes the configuration (a fresh `/metrics` port each time) and
    /// starts the process. Static membership (`group.instance.id`): a
    /// restarted instance takes its partitions back at once instead of
    /// waiting out the killed one's session.
    fn spawn(&mut self) {
        self.listen = free_local_addr();
        let hosts = match pair_ports() {
            Some(ports) => ports
                .iter()
                .map(|p| format!("127.0.0.1:{p}"))
                .collect::<Vec<_>>()
                .join(","),
            None => format!("127.0.0.1:{}", pg_port()),
        };
        let topics: Vec<String> = self.topics.iter().map(|t| format!("\"{t}\"")).collect();
        let config = format!(
            r#"[inbox]
name = "{group}"
topics = [{topics}]
workers = 8
max_in_flight = 2000
commit_interval = "1s"
max_attempts = 5
retry_backoff_initial = "50ms"
retry_backoff_max = "1s"
shutdown_timeout = "20s"

[inbox.kafka]
brokers = "{brokers}"
librdkafka = {{ "session.timeout.ms" = "6000", "heartbeat.interval.ms" = "2000", "group.instance.id" = "{group}-1", "fetch.wait.max.ms" = "100" }}

[inbox.postgres]
url = "postgres://postgres:postgres@{hosts}/{database}?sslmode=disable&target_session_attrs=read-write"

[inbox.handler]
sql = "{sql}"
params = ["id", "key", "value"]

[inbox.health]
listen = "{listen}"
"#,
            group = self.group,
            topics = topics.join(", "),
            brokers = kafka_brokers(),
            database = self.database,
            sql = INBOX_HANDLER_SQL,
            listen = self.listen,
        );
        std::fs::write(&self.config_path, config).expect("write the inbox configuration");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("inbox log");
        self.child = std::process::Command::new(walrelay_bin())
            .args(["inbox", "--config"])
            .arg(&self.config_path)
            .env(
                "WALRELAY_LOG",
                std::env::var("WALRELAY_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start walrelay inbox");
        self.last = (0, 0, 0);
        self.stats.starts += 1;
    }

    /// Reads the running instance's counters.
    fn scrape(&mut self) {
        let text = http_get(&self.listen, "/metrics");
        if let (Some(a), Some(d), Some(r)) = (
            metric_value(&text, "walrelay_inbox_records_applied_total"),
            metric_value(&text, "walrelay_inbox_duplicates_skipped_total"),
            metric_value(&text, "walrelay_inbox_retries_total"),
        ) {
            self.last = (a, d, r);
        }
    }

    /// The instance ended: its last counters into the totals.
    fn ended(&mut self) {
        self.stats.applied += self.last.0;
        self.stats.duplicates += self.last.1;
        self.stats.retries += self.last.2;
        self.last = (0, 0, 0);
    }

    /// Restarts the process if it exited on its own.
    fn check(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(3).collect();
            eprintln!("soak: walrelay inbox exited on its own ({status}); restarting");
            self.stats.exits.push(format!(
                "{} {status}: {}",
                Stamp::now(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ));
            self.ended();
            self.spawn();
        }
    }

    /// `kill -9`, then whether it landed between a database commit and the
    /// offset commit covering it, then a new instance.
    async fn kill9_and_restart(&mut self) {
        self.scrape();
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.ended();
        self.stats.kills += 1;
        match self.mid_commit().await {
            Some(true) => self.stats.kills_mid_commit += 1,
            Some(false) => {}
            None => self.stats.kills_unclassified += 1,
        }
        self.spawn();
    }

    /// `Some(true)`: some partition's inbox holds an event at or past the
    /// group's committed offset (or the group committed nothing there yet).
    async fn mid_commit(&self) -> Option<bool> {
        let client = tokio::time::timeout(Duration::from_secs(5), try_connect(&self.database))
            .await
            .ok()?
            .ok()?;
        let rows = tokio::time::timeout(
            Duration::from_secs(5),
            client.query(
                "SELECT topic, \"partition\", max(\"offset\") FROM inbox GROUP BY 1, 2",
                &[],
            ),
        )
        .await
        .ok()?
        .ok()?;
        let applied: Vec<((String, i32), i64)> = rows
            .iter()
            .map(|r| ((r.get(0), r.get(1)), r.get(2)))
            .collect();
        let (group, topics) = (self.group.clone(), self.topics.clone());
        let committed = tokio::task::spawn_blocking(move || group_offsets(&group, &topics))
            .await
            .ok()??;
        Some(
            applied
                .iter()
                .any(|(tp, max)| committed.get(tp).is_none_or(|c| *max >= *c)),
        )
    }

    /// SIGTERM and the exit status (a clean stop commits the frontier).
    fn stop(&mut self) {
        self.scrape();
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                break s.to_string();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break "no exit within 30 s of SIGTERM (killed)".to_owned();
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.ended();
        self.stats.final_exit = status;
    }
}

impl Drop for SoakInbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The group's committed offsets; `None` when they cannot be read.
fn group_offsets(group: &str, topics: &[String]) -> Option<HashMap<(String, i32), i64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", group)
        .create()
        .ok()?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    for t in topics {
        let md = consumer
            .fetch_metadata(Some(t), Duration::from_secs(5))
            .ok()?;
        for p in md.topics().first()?.partitions() {
            tpl.add_partition(t, p.id());
        }
    }
    let c = consumer
        .committed_offsets(tpl, Duration::from_secs(5))
        .ok()?;
    Some(
        c.elements()
            .iter()
            .filter_map(|e| match e.offset() {
                rdkafka::Offset::Offset(o) => Some(((e.topic().to_owned(), e.partition()), o)),
                _ => None,
            })
            .collect(),
    )
}

/// Kills the inbox -9 at random moments (every `secs` range), restarting
/// it each time, until `stop`; then hands it back.
async fn inbox_chaos(
    mut inbox: SoakInbox,
    seed: u64,
    secs: (u64, u64),
    stop: Arc<AtomicBool>,
) -> SoakInbox {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x1b0c_5eed);
    while !stop.load(Ordering::Relaxed) {
        let wait = Duration::from_millis(rng.random_range(secs.0 * 1000..=secs.1 * 1000));
        let until = Instant::now() + wait;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            inbox.check();
            inbox.scrape();
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        inbox.kill9_and_restart().await;
    }
    inbox
}

/// One row of the business table.
#[derive(Debug, Clone)]
struct AppliedRow {
    n: i64,
    event_id: String,
    aggregate_id: String,
    seq: i64,
}

/// The inbox's end check against the ledger (`soak_committed`).
#[derive(Debug, Default)]
struct InboxVerdict {
    applied_rows: usize,
    /// Ledger events applied exactly once.
    once: usize,
    /// Ledger events never applied.
    missing: Vec<String>,
    /// Events applied more than once.
    doubled: Vec<String>,
    /// Applied events the ledger does not hold.
    phantoms: Vec<String>,
    /// Applied with another aggregate or commit-order number than the
    /// ledger's.
    mismatches: Vec<String>,
    /// Per aggregate, in apply order, a commit-order number not above the
    /// one before.
    order_breaks: Vec<String>,
}

fn check_inbox(committed: &HashMap<String, Committed>, rows: &[AppliedRow]) -> InboxVerdict {
    let mut v = InboxVerdict {
        applied_rows: rows.len(),
        ..InboxVerdict::default()
    };
    let mut times: HashMap<&str, usize> = HashMap::new();
    for r in rows {
        *times.entry(r.event_id.as_str()).or_default() += 1;
        match committed.get(&r.event_id) {
            None => v.phantoms.push(format!("{} (row {})", r.event_id, r.n)),
            Some(c) if c.aggregate_id != r.aggregate_id || c.seq != r.seq => {
                v.mismatches.push(format!(
                    "{}: applied as {} seq {}, committed as {} seq {}",
                    r.event_id, r.aggregate_id, r.seq, c.aggregate_id, c.seq
                ))
            }
            Some(_) => {}
        }
    }
    v.once = times
        .iter()
        .filter(|(id, n)| **n == 1 && committed.contains_key(**id))
        .count();
    for (id, n) in &times {
        if *n > 1 {
            v.doubled.push(format!("{id} applied {n} times"));
        }
    }
    let mut missing: Vec<(f64, String)> = committed
        .iter()
        .filter(|(id, _)| !times.contains_key(id.as_str()))
        .map(|(id, c)| {
            (
                c.committed_at,
                format!(
                    "{id} ({} seq {}, committed {})",
                    c.aggregate_id,
                    c.seq,
                    Stamp(c.committed_at)
                ),
            )
        })
        .collect();
    missing.sort_by(|a, b| a.0.total_cmp(&b.0));
    v.missing = missing.into_iter().map(|(_, s)| s).collect();
    let mut by_agg: BTreeMap<&str, Vec<&AppliedRow>> = BTreeMap::new();
    for r in rows {
        by_agg.entry(r.aggregate_id.as_str()).or_default().push(r);
    }
    for (agg, mut applied) in by_agg {
        applied.sort_by_key(|r| r.n);
        for pair in applied.windows(2) {
            if pair[0].seq >= pair[1].seq {
                v.order_breaks.push(format!(
                    "{agg}: seq {} applied (row {}) before seq {} (row {})",
                    pair[0].seq, pair[0].n, pair[1].seq, pair[1].n
                ));
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------
// The soak
// ---------------------------------------------------------------------------

#[derive(Debug)]
struct CycleRecord {
    fault: Fault,
    detail: String,
    started: chrono_like::Stamp,
    /// From the fault to the service being back (the fault action done).
    outage: Duration,
    /// From the service being back to the slot confirming everything
    /// written up to then.
    catch_up: Duration,
    /// Partition high watermarks once the cycle had caught up.
    marks: BTreeMap<(String, i32), i64>,
}

/// Wall-clock stamps without a date crate: seconds since the epoch, shown as
/// UTC `HH:MM:SS.mmm`, comparable with PostgreSQL's `clock_timestamp()`.
mod chrono_like {
    #[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
    pub struct Stamp(pub f64);
    impl Stamp {
        pub fn now() -> Stamp {
            Stamp(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0),
            )
        }
    }
    impl std::fmt::Display for Stamp {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let s = self.0.rem_euclid(86_400.0);
            let (h, m) = ((s / 3600.0) as u32, ((s % 3600.0) / 60.0) as u32);
            write!(f, "{h:02}:{m:02}:{:06.3}", s % 60.0)
        }
    }
}
use chrono_like::Stamp;

/// The faults of all cycles: every kind once per block (of seven, unless
/// `WALRELAY_SOAK_FAULTS` narrows the kinds), in a random order, so even a
/// short soak covers each kind.
fn schedule(rng: &mut StdRng, cycles: usize, kinds: &[Fault]) -> Vec<Fault> {
    let mut out = Vec::with_capacity(cycles);
    while out.len() < cycles {
        let mut block = kinds.to_vec();
        for i in (1..block.len()).rev() {
            block.swap(i, rng.random_range(0..=i));
        }
        out.extend(block);
    }
    out.truncate(cycles);
    out
}

// ---------------------------------------------------------------------------
// The end check (pure: unit-tested below without services)
// ---------------------------------------------------------------------------

/// One committed event, as `soak_committed` holds it.
#[derive(Debug, Clone)]
struct Committed {
    aggregate_type: String,
    aggregate_id: String,
    /// Position in its aggregate's commit order.
    seq: i64,
    payload: String,
    writer: i32,
    /// Seconds since the epoch (insert time, just before the commit).
    committed_at: f64,
}

/// The numbers the soak reports; lists name the events for the evidence.
#[derive(Debug, Default)]
struct Verdict {
    records: usize,
    distinct: usize,
    dup_identical: usize,
    /// Later copies an incremental snapshot published (header
    /// `walrelay.snapshot`): same topic, key and value, other headers.
    snapshot_copies: usize,
    dup_differing: Vec<String>,
    phantoms: Vec<String>,
    rolled_back_seen: usize,
    mismatches: Vec<String>,
    /// Duplicates per cycle (1-based; `marks.len() + 1` = after the last mark).
    dups_by_cycle: BTreeMap<usize, usize>,
    lost: Vec<String>,
    order_breaks: Vec<String>,
    /// Events an incremental snapshot published (header `walrelay.snapshot`).
    snapshot_ids: std::collections::HashSet<String>,
}

/// Checks Kafka's records, streamed in partition order, against the
/// committed events.
struct Check<'a, T: Fn(&str) -> String> {
    committed: &'a HashMap<String, Committed>,
    rolled_back: &'a std::collections::HashSet<String>,
    /// Per cycle, each partition's high watermark once it had caught up.
    marks: &'a [BTreeMap<(String, i32), i64>],
    topic_of: T,
    first: HashMap<String, Consumed>,
    v: Verdict,
}

impl<'a, T: Fn(&str) -> String> Check<'a, T> {
    fn new(
        committed: &'a HashMap<String, Committed>,
        rolled_back: &'a std::collections::HashSet<String>,
        marks: &'a [BTreeMap<(String, i32), i64>],
        topic_of: T,
    ) -> Self {
        Check {
            committed,
            rolled_back,
            marks,
            topic_of,
            first: HashMap::new(),
            v: Verdict::default(),
        }
    }

    fn cycle_of(&self, rec: &Consumed) -> usize {
        let key = (rec.topic.clone(), rec.partition);
        self.marks
            .iter()
            .position(|m| m.get(&key).is_some_and(|high| rec.offset < *high))
            .map_or(self.marks.len() + 1, |i| i + 1)
    }

    fn add(&mut self, rec: Consumed) {
        let v = &mut self.v;
        v.records += 1;
        let at = format!("{}[{}]@{}", rec.topic, rec.partition, rec.offset);
        let Some(id) = rec.header_str("id") else {
            v.phantoms.push(format!("record without id at {at}"));
            return;
        };
        if rec.header_str("walrelay.snapshot").is_some() {
            v.snapshot_ids.insert(id.clone());
        }
        let Some(c) = self.committed.get(&id) else {
            if self.rolled_back.contains(&id) {
                v.rolled_back_seen += 1;
            }
            v.phantoms.push(format!("{id} at {at}"));
            return;
        };
        if let Some(prev) = self.first.get(&id) {
            if rec.header_str("walrelay.snapshot").is_some() {
                // An incremental snapshot re-reads rows still in the table:
                // its copy carries the snapshot's headers, the same event.
                if (&prev.topic, prev.partition, &prev.key, &prev.value)
                    == (&rec.topic, rec.partition, &rec.key, &rec.value)
                {
                    self.v.snapshot_copies += 1;
                } else {
                    self.v.dup_differing.push(format!(
                        "{id}: snapshot copy at {at} differs from the first {}[{}]@{}",
                        prev.topic, prev.partition, prev.offset
                    ));
                }
                return;
            }
            let same = (
                &prev.topic,
                prev.partition,
                &prev.key,
                &prev.value,
                &prev.headers,
            ) == (
                &rec.topic,
                rec.partition,
                &rec.key,
                &rec.value,
                &rec.headers,
            );
            if same {
                self.v.dup_identical += 1;
            } else {
                self.v.dup_differing.push(format!(
                    "{id}: first {}[{}]@{} {:?}, copy at {at} {:?}",
                    prev.topic, prev.partition, prev.offset, prev.headers, rec.headers
                ));
            }
            let cycle = self.cycle_of(&rec);
            *self.v.dups_by_cycle.entry(cycle).or_default() += 1;
            return;
        }
        if rec.topic != (self.topic_of)(&c.aggregate_type)
            || rec.key.as_deref() != Some(c.aggregate_id.as_bytes())
            || rec.value.as_deref() != Some(c.payload.as_bytes())
        {
            v.mismatches.push(format!(
                "{id} at {at}: key {:?} value {:?}",
                rec.key.as_deref().map(String::from_utf8_lossy),
                rec.value.as_deref().map(String::from_utf8_lossy)
            ));
        }
        self.first.insert(id, rec);
    }

    /// Lost events (with the last fault before each commit, from `starts`:
    /// (epoch seconds, description) in time order) and order breaks.
    fn finish(mut self, starts: &[(f64, String)]) -> Verdict {
        let mut lost: Vec<(f64, String)> = self
            .committed
            .iter()
            .filter(|(id, _)| !self.first.contains_key(*id))
            .map(|(id, c)| {
                let after = match starts.iter().rposition(|(t, _)| *t <= c.committed_at) {
                    Some(i) => format!("after cycle {} ({})", i + 1, starts[i].1),
                    None => "before the first fault".to_owned(),
                };
                (
                    c.committed_at,
                    format!(
                        "{id} ({} seq {}, writer {}, committed {} {after})",
                        c.aggregate_id,
                        c.seq,
                        c.writer,
                        Stamp(c.committed_at)
                    ),
                )
            })
            .collect();
        lost.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.v.lost = lost.into_iter().map(|(_, s)| s).collect();

        // Per aggregate: one partition, and by offset the first copies carry
        // increasing commit-order numbers.
        let mut by_agg: BTreeMap<&str, Vec<(&Consumed, i64)>> = BTreeMap::new();
        for (id, rec) in &self.first {
            if let Some(c) = self.committed.get(id) {
                by_agg
                    .entry(c.aggregate_id.as_str())
                    .or_default()
                    .push((rec, c.seq));
            }
        }
        for (agg, mut recs) in by_agg {
            let parts: std::collections::BTreeSet<(&str, i32)> = recs
                .iter()
                .map(|(r, _)| (r.topic.as_str(), r.partition))
                .collect();
            if parts.len() > 1 {
                self.v
                    .order_breaks
                    .push(format!("{agg} spread over {parts:?}"));
                continue;
            }
            recs.sort_by_key(|(r, _)| r.offset);
            for pair in recs.windows(2) {
                let ((a, sa), (b, sb)) = (pair[0], pair[1]);
                if sa >= sb {
                    self.v.order_breaks.push(format!(
                        "{agg}: seq {sa} at offset {} before seq {sb} at offset {} ({}[{}])",
                        a.offset, b.offset, a.topic, a.partition
                    ));
                }
            }
        }
        self.v.distinct = self.first.len();
        self.v
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "stops and restarts its services: run it with deploy/soak.sh"]
async fn fault_soak() {
    let params = Params::from_env();
    std::fs::create_dir_all(&params.out_dir).expect("soak output dir");
    eprintln!("soak: {params:?}");
    require_kafka();
    let kafka_port = kafka_brokers()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut rng = StdRng::seed_from_u64(params.seed);

    let db = TestDb::new("soak").await;
    db.create_outbox("outbox").await;
    let agg_values: Vec<String> = (0..AGGREGATES).map(|a| format!("('agg-{a}', 0)")).collect();
    db.client
        .batch_execute(&format!(
            "CREATE TABLE soak_agg (agg text PRIMARY KEY, seq bigint NOT NULL);
             INSERT INTO soak_agg VALUES {};
             CREATE TABLE soak_committed (
                 id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
                 seq bigint NOT NULL, payload jsonb NOT NULL, writer int NOT NULL,
                 committed_at timestamptz NOT NULL DEFAULT clock_timestamp());",
            agg_values.join(",")
        ))
        .await
        .expect("soak tables");
    let names = Names::new("soak");
    let topics = vec![names.topic("order"), names.topic("invoice")];
    let config_path = params.out_dir.join("walrelay.toml");
    let _ = std::fs::remove_file(config_path.with_extension("log"));
    let extra = if params.rdkafka_debug.is_empty() {
        String::new()
    } else {
        format!(
            "[kafka.librdkafka]\n\"debug\" = \"{}\"\n",
            params.rdkafka_debug
        )
    };
    // Small chunks, so that an incremental snapshot of the outbox spans
    // many of them and a kill lands in the middle.
    let extra = format!("{extra}[snapshot]\nchunk_rows = 200\n");
    let mut config = relay_config(&db, &names, "", &extra);
    if params.exactly_once {
        config = config.replace("[kafka]\n", "[kafka]\ndelivery = \"exactly_once\"\n");
    }
    if let Some(ports) = pair_ports() {
        // Both servers of the pair: walrelay follows the primary.
        let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        assert!(config.contains("host = \"127.0.0.1\"\n"));
        config = config.replace(
            "host = \"127.0.0.1\"\n",
            &format!("host = \"{}\"\n", hosts.join(",")),
        );
    }
    std::fs::write(&config_path, config).expect("write config");
    let mut sup = Supervised::start(&config_path);
    sup.relay
        .wait_log("streaming", Duration::from_secs(120))
        .await;

    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(WriterStats::default());
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            tokio::spawn(writer(
                i32::try_from(w).unwrap_or(0),
                db.name.clone(),
                params.seed,
                params.writer_pause,
                stop.clone(),
                stats.clone(),
            ))
        })
        .collect();

    let kafka = reader("soak_marks");
    // The inbox consumer: a database of its own (on the same server, so the
    // soak's PostgreSQL restarts reach it too), started once both topics
    // exist, then killed -9 at random moments until the end.
    let inbox_stop = Arc::new(AtomicBool::new(false));
    let mut inbox_db: Option<TestDb> = None;
    let mut inbox_task = None;
    if params.inbox {
        let idb = TestDb::new("soak_inbox").await;
        idb.client
            .batch_execute(INBOX_BUSINESS_TABLE)
            .await
            .expect("the inbox's business table");
        wait_for("the soak's topics", Duration::from_secs(120), || async {
            let marks = high_watermarks(&kafka, &topics)?;
            topics
                .iter()
                .all(|t| marks.keys().any(|(x, _)| x == t))
                .then_some(())
        })
        .await;
        let inbox = SoakInbox::start(&params.out_dir, &idb.name, &topics);
        inbox_task = Some(tokio::spawn(inbox_chaos(
            inbox,
            params.seed,
            params.inbox_kill_secs,
            inbox_stop.clone(),
        )));
        inbox_db = Some(idb);
    }
    let pg_env = [("PG_MAJOR", params.pg_major.as_str())];
    // On a pair (`--pair`) the restarts and the promotion go through its script
    // (PAIR_NAME and PAIR_PORTS come from deploy/soak.sh's environment).
    let pg_script = if pair_ports().is_some() {
        "deploy/dev/pg_pair.sh"
    } else {
        "deploy/dev/postgres.sh"
    };
    let kafka_env = [("KAFKA_PORT", kafka_port.as_str())];
    let mut cycles: Vec<CycleRecord> = Vec::new();
    // `(cycle, the outbox's ids just before the request)` of every
    // incremental snapshot asked for.
    let mut snapshot_requests: Vec<(usize, std::collections::HashSet<String>)> = Vec::new();
    let mut term_unclean: Vec<String> = Vec::new();
    let mut stall: Option<String> = None;
    let mut drain_note = String::new();
    let soak_start = Instant::now();

    for (i, fault) in schedule(&mut rng, params.cycles, &params.faults)
        .into_iter()
        .enumerate()
    {
        let cycle = i + 1;
        let load = rng.random_range(params.load_secs.0..=params.load_secs.1);
        tokio::time::sleep(Duration::from_secs(load)).await;
        sup.check(cycle);
        let started = Stamp::now();
        let mut detail = String::new();
        match fault {
            Fault::Kill9 => {
                sup.relay.kill9();
                sup.restart();
            }
            Fault::Term => {
                sup.relay.signal("TERM");
                match sup.relay.wait_exit(Duration::from_secs(30)) {
                    Some(s) if s.success() => {}
                    Some(s) => term_unclean.push(format!("cycle {cycle}: {s}")),
                    None => {
                        sup.relay.kill9();
                        term_unclean.push(format!("cycle {cycle}: no exit within 30 s"));
                    }
                }
                sup.restart();
            }
            Fault::BrokerStop => {
                let secs = rng.random_range(params.outage_secs.0..=params.outage_secs.1);
                detail = format!("{secs}s");
                run_script("deploy/dev/kafka.sh", &kafka_env, &["stop"]);
                tokio::time::sleep(Duration::from_secs(secs)).await;
                run_script("deploy/dev/kafka.sh", &kafka_env, &["start"]);
            }
            Fault::PgRestartFast => {
                run_script(pg_script, &pg_env, &["restart-fast"]);
            }
            Fault::PgRestartImmediate => {
                run_script(pg_script, &pg_env, &["restart-immediate"]);
            }
            Fault::Promote => {
                // A failover loses the slot unless the standby has a copy:
                // wait for it (what an operator checks before promoting).
                let synced = wait_for(
                    "the standby to synchronize walrelay's failover slot",
                    // A rebuilt standby persists its copy only once the
                    // slot's restart_lsn passes the standby's start: up to
                    // a minute or two of walrelay confirming.
                    Duration::from_secs(300),
                    || async {
                        let standby = connect_standby().await?;
                        let row = standby
                            .query_opt(
                                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots \
                                 WHERE slot_name = $1 AND synced AND NOT temporary",
                                &[&names.slot],
                            )
                            .await
                            .ok()??;
                        row.get::<_, Option<String>>(0)
                    },
                )
                .await;
                run_script(pg_script, &pg_env, &["stop-primary"]);
                run_script(pg_script, &pg_env, &["promote"]);
                run_script(pg_script, &pg_env, &["rebuild-standby"]);
                detail = format!("slot synced at {synced}");
            }
            Fault::IncrementalSnapshot => {
                snapshot_requests.push((cycle, outbox_ids(&db.name).await));
                request_outbox_snapshot(&config_path);
                let wait = rng.random_range(200..3000u64);
                detail = format!("kill -9 {wait} ms after the request");
                tokio::time::sleep(Duration::from_millis(wait)).await;
                sup.relay.kill9();
                sup.restart();
            }
            Fault::Ddl => {
                // In the middle of an incremental snapshot: asked for now,
                // the rewrite a moment later, its lock held 2 s.
                snapshot_requests.push((cycle, outbox_ids(&db.name).await));
                request_outbox_snapshot(&config_path);
                let wait = rng.random_range(100..1500u64);
                tokio::time::sleep(Duration::from_millis(wait)).await;
                // A connection of its own: an earlier fault may have ended
                // the test's (a PostgreSQL restart, a promotion).
                let sql = format!(
                    "BEGIN; ALTER TABLE outbox ADD COLUMN IF NOT EXISTS soak_ddl_{cycle} float8 \
                     DEFAULT random(); SELECT pg_sleep(2); COMMIT"
                );
                wait_for("the DDL on the outbox", Duration::from_secs(60), || {
                    let (database, sql) = (db.name.clone(), sql.clone());
                    async move {
                        let client = try_connect(&database).await.ok()?;
                        client.batch_execute(&sql).await.ok()
                    }
                })
                .await;
                detail = format!("table rewritten {wait} ms into a snapshot");
            }
            Fault::SecondInstance => {
                let mut first = sup.start_second();
                sup.relay
                    .wait_log(
                        "standby: another instance of this connector holds the lease",
                        Duration::from_secs(60),
                    )
                    .await;
                let wait = rng.random_range(0..2000u64);
                detail = format!("first killed {wait} ms after the second became a standby");
                tokio::time::sleep(Duration::from_millis(wait)).await;
                first.kill9();
            }
            Fault::WalsenderTerminate => {
                // The walsender may be between sessions: wait for one.
                let pid = wait_for(
                    "a walsender serving the slot",
                    Duration::from_secs(60),
                    || async { slot_state(&db.name, &names.slot).await.and_then(|s| s.1) },
                )
                .await;
                let admin = connect_retry("postgres").await;
                admin
                    .execute("SELECT pg_terminate_backend($1)", &[&pid])
                    .await
                    .expect("pg_terminate_backend");
                detail = format!("pid {pid}");
            }
        }
        // Caught up: the slot has confirmed everything written up to now,
        // so the re-sent tail (if any) is in Kafka.
        let recovered = Stamp::now();
        let target = current_lsn(&db.name).await;
        let deadline = Instant::now() + params.catch_up;
        let mut last = None;
        loop {
            sup.check(cycle);
            if let Some((confirmed, _)) = slot_state(&db.name, &names.slot).await {
                last = Some(confirmed);
                if confirmed >= target {
                    break;
                }
            }
            if Instant::now() > deadline {
                stall = Some(format!(
                    "cycle {cycle} ({}): the slot did not reach {target:X} within {:?} (last \
                     confirmed {:X?}); walrelay log: {}",
                    fault.name(),
                    params.catch_up,
                    last,
                    sup.relay.log_path.display()
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let outage = Duration::from_secs_f64(recovered.0 - started.0);
        let catch_up = Duration::from_secs_f64(Stamp::now().0 - recovered.0);
        let marks = wait_for(
            "partition high watermarks",
            Duration::from_secs(60),
            || async { high_watermarks(&kafka, &topics) },
        )
        .await;
        eprintln!(
            "soak: cycle {cycle}/{} {} {detail} at {started}: back after {outage:.1?}, \
             caught up {catch_up:.1?} later ({} commits so far)",
            params.cycles,
            fault.name(),
            stats.commits.load(Ordering::Relaxed)
        );
        cycles.push(CycleRecord {
            fault,
            detail,
            started,
            outage,
            catch_up,
            marks,
        });
        if stall.is_some() {
            break;
        }
    }

    // Drain: writers stop, the relay confirms everything, then stops cleanly.
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("writer task");
    }
    let end = current_lsn(&db.name).await;
    if stall.is_some() {
        // The stall fails the soak already. Restart walrelay (what an
        // operator would do) so the end check tells a stuck relay, whose
        // events a restart still delivers, from events that are gone.
        eprintln!("soak: stalled; restarting walrelay to drain before the end check");
        let status = sup.relay.stop();
        drain_note = format!("after the stall walrelay was restarted ({status} on SIGTERM)");
        sup.restart();
    }
    let deadline = Instant::now() + CATCH_UP_DEADLINE;
    loop {
        sup.check(params.cycles + 1);
        match slot_state(&db.name, &names.slot).await {
            Some((c, _)) if c >= end => break,
            _ if Instant::now() > deadline => {
                stall.get_or_insert(format!(
                    "final drain: the slot did not reach {end:X} within {CATCH_UP_DEADLINE:?}"
                ));
                drain_note.push_str("; the final drain did not finish either");
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    // The incremental snapshots asked for end before the check.
    let mut snapshot_end = None;
    if !snapshot_requests.is_empty() {
        let deadline = Instant::now() + CATCH_UP_DEADLINE;
        loop {
            sup.check(params.cycles + 1);
            // Every instance's log (a second instance logs to a file of its
            // own): the newest lines by their timestamps.
            let newest = |needle: &str| last_logged(&sup.relay.log_path, needle);
            let asked = newest("signal: incremental snapshot requested");
            let completed = newest("incremental snapshot completed");
            let gave_up = newest("incremental snapshot ended with tables given up");
            if completed.clone().max(gave_up.clone()) > asked {
                if gave_up > completed {
                    snapshot_end = Some("the last incremental snapshot gave tables up".to_owned());
                }
                break;
            }
            if Instant::now() > deadline {
                snapshot_end = Some(format!(
                    "the last incremental snapshot did not end within {CATCH_UP_DEADLINE:?}"
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let final_exit = sup.relay.stop();
    let elapsed = soak_start.elapsed();
    let outbox_at_end = outbox_ids(&db.name).await;

    // Ground truth: the committed events.
    let client = connect_retry(&db.name).await;
    let committed: HashMap<String, Committed> = client
        .query(
            "SELECT id::text, aggregatetype, aggregateid, seq, payload::text, writer,
                    extract(epoch FROM committed_at)::float8 FROM soak_committed",
            &[],
        )
        .await
        .expect("read soak_committed")
        .iter()
        .map(|r| {
            (
                r.get::<_, String>(0),
                Committed {
                    aggregate_type: r.get(1),
                    aggregate_id: r.get(2),
                    seq: r.get(3),
                    payload: r.get(4),
                    writer: r.get(5),
                    committed_at: r.get(6),
                },
            )
        })
        .collect();
    let rolled_back: std::collections::HashSet<String> = stats
        .rolled_back_ids
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .collect();

    // The inbox: no more kills; it applies the rest, then stops cleanly.
    let mut inbox_end = None;
    if let (Some(task), Some(idb)) = (inbox_task, &inbox_db) {
        inbox_stop.store(true, Ordering::Relaxed);
        let mut inbox = task.await.expect("inbox task");
        let drain_start = Instant::now();
        let iclient = connect_retry(&idb.name).await;
        let mut inbox_stall = None;
        loop {
            inbox.check();
            inbox.scrape();
            let applied: i64 = iclient
                .query_one("SELECT count(DISTINCT event_id) FROM soak_applied", &[])
                .await
                .expect("count soak_applied")
                .get(0);
            if usize::try_from(applied).unwrap_or(0) >= committed.len() {
                break;
            }
            if drain_start.elapsed() > CATCH_UP_DEADLINE {
                inbox_stall = Some(format!(
                    "the inbox applied {applied} of {} events within {CATCH_UP_DEADLINE:?} \
                     of the end; its log: {}",
                    committed.len(),
                    inbox.log_path.display()
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let drain = drain_start.elapsed();
        inbox.stop();
        let rows: Vec<AppliedRow> = iclient
            .query(
                "SELECT n, event_id::text, aggregateid, aseq FROM soak_applied",
                &[],
            )
            .await
            .expect("read soak_applied")
            .iter()
            .map(|r| AppliedRow {
                n: r.get(0),
                event_id: r.get(1),
                aggregate_id: r.get(2),
                seq: r.get(3),
            })
            .collect();
        let quarantined: i64 = iclient
            .query_one("SELECT count(*) FROM inbox_quarantine", &[])
            .await
            .expect("count inbox_quarantine")
            .get(0);
        let verdict = check_inbox(&committed, &rows);
        let stats = std::mem::take(&mut inbox.stats);
        inbox_end = Some((
            verdict,
            quarantined,
            stats,
            inbox_stall,
            drain,
            inbox.log_path.clone(),
        ));
    }

    // Everything in Kafka, in one pass.
    let ends = wait_for(
        "partition high watermarks",
        Duration::from_secs(60),
        || async { high_watermarks(&kafka, &topics) },
    )
    .await;
    let marks: Vec<BTreeMap<(String, i32), i64>> = cycles.iter().map(|c| c.marks.clone()).collect();
    let starts: Vec<(f64, String)> = cycles
        .iter()
        .map(|c| (c.started.0, format!("{} at {}", c.fault.name(), c.started)))
        .collect();
    let mut check = Check::new(&committed, &rolled_back, &marks, |t| names.topic(t));
    read_all(&reader("soak_verify"), &ends, |rec| check.add(rec));
    let Verdict {
        records,
        distinct,
        dup_identical,
        snapshot_copies,
        dup_differing,
        phantoms,
        rolled_back_seen,
        mismatches,
        dups_by_cycle,
        lost,
        order_breaks,
        snapshot_ids,
    } = check.finish(&starts);
    // Every row that existed when an incremental snapshot was asked for and
    // still exists was read by one (issue 38: a rewrite once ended a
    // table's snapshot early, silently).
    let mut incomplete = Vec::new();
    let mut requested_rows = 0;
    for (cycle, at_request) in &snapshot_requests {
        let expected: Vec<&String> = at_request
            .iter()
            .filter(|id| outbox_at_end.contains(*id))
            .collect();
        requested_rows += expected.len();
        let missing: Vec<&&String> = expected
            .iter()
            .filter(|id| !snapshot_ids.contains(**id))
            .collect();
        if !missing.is_empty() {
            incomplete.push(format!(
                "cycle {cycle}: {} of {} rows in the table at the request and at the end were \
                 never read by an incremental snapshot (e.g. {})",
                missing.len(),
                expected.len(),
                missing
                    .iter()
                    .take(3)
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }

    // Report.
    let duplicates = dup_identical + dup_differing.len();
    // Per kind: count, duplicates, catch-up times.
    let mut faults_by_kind: BTreeMap<Fault, (usize, usize, Vec<f64>)> = BTreeMap::new();
    for (i, c) in cycles.iter().enumerate() {
        let e = faults_by_kind.entry(c.fault).or_default();
        e.0 += 1;
        e.1 += dups_by_cycle.get(&(i + 1)).copied().unwrap_or(0);
        e.2.push(c.catch_up.as_secs_f64());
    }
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut report = String::new();
    let _ = writeln!(
        report,
        "walrelay fault soak: {} of {} cycles in {:.0?}, seed {}, PostgreSQL {}, {} writers, \
         load {}-{} s, broker outages {}-{} s",
        cycles.len(),
        params.cycles,
        elapsed,
        params.seed,
        params.pg_major,
        WRITERS,
        params.load_secs.0,
        params.load_secs.1,
        params.outage_secs.0,
        params.outage_secs.1
    );
    let _ = writeln!(
        report,
        "writers: {} commits ({} insert-then-delete), {} rollbacks ({} rows), {} cleanup deletes, \
         {} failed transactions, {} connects",
        n(&stats.commits),
        n(&stats.insert_then_delete),
        n(&stats.rollbacks),
        rolled_back.len(),
        n(&stats.cleanup_deletes),
        n(&stats.failed),
        n(&stats.reconnects)
    );
    let _ = writeln!(
        report,
        "committed events {}, records in Kafka {records}, distinct events {}, lost {}, \
         order breaks {}, duplicates {duplicates} (identical {dup_identical}, differing {}), \
         incremental snapshot copies {snapshot_copies}, \
         phantoms {} (rolled-back rows among them {rolled_back_seen}), mismatches {}",
        committed.len(),
        distinct,
        lost.len(),
        order_breaks.len(),
        dup_differing.len(),
        phantoms.len(),
        mismatches.len()
    );
    let _ = writeln!(
        report,
        "{:<22} {:>6} {:>11} {:>11} {:>15} {:>15}",
        "fault", "count", "duplicates", "dups/fault", "median catch-up", "max catch-up"
    );
    for (fault, (count, dups, times)) in &mut faults_by_kind {
        times.sort_by(f64::total_cmp);
        let _ = writeln!(
            report,
            "{:<22} {:>6} {:>11} {:>11.1} {:>14.1}s {:>14.1}s",
            fault.name(),
            count,
            dups,
            *dups as f64 / (*count).max(1) as f64,
            times
                .get(times.len().saturating_sub(1) / 2)
                .copied()
                .unwrap_or(0.0),
            times.last().copied().unwrap_or(0.0)
        );
    }
    let final_dups = dups_by_cycle.get(&(cycles.len() + 1)).copied().unwrap_or(0);
    let _ = writeln!(
        report,
        "duplicates after the last catch-up (final drain): {final_dups}; overall {:.1} per fault",
        duplicates as f64 / cycles.len().max(1) as f64
    );
    let _ = writeln!(
        report,
        "walrelay exits nobody asked for: {}; SIGTERM exits not clean: {}; final SIGTERM: {final_exit}",
        sup.unexpected_exits.len(),
        term_unclean.len()
    );
    for e in sup.unexpected_exits.iter().chain(&term_unclean) {
        let _ = writeln!(report, "  {e}");
    }
    let list = |report: &mut String, what: &str, items: &[String]| {
        if !items.is_empty() {
            let _ = writeln!(report, "{what} (first 20 of {}):", items.len());
            for it in items.iter().take(20) {
                let _ = writeln!(report, "  {it}");
            }
        }
    };
    let lost_text = lost;
    list(&mut report, "LOST", &lost_text);
    list(&mut report, "ORDER BREAKS", &order_breaks);
    list(&mut report, "DIFFERING DUPLICATES", &dup_differing);
    list(&mut report, "PHANTOMS", &phantoms);
    list(&mut report, "MISMATCHES", &mismatches);
    let _ = writeln!(
        report,
        "incremental snapshots: {} asked for, {requested_rows} rows to read (in the table at the \
         request and at the end), {} incomplete{}",
        snapshot_requests.len(),
        incomplete.len(),
        snapshot_end
            .as_deref()
            .map_or(String::new(), |e| format!("; {e}"))
    );
    list(&mut report, "INCOMPLETE INCREMENTAL SNAPSHOTS", &incomplete);
    if let Some(s) = &stall {
        let _ = writeln!(report, "STALL: {s}");
        let _ = writeln!(report, "  {drain_note}");
    }
    let _ = writeln!(report, "cycles:");
    for (i, c) in cycles.iter().enumerate() {
        let _ = writeln!(
            report,
            "  {:>3} {} {:<21} {:<9} back after {:>5.1}s, caught up {:>5.1}s later, duplicates {}",
            i + 1,
            c.started,
            c.fault.name(),
            c.detail,
            c.outage.as_secs_f64(),
            c.catch_up.as_secs_f64(),
            dups_by_cycle.get(&(i + 1)).copied().unwrap_or(0)
        );
    }
    let _ = writeln!(report, "walrelay log: {}", sup.relay.log_path.display());
    let mut inbox_failed = false;
    let mut inbox_summary = String::from(" inbox=off");
    if let Some((v, quarantined, st, inbox_stall, drain, log)) = &inbox_end {
        inbox_failed = !v.missing.is_empty()
            || !v.doubled.is_empty()
            || !v.phantoms.is_empty()
            || !v.mismatches.is_empty()
            || !v.order_breaks.is_empty()
            || *quarantined != 0
            || inbox_stall.is_some();
        let _ = writeln!(
            report,
            "inbox (walrelay inbox, 8 workers, killed -9 every {}-{} s): {} kills ({} between a \
             database commit and its offset commit, {} not classified while a service was \
             down), {} starts, {} exits nobody asked for; final SIGTERM: {}; drained {:.1?} \
             after walrelay",
            params.inbox_kill_secs.0,
            params.inbox_kill_secs.1,
            st.kills,
            st.kills_mid_commit,
            st.kills_unclassified,
            st.starts,
            st.exits.len(),
            st.final_exit,
            drain
        );
        let _ = writeln!(
            report,
            "inbox: ledger events {}, business rows {}, applied once {}, missing {}, applied twice {}, phantoms {}, \
             mismatches {}, order breaks {}, quarantined {quarantined}; counted by the instances \
             (at least): applied {}, duplicates skipped {}, retries {}",
            committed.len(),
            v.applied_rows,
            v.once,
            v.missing.len(),
            v.doubled.len(),
            v.phantoms.len(),
            v.mismatches.len(),
            v.order_breaks.len(),
            st.applied,
            st.duplicates,
            st.retries
        );
        for e in &st.exits {
            let _ = writeln!(report, "  inbox exit: {e}");
        }
        list(&mut report, "INBOX MISSING", &v.missing);
        list(&mut report, "INBOX APPLIED TWICE", &v.doubled);
        list(&mut report, "INBOX PHANTOMS", &v.phantoms);
        list(&mut report, "INBOX MISMATCHES", &v.mismatches);
        list(&mut report, "INBOX ORDER BREAKS", &v.order_breaks);
        if let Some(s) = inbox_stall {
            let _ = writeln!(report, "INBOX STALL: {s}");
        }
        let _ = writeln!(report, "inbox log: {}", log.display());
        inbox_summary = format!(
            " inbox_applied_once={} inbox_missing={} inbox_twice={} inbox_order_breaks={} \
             inbox_quarantined={quarantined} inbox_dups_skipped={} inbox_kills={} \
             inbox_kills_mid_commit={}",
            v.once,
            v.missing.len(),
            v.doubled.len(),
            v.order_breaks.len(),
            st.duplicates,
            st.kills,
            st.kills_mid_commit
        );
    }
    // exactly_once: a read_committed reader sees each event once.
    let failed = !lost_text.is_empty()
        || (params.exactly_once && duplicates > 0)
        || !order_breaks.is_empty()
        || !dup_differing.is_empty()
        || !phantoms.is_empty()
        || !mismatches.is_empty()
        || stall.is_some()
        || inbox_failed
        || !incomplete.is_empty()
        || snapshot_end.is_some()
        || committed.is_empty();
    let summary = format!(
        "SOAK {}: delivery={} cycles={} committed={} in_kafka={} lost={} order_breaks={} duplicates={} \
         differing={} phantoms={} kills={} dup_per_kill={:.1} unexpected_exits={}{inbox_summary}",
        if failed { "FAIL" } else { "PASS" },
        if params.exactly_once {
            "exactly_once"
        } else {
            "at_least_once"
        },
        cycles.len(),
        committed.len(),
        distinct,
        lost_text.len(),
        order_breaks.len(),
        duplicates,
        dup_differing.len(),
        phantoms.len(),
        faults_by_kind
            .iter()
            .map(|(f, (c, _, _))| format!("{}:{c}", f.name()))
            .collect::<Vec<_>>()
            .join(","),
        duplicates as f64 / cycles.len().max(1) as f64,
        sup.unexpected_exits.len()
    );
    let _ = writeln!(report, "{summary}");
    std::fs::write(params.out_dir.join("report.txt"), &report).expect("write report");
    println!("{report}");
    assert!(
        !failed,
        "{summary}\nsee {}",
        params.out_dir.join("report.txt").display()
    );
}

/// The outbox's ids now (a connection of its own, retried: a fault may
/// have restarted the server).
async fn outbox_ids(database: &str) -> std::collections::HashSet<String> {
    wait_for("the outbox's ids", Duration::from_secs(60), || async {
        let client = try_connect(database).await.ok()?;
        let rows = client
            .query("SELECT id::text FROM outbox", &[])
            .await
            .ok()?;
        Some(rows.iter().map(|r| r.get::<_, String>(0)).collect())
    })
    .await
}

/// The timestamp (RFC 3339, as walrelay's text log writes it; sorts as
/// text) of the newest line containing `needle` in any walrelay log beside
/// `log_path` (`walrelay*.log`).
fn last_logged(log_path: &Path, needle: &str) -> Option<String> {
    let dir = log_path.parent()?;
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("walrelay") && name.ends_with(".log")
        })
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .flat_map(|text| {
            text.lines()
                .filter(|l| l.contains(needle))
                .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .max()
}

/// `walrelay snapshot --table public.outbox`.
fn request_outbox_snapshot(config_path: &Path) {
    let out = std::process::Command::new(walrelay_bin())
        .args(["snapshot", "--config"])
        .arg(config_path)
        .args(["--table", "public.outbox"])
        .output()
        .expect("run walrelay snapshot");
    assert!(
        out.status.success(),
        "walrelay snapshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The end check itself, on hand-made records: each defect it must catch.
mod check_tests {
    use super::*;

    fn committed(rows: &[(&str, &str, i64)]) -> HashMap<String, Committed> {
        rows.iter()
            .map(|(id, agg, seq)| {
                (
                    (*id).to_owned(),
                    Committed {
                        aggregate_type: "order".into(),
                        aggregate_id: (*agg).into(),
                        seq: *seq,
                        payload: format!("{{\"id\": \"{id}\"}}"),
                        writer: 0,
                        committed_at: *seq as f64,
                    },
                )
            })
            .collect()
    }

    fn rec(id: &str, agg: &str, partition: i32, offset: i64) -> Consumed {
        Consumed {
            topic: "t.order".into(),
            partition,
            offset,
            key: Some(agg.as_bytes().to_vec()),
            value: Some(format!("{{\"id\": \"{id}\"}}").into_bytes()),
            headers: vec![
                ("id".into(), id.as_bytes().to_vec()),
                ("walrelay.lsn".into(), b"0/10".to_vec()),
            ],
            timestamp: None,
        }
    }

    fn run(
        c: &HashMap<String, Committed>,
        marks: &[BTreeMap<(String, i32), i64>],
        recs: Vec<Consumed>,
    ) -> Verdict {
        let rolled_back = ["r1".to_owned()].into_iter().collect();
        let mut check = Check::new(c, &rolled_back, marks, |t| format!("t.{t}"));
        for r in recs {
            check.add(r);
        }
        check.finish(&[(0.5, "kill-9".into())])
    }

    fn applied(rows: &[(i64, &str, &str, i64)]) -> Vec<AppliedRow> {
        rows.iter()
            .map(|(n, id, agg, seq)| AppliedRow {
                n: *n,
                event_id: (*id).into(),
                aggregate_id: (*agg).into(),
                seq: *seq,
            })
            .collect()
    }

    #[test]
    fn the_inbox_check_passes_each_event_once_in_order_and_names_every_defect() {
        let c = committed(&[("a", "agg-1", 1), ("b", "agg-1", 2), ("c", "agg-2", 1)]);
        let v = check_inbox(
            &c,
            &applied(&[
                (1, "c", "agg-2", 1),
                (2, "a", "agg-1", 1),
                (3, "b", "agg-1", 2),
            ]),
        );
        assert_eq!(v.once, 3, "{v:?}");
        assert!(v.missing.is_empty() && v.doubled.is_empty() && v.phantoms.is_empty());
        assert!(
            v.mismatches.is_empty() && v.order_breaks.is_empty(),
            "{v:?}"
        );
        // Applied twice, one missing, one unknown, out of order, wrong seq.
        let v = check_inbox(
            &c,
            &applied(&[
                (1, "b", "agg-1", 2),
                (2, "a", "agg-1", 1),
                (3, "a", "agg-1", 1),
                (4, "zz", "agg-3", 1),
            ]),
        );
        assert_eq!(v.doubled.len(), 1, "{v:?}");
        assert_eq!(v.missing.len(), 1, "{v:?}");
        assert!(v.missing[0].starts_with("c (agg-2 seq 1"), "{v:?}");
        assert_eq!(v.phantoms.len(), 1, "{v:?}");
        assert_eq!(v.order_breaks.len(), 2, "b before a, and a after a: {v:?}");
        assert_eq!(v.once, 1, "{v:?}");
        let v = check_inbox(&c, &applied(&[(1, "a", "agg-1", 7)]));
        assert_eq!(v.mismatches.len(), 1, "{v:?}");
    }

    #[test]
    fn a_clean_run_with_an_identical_duplicate_passes() {
        let c = committed(&[("a", "agg-1", 1), ("b", "agg-1", 2), ("c", "agg-2", 1)]);
        let marks = [BTreeMap::from([(("t.order".to_owned(), 0), 3)])];
        let v = run(
            &c,
            &marks,
            vec![
                rec("a", "agg-1", 0, 0),
                rec("c", "agg-2", 0, 1),
                rec("a", "agg-1", 0, 2), // re-sent in cycle 1
                rec("b", "agg-1", 0, 3), // after the mark
                rec("b", "agg-1", 0, 4), // re-sent after the last mark
            ],
        );
        assert!(v.lost.is_empty() && v.order_breaks.is_empty(), "{v:?}");
        assert!(v.dup_differing.is_empty() && v.phantoms.is_empty() && v.mismatches.is_empty());
        assert_eq!((v.records, v.distinct, v.dup_identical), (5, 3, 2));
        assert_eq!(v.dups_by_cycle, BTreeMap::from([(1, 1), (2, 1)]));
    }

    #[test]
    fn a_missing_event_is_lost_and_named() {
        let c = committed(&[("a", "agg-1", 1), ("b", "agg-1", 2)]);
        let v = run(&c, &[], vec![rec("a", "agg-1", 0, 0)]);
        assert_eq!(v.lost.len(), 1, "{v:?}");
        assert!(v.lost[0].starts_with("b (agg-1 seq 2"), "{:?}", v.lost);
        assert!(v.lost[0].contains("after cycle 1 (kill-9)"), "{:?}", v.lost);
    }

    #[test]
    fn an_aggregate_out_of_commit_order_is_an_order_break() {
        let c = committed(&[("a", "agg-1", 1), ("b", "agg-1", 2)]);
        let v = run(
            &c,
            &[],
            vec![rec("b", "agg-1", 0, 0), rec("a", "agg-1", 0, 1)],
        );
        assert_eq!(v.order_breaks.len(), 1, "{v:?}");
        // Only first copies count: a re-sent older event is no break.
        let v = run(
            &c,
            &[],
            vec![
                rec("a", "agg-1", 0, 0),
                rec("b", "agg-1", 0, 1),
                rec("a", "agg-1", 0, 2),
            ],
        );
        assert!(v.order_breaks.is_empty(), "{v:?}");
        // One aggregate on two partitions breaks per-aggregate order too.
        let v = run(
            &c,
            &[],
            vec![rec("a", "agg-1", 0, 0), rec("b", "agg-1", 1, 0)],
        );
        assert_eq!(v.order_breaks.len(), 1, "{v:?}");
    }

    #[test]
    fn a_duplicate_that_differs_in_any_header_is_reported() {
        let c = committed(&[("a", "agg-1", 1)]);
        let mut copy = rec("a", "agg-1", 0, 1);
        copy.headers[1].1 = b"0/20".to_vec();
        let v = run(&c, &[], vec![rec("a", "agg-1", 0, 0), copy]);
        assert_eq!((v.dup_identical, v.dup_differing.len()), (0, 1), "{v:?}");
    }

    #[test]
    fn rolled_back_and_unknown_records_are_phantoms_and_wrong_content_a_mismatch() {
        let c = committed(&[("a", "agg-1", 1)]);
        let mut wrong = rec("a", "agg-2", 0, 0);
        wrong.value = Some(b"{}".to_vec());
        let v = run(
            &c,
            &[],
            vec![wrong, rec("r1", "agg-1", 0, 1), rec("zz", "agg-1", 0, 2)],
        );
        assert_eq!((v.phantoms.len(), v.rolled_back_seen), (2, 1), "{v:?}");
        assert_eq!(v.mismatches.len(), 1, "{v:?}");
    }
}
