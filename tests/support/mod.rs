//! Shared support for integration tests against the real services.
//!
//! Connection settings come from the environment that the service scripts
//! print (`deploy/dev/postgres.sh env`, `deploy/dev/kafka.sh env`), with the
//! scripts' fixed defaults when unset. Every test gets fresh names (database,
//! slot, topic) so tests can run in parallel and re-runs never collide.
//!
//! A service that is not reachable is a test failure whose message names the
//! script to run — never a silent skip, in CI or anywhere else.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod ce_reader;
pub mod ledger;
pub mod message_load;
pub mod pair;
pub mod row_load;
pub mod runbook;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use tokio_postgres::{Client, NoTls};

pub fn env_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

pub fn pg_major() -> String {
    env_or("WALRELAY_PG_MAJOR", "18")
}

/// A file the dev script made for the TLS tests (`ca.pem`, `other-ca.pem`).
pub fn pg_tls_file(name: &str) -> std::path::PathBuf {
    let dir = env_or(
        "WALRELAY_PG_TLS_DIR",
        &format!("{}/.state/pg{}/tls", env!("CARGO_MANIFEST_DIR"), pg_major()),
    );
    let path = std::path::Path::new(&dir).join(name);
    assert!(
        path.is_file(),
        "{} is missing: the dev cluster predates TLS support; recreate it with \
         `deploy/dev/postgres.sh down && deploy/dev/postgres.sh up`",
        path.display()
    );
    path
}

pub fn pg_port() -> u16 {
    env_or("WALRELAY_PG_PORT", &format!("543{}", pg_major()))
        .parse()
        .expect("WALRELAY_PG_PORT")
}

pub fn pg_superuser_url(database: &str) -> String {
    format!(
        "postgres://postgres:postgres@127.0.0.1:{}/{database}",
        pg_port()
    )
}

pub fn kafka_brokers() -> String {
    env_or("WALRELAY_KAFKA_BROKERS", "127.0.0.1:19092")
}

/// How long a walrelay process may take to start (or to refuse to) on a
/// busy machine.
pub const START: Duration = Duration::from_secs(60);

/// The secured dev broker's settings (`deploy/dev/kafka.sh` prints them
/// as `WALRELAY_KAFKA_*`); unset, they follow from the PLAINTEXT broker's port
/// the way the script derives them.
#[derive(Debug, Clone)]
pub struct SecuredKafka {
    /// SASL_SSL listener (SCRAM-SHA-512).
    pub sasl_ssl: String,
    /// SSL listener requiring a client certificate.
    pub mtls: String,
    /// SSL listener whose certificate names another host.
    pub wrong_host: String,
    /// The dev CA and the certificates (`ca.pem`, `client.pem`, ...).
    pub tls_dir: std::path::PathBuf,
}

impl SecuredKafka {
    pub fn from_env() -> SecuredKafka {
        let plain = kafka_brokers();
        let (host, port) = plain
            .rsplit_once(':')
            .expect("WALRELAY_KAFKA_BROKERS is host:port");
        let port: u16 = port.parse().expect("WALRELAY_KAFKA_BROKERS port");
        let state = if port == 19092 {
            "kafka".to_owned()
        } else {
            format!("kafka-{port}")
        };
        let at = |offset: u16| format!("{host}:{}", port + offset);
        let secured = SecuredKafka {
            sasl_ssl: env_or("WALRELAY_KAFKA_SASL_SSL_BROKERS", &at(2)),
            mtls: env_or("WALRELAY_KAFKA_MTLS_BROKERS", &at(3)),
            wrong_host: env_or("WALRELAY_KAFKA_WRONG_HOST_BROKERS", &at(4)),
            tls_dir: env_or(
                "WALRELAY_KAFKA_TLS_DIR",
                &format!("{}/.state/{state}/tls", env!("CARGO_MANIFEST_DIR")),
            )
            .into(),
        };
        assert!(
            secured.tls_dir.join("ca.pem").is_file(),
            "{} has no ca.pem: the dev broker predates its secured listeners; recreate it \
             with `deploy/dev/kafka.sh down && deploy/dev/kafka.sh up`",
            secured.tls_dir.display()
        );
        secured
    }

    /// A file of the dev TLS material, as a string for a config file.
    pub fn file(&self, name: &str) -> String {
        self.tls_dir.join(name).display().to_string()
    }
}

/// A name unique to this test run: `prefix_<pid>_<n>_<rand>`, lower case,
/// valid as a database, slot and topic name.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}_{}_{n}_{:x}", std::process::id(), nanos & 0xffff)
}

/// Polls `f` until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pg_unreachable(e: &dyn std::fmt::Display) -> ! {
    panic!(
        "PostgreSQL {} is not reachable at 127.0.0.1:{}: {e}\n\
         Start it with `PG_MAJOR={} deploy/dev/postgres.sh up`, or run the whole suite with `deploy/test.sh`.",
        pg_major(),
        pg_port(),
        pg_major()
    )
}

/// A superuser connection to `database`. A refusal by the server (too
/// many clients for a moment, a server starting up) is retried for up to
/// 15 s, then reported with the server's message.
pub async fn pg_connect(database: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(15);
    let (client, conn) = loop {
        match tokio_postgres::connect(&pg_superuser_url(database), NoTls).await {
            Ok(c) => break c,
            // The server answered: say what it said ("db error" alone hides
            // e.g. "too many clients" or a database that does not exist).
            Err(e) => match e.as_db_error() {
                Some(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Some(db) => panic!(
                    "PostgreSQL {} at 127.0.0.1:{} refused a connection to {database}: {} (SQLSTATE {})",
                    pg_major(),
                    pg_port(),
                    db.message(),
                    db.code().code()
                ),
                None => pg_unreachable(&e),
            },
        }
    };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A fresh database owned by the `walrelay` role. Dropped — with its
/// replication slots, which would otherwise pin WAL and use up
/// `max_replication_slots` — when the test ends, even on failure.
pub struct TestDb {
    pub name: String,
    pub client: Client,
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Drop cannot be async: use psql, which the service scripts install.
        let db = &self.name;
        // Separate -c commands: DROP DATABASE cannot run in the implicit
        // transaction of a multi-statement string.
        let _ = std::process::Command::new("psql")
            .args(["-X", "-q", "-h", "127.0.0.1", "-p", &pg_port().to_string()])
            .args(["-U", "postgres", "-d", "postgres"])
            .args([
                "-c",
                &format!(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
                 WHERE database = '{db}' AND active_pid IS NOT NULL"
                ),
            ])
            .args(["-c", "SELECT pg_sleep(0.2)"])
            .args([
                "-c",
                &format!(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                 WHERE database = '{db}' AND NOT active"
                ),
            ])
            .args(["-c", &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")])
            .env("PGPASSWORD", "postgres")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl TestDb {
    pub async fn new(prefix: &str) -> TestDb {
        let name = unique(prefix);
        let admin = pg_connect("postgres").await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name} OWNER walrelay"))
            .await
            .expect("create test database");
        let client = pg_connect(&name).await;
        TestDb { name, client }
    }

    /// Creates a Debezium-style outbox table owned by `walrelay`.
    pub async fn create_outbox(&self, table: &str) {
        self.client
            .batch_execute(&format!(
                "CREATE TABLE {table} (
                    id uuid PRIMARY KEY,
                    aggregatetype text NOT NULL,
                    aggregateid text,
                    type text NOT NULL,
                    payload jsonb,
                    created_at timestamptz NOT NULL DEFAULT now());
                 ALTER TABLE {table} OWNER TO walrelay;"
            ))
            .await
            .expect("create outbox table");
    }

    /// `confirmed_flush_lsn` of a slot, as u64.
    pub async fn confirmed_flush(&self, slot: &str) -> Option<u64> {
        let row = self
            .client
            .query_opt(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .expect("read slot");
        row.and_then(|r| r.get::<_, Option<String>>(0))
            .map(|t| parse_lsn(&t))
    }

    /// Waits (up to `timeout`, failing with `what`) until `slot` has
    /// confirmed `lsn`.
    pub async fn wait_confirmed(&self, slot: &str, lsn: u64, what: &str, timeout: Duration) {
        wait_for(what, timeout, || async {
            (self.confirmed_flush(slot).await? >= lsn).then_some(())
        })
        .await
    }

    pub async fn current_wal_lsn(&self) -> u64 {
        let row = self
            .client
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .expect("lsn");
        parse_lsn(&row.get::<_, String>(0))
    }
}

pub fn parse_lsn(t: &str) -> u64 {
    let (hi, lo) = t.split_once('/').expect("lsn text");
    (u64::from_str_radix(hi, 16).expect("hi") << 32) | u64::from_str_radix(lo, 16).expect("lo")
}

/// One consumed Kafka record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub timestamp: Option<i64>,
}

impl Consumed {
    pub fn from_message(m: &rdkafka::message::BorrowedMessage<'_>) -> Consumed {
        let headers = m
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| {
                        (
                            h.key.to_owned(),
                            h.value.map(<[u8]>::to_vec).unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Consumed {
            topic: m.topic().to_owned(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
            timestamp: m.timestamp().to_millis(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }
    pub fn header_str(&self, name: &str) -> Option<String> {
        self.header(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }
}

fn kafka_unreachable(e: &dyn std::fmt::Display) -> ! {
    panic!(
        "Kafka is not reachable at {}: {e}\n\
         Start it with `deploy/dev/kafka.sh up`, or run the whole suite with `deploy/test.sh`.",
        kafka_brokers()
    )
}

/// Fails fast, with the script to run, when the broker does not answer.
pub fn require_kafka() {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .unwrap_or_else(|e| kafka_unreachable(&e));
    if let Err(e) = consumer.fetch_metadata(None, Duration::from_secs(10)) {
        kafka_unreachable(&e);
    }
}

/// Reads topics from the beginning until `expected` records arrived (or
/// `timeout` passed), then keeps reading `settle` longer to catch extras.
pub fn consume(
    topics: &[&str],
    expected: usize,
    timeout: Duration,
    settle: Duration,
) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", unique("test_reader"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .unwrap_or_else(|e| kafka_unreachable(&e));
    consumer.subscribe(topics).expect("subscribe");
    let mut out = Vec::new();
    // Counted by event id, not records: re-sent duplicates must not end the
    // wait before every distinct event has arrived.
    let mut ids = std::collections::HashSet::new();
    let mut positions = std::collections::HashSet::new();
    let deadline = Instant::now() + timeout;
    let mut settle_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if let Some(s) = settle_until {
            if now > s {
                break;
            }
        } else if ids.len() >= expected {
            settle_until = Some(now + settle);
        } else if now > deadline {
            break;
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            // Subscribing to a topic that is not created yet is normal.
            Some(Err(e)) if e.to_string().contains("Unknown topic") => {}
            Some(Err(e)) => eprintln!("consumer error: {e}"),
            Some(Ok(m)) => {
                let rec = Consumed::from_message(&m);
                // A group rebalance (a topic created after the subscription,
                // e.g. the second outbox topic) resets the partitions to
                // `earliest`, as nothing is committed: the same record read
                // again is not a duplicate that walrelay sent.
                if !positions.insert((rec.topic.clone(), rec.partition, rec.offset)) {
                    continue;
                }
                ids.insert(match rec.header("id") {
                    Some(id) => id.to_vec(),
                    None => format!("{}/{}/{}", rec.topic, rec.partition, rec.offset).into_bytes(),
                });
                out.push(rec);
            }
        }
    }
    out
}

/// Path of the walrelay binary built for these tests.
pub fn walrelay_bin() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_walrelay"))
}

/// Names of one test connector: database, slot, publication, topic prefix.
#[derive(Debug, Clone)]
pub struct Names {
    pub connector: String,
    pub slot: String,
    pub publication: String,
    /// Topic template; records land on `<prefix>.<aggregatetype>`.
    pub topic_prefix: String,
}

impl Names {
    pub fn new(prefix: &str) -> Names {
        let base = unique(prefix);
        Names {
            connector: base.clone(),
            slot: format!("{base}_slot"),
            publication: format!("{base}_pub"),
            topic_prefix: format!("{base}.ev"),
        }
    }

    pub fn topic(&self, aggregate_type: &str) -> String {
        format!("{}.{aggregate_type}", self.topic_prefix)
    }
}

/// A connector config for a test database: its `[connector]`, `[postgres]`
/// (the test's slot and publication, quick status updates and reconnects)
/// and `[kafka]` sections (quick batching), then `rest`.
pub fn connector_config(db: &TestDb, names: &Names, rest: &str) -> String {
    format!(
        r#"
[connector]
name = "{connector}"

[postgres]
host = "127.0.0.1"
port = {port}
user = "walrelay"
password = "walrelay"
database = "{db}"
slot = "{slot}"
publication = "{publication}"
status_interval = "200ms"
reconnect_backoff_initial = "100ms"
reconnect_backoff_max = "2s"

[kafka]
brokers = "{brokers}"
linger = "2ms"
shutdown_flush_timeout = "10s"

{rest}"#,
        connector = names.connector,
        port = pg_port(),
        db = db.name,
        slot = names.slot,
        publication = names.publication,
        brokers = kafka_brokers(),
    )
}

/// A connector config for a test database's `public.outbox`;
/// `extra_outbox` is appended to the `[[outbox]]` section, `extra` at the
/// end.
pub fn relay_config(db: &TestDb, names: &Names, extra_outbox: &str, extra: &str) -> String {
    connector_config(
        db,
        names,
        &format!(
            "[[outbox]]\ntable = \"public.outbox\"\ntopic = \"{prefix}.{{aggregatetype}}\"\n\
             {extra_outbox}\n{extra}\n",
            prefix = names.topic_prefix,
        ),
    )
}

/// A walrelay process started from the real binary.
pub struct RelayProcess {
    pub child: std::process::Child,
    pub log_path: std::path::PathBuf,
    pub config_path: std::path::PathBuf,
    /// Where this process's output starts in `log_path`: a restart on the
    /// same config appends to the earlier processes' log.
    pub log_start: usize,
}

impl RelayProcess {
    /// Writes `config` to a temporary file and starts `walrelay run` on it.
    pub fn start(config: &str, extra_args: &[&str]) -> RelayProcess {
        let dir = std::env::temp_dir().join(unique("walrelay_test"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let config_path = dir.join("walrelay.toml");
        std::fs::write(&config_path, config).expect("write config");
        Self::start_with(&config_path, extra_args)
    }

    /// Starts `walrelay run` on an existing config file (appending to its log).
    pub fn start_with(config_path: &std::path::Path, extra_args: &[&str]) -> RelayProcess {
        Self::start_with_env(config_path, extra_args, &[])
    }

    /// [`RelayProcess::start_with`] with extra environment variables.
    pub fn start_with_env(
        config_path: &std::path::Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> RelayProcess {
        let log_path = config_path.with_extension("log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("log file");
        let log_start = log.metadata().map_or(0, |m| m.len() as usize);
        eprintln!("walrelay log: {}", log_path.display());
        let child = std::process::Command::new(walrelay_bin())
            .arg("run")
            .arg("--config")
            .arg(config_path)
            .args(extra_args)
            .env(
                "WALRELAY_LOG",
                std::env::var("WALRELAY_TEST_LOG").unwrap_or_else(|_| "info,walrelay=debug".into()),
            )
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start walrelay");
        RelayProcess {
            child,
            log_path,
            config_path: config_path.to_owned(),
            log_start,
        }
    }

    /// The whole log file: this process's output after its predecessors' on
    /// the same config.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// What this process has written to the log (not its predecessors).
    pub fn own_log(&self) -> String {
        let log = std::fs::read(&self.log_path).unwrap_or_default();
        String::from_utf8_lossy(log.get(self.log_start..).unwrap_or_default()).into_owned()
    }

    pub fn signal(&self, sig: &str) {
        let _ = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status();
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit; `None` on timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the process to exit with `code`; returns its log.
    pub fn expect_exit(&mut self, code: i32, timeout: Duration) -> String {
        let status = self
            .wait_exit(timeout)
            .unwrap_or_else(|| panic!("walrelay still running after {timeout:?}:\n{}", self.log()));
        assert_eq!(
            status.code(),
            Some(code),
            "exit status; log:\n{}",
            self.log()
        );
        self.log()
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        match self.wait_exit(Duration::from_secs(30)) {
            Some(s) => s,
            None => {
                self.kill9();
                panic!(
                    "walrelay did not stop within 30 s of SIGTERM; log:\n{}",
                    self.log()
                );
            }
        }
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until this process has logged `needle` (a line an earlier
    /// process on the same config wrote does not count: a restarted
    /// instance has not started streaming because its predecessor did).
    pub async fn wait_log(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.own_log().contains(needle) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "walrelay did not log {needle:?} within {timeout:?}; log:\n{}",
                    self.log()
                );
            }
            if !self.is_running() {
                panic!(
                    "walrelay exited before logging {needle:?}; log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        if self.is_running() {
            self.kill9();
        }
        // A failed test's walrelay log is gone with CI's machine: its tail
        // goes to the test's output.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            eprintln!(
                "--- last {} lines of {} ---\n{}\n---",
                tail.len(),
                self.log_path.display(),
                tail.join("\n")
            );
        }
    }
}

/// One outbox row as the database holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    pub id: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub payload: String,
}

/// All rows of `public.outbox`, by id.
pub async fn outbox_rows(db: &TestDb) -> std::collections::HashMap<String, OutboxRow> {
    rows_of(&db.client, "outbox").await
}

/// All rows of `table` (an outbox table, or one with its columns), by id.
pub async fn rows_of(client: &Client, table: &str) -> std::collections::HashMap<String, OutboxRow> {
    client
        .query(
            &format!("SELECT id::text, aggregatetype, aggregateid, payload::text FROM {table}"),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("read {table}: {e}"))
        .iter()
        .map(|r| {
            let row = OutboxRow {
                id: r.get(0),
                aggregate_type: r.get(1),
                aggregate_id: r.get(2),
                payload: r.get(3),
            };
            (row.id.clone(), row)
        })
        .collect()
}

/// Concurrent writers: `writers` tasks insert `total` rows in transactions of
/// 1..=10 rows over `aggregates` aggregate ids (`agg-N`), types `order` and
/// `invoice`. Each payload holds `{"w": writer, "s": sequence}`, increasing
/// per writer. `pause` sleeps between transactions to spread the load.
pub async fn write_outbox_load(
    db_name: &str,
    writers: usize,
    total: usize,
    aggregates: usize,
    pause: Duration,
) {
    use rand::{RngExt, SeedableRng};
    let per_writer = total / writers;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let db_name = db_name.to_owned();
        let rows = if w == writers - 1 {
            total - per_writer * (writers - 1)
        } else {
            per_writer
        };
        tasks.push(tokio::spawn(async move {
            let client = pg_connect(&db_name).await;
            let mut seq = 0usize;
            let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64 + u64::from(std::process::id()));
            while seq < rows {
                let n = rng.random_range(1..=10usize).min(rows - seq);
                let mut sql = String::from(
                    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ",
                );
                for i in 0..n {
                    let agg = rng.random_range(0..aggregates);
                    let kind = if agg % 3 == 0 { "invoice" } else { "order" };
                    if i > 0 {
                        sql.push(',');
                    }
                    sql.push_str(&format!(
                        "(gen_random_uuid(), '{kind}', 'agg-{agg}', 'Created', '{{\"w\": {w}, \"s\": {s}, \"pad\": \"{pad}\"}}')",
                        s = seq + i,
                        pad = "x".repeat(64),
                    ));
                }
                client.batch_execute(&format!("BEGIN; {sql}; COMMIT")).await.expect("insert");
                seq += n;
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer task");
    }
}

/// Writers committing outbox rows until stopped.
pub struct Writers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Writers {
    pub fn start(db: &TestDb) -> Writers {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn({
            let db_name = db.name.clone();
            let stop = stop.clone();
            async move {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    write_outbox_load(&db_name, 2, 40, 10, Duration::from_millis(20)).await;
                }
            }
        });
        Writers { stop, task }
    }

    pub async fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.await.unwrap();
    }
}

/// Waits until a `read_committed` reader holds every outbox row, then
/// checks each one arrived exactly once, identical, in commit order per
/// aggregate. Returns the number of records.
pub async fn verify_exactly_once(db: &TestDb, names: &Names) -> usize {
    let rows = outbox_rows(db).await;
    let topics = [names.topic("order"), names.topic("invoice")];
    let consumed = wait_for(
        "every row committed in Kafka",
        Duration::from_secs(240),
        || {
            let rows = &rows;
            let topics = &topics;
            async move {
                let got = consume_committed(&[topics[0].as_str(), topics[1].as_str()]);
                let ids: std::collections::HashSet<String> =
                    got.iter().filter_map(|r| r.header_str("id")).collect();
                rows.keys().all(|id| ids.contains(id)).then_some(got)
            }
        },
    )
    .await;
    let duplicates = verify_outbox_delivery(names, &rows, &consumed);
    if duplicates > 0 {
        let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for r in &consumed {
            *seen.entry(r.header_str("id").unwrap()).or_default() += 1;
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
        panic!(
            "{duplicates} duplicates reached a read_committed consumer (e.g. {twice:?}); \
             exactly_once commits each event once"
        );
    }
    consumed.len()
}

/// Checks a consumed set against the database rows: every row arrived, on
/// the right topic with the right key, `id` header and value; duplicates are
/// byte-identical; and per aggregate the partition order is commit order.
/// Returns the number of duplicates.
pub fn verify_outbox_delivery(
    names: &Names,
    rows: &std::collections::HashMap<String, OutboxRow>,
    consumed: &[Consumed],
) -> usize {
    use std::collections::HashMap;
    let mut first: HashMap<String, &Consumed> = HashMap::new();
    let mut duplicates = 0;
    for rec in consumed {
        let id = rec
            .header_str("id")
            .unwrap_or_else(|| panic!("record without id header: {rec:?}"));
        let row = rows
            .get(&id)
            .unwrap_or_else(|| panic!("record {id} is not an outbox row: {rec:?}"));
        assert_eq!(rec.topic, names.topic(&row.aggregate_type), "topic of {id}");
        assert_eq!(
            rec.key.as_deref(),
            Some(row.aggregate_id.as_bytes()),
            "key of {id}"
        );
        assert_eq!(
            rec.value.as_deref(),
            Some(row.payload.as_bytes()),
            "value of {id}"
        );
        assert!(
            rec.header_str("walrelay.lsn").is_some(),
            "walrelay.lsn header of {id}"
        );
        match first.get(&id) {
            None => {
                first.insert(id, rec);
            }
            Some(prev) => {
                duplicates += 1;
                assert_eq!(
                    (
                        &prev.topic,
                        &prev.key,
                        &prev.value,
                        &prev.headers,
                        prev.partition
                    ),
                    (
                        &rec.topic,
                        &rec.key,
                        &rec.value,
                        &rec.headers,
                        rec.partition
                    ),
                    "a re-sent event must be identical to its first copy"
                );
            }
        }
    }
    let missing: Vec<&String> = rows.keys().filter(|id| !first.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} events never arrived:\n{}",
        missing.len(),
        rows.len(),
        describe_missing(rows, &missing, &first)
    );

    // Per aggregate: one partition, and first copies in commit order
    // (commit LSN, then the writer's sequence within the transaction).
    let mut by_agg: HashMap<&str, Vec<&Consumed>> = HashMap::new();
    for rec in first.values() {
        let agg = std::str::from_utf8(rec.key.as_deref().unwrap_or_default()).unwrap_or_default();
        by_agg.entry(agg).or_default().push(rec);
    }
    for (agg, mut recs) in by_agg {
        let partitions: std::collections::HashSet<(String, i32)> = recs
            .iter()
            .map(|r| (r.topic.clone(), r.partition))
            .collect();
        assert_eq!(
            partitions.len(),
            1,
            "aggregate {agg} is spread over {partitions:?}"
        );
        recs.sort_by_key(|r| r.offset);
        let order: Vec<(u64, i64)> = recs
            .iter()
            .map(|r| {
                let lsn = parse_lsn(&r.header_str("walrelay.lsn").unwrap_or_default());
                let v: serde_json::Value =
                    serde_json::from_slice(r.value.as_deref().unwrap_or_default()).expect("json");
                (lsn, v["s"].as_i64().unwrap_or(-1))
            })
            .collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(
            order, sorted,
            "aggregate {agg}: partition order differs from commit order"
        );
    }
    duplicates
}

/// For a failure message: each missing event (writer and sequence from its
/// payload) next to the records that did arrive just before and after it
/// from the same writer, with their commit LSN and partition offset. A whole
/// missing transaction (same LSN gap, consecutive sequences) points at the
/// relay; scattered events on one partition point at the producer or broker.
fn describe_missing(
    rows: &std::collections::HashMap<String, OutboxRow>,
    missing: &[&String],
    first: &std::collections::HashMap<String, &Consumed>,
) -> String {
    use std::collections::BTreeMap;
    let ws = |payload: &[u8]| -> (i64, i64) {
        let v: serde_json::Value = serde_json::from_slice(payload).unwrap_or_default();
        (v["w"].as_i64().unwrap_or(-1), v["s"].as_i64().unwrap_or(-1))
    };
    // (writer, seq) -> arrived record
    let arrived: BTreeMap<(i64, i64), &Consumed> = first
        .values()
        .map(|r| (ws(r.value.as_deref().unwrap_or_default()), *r))
        .collect();
    let show = |key: (i64, i64)| match arrived.get(&key) {
        Some(r) => format!(
            "w{} s{} lsn {} {}[{}]@{}",
            key.0,
            key.1,
            r.header_str("walrelay.lsn").unwrap_or_default(),
            r.topic,
            r.partition,
            r.offset
        ),
        None => format!("w{} s{} missing", key.0, key.1),
    };
    let mut lost: Vec<(i64, i64, &str)> = missing
        .iter()
        .map(|id| {
            let (w, s) = ws(rows[*id].payload.as_bytes());
            (w, s, rows[*id].aggregate_id.as_str())
        })
        .collect();
    lost.sort();
    lost.iter()
        .take(20)
        .map(|(w, s, agg)| {
            format!(
                "  w{w} s{s} ({agg}) between [{}] and [{}]",
                show((*w, s - 1)),
                show((*w, s + 1))
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A partition's watermarks, asked again while the partition has no leader
/// yet (a topic created a moment ago answers NotLeaderForPartition or
/// LeaderNotAvailable until its leader is elected), for at most 30 s.
fn watermarks(consumer: &BaseConsumer, topic: &str, partition: i32) -> (i64, i64) {
    use rdkafka::error::RDKafkaErrorCode::{
        LeaderNotAvailable, NotLeaderForPartition, UnknownTopicOrPartition,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match consumer.fetch_watermarks(topic, partition, Duration::from_secs(10)) {
            Ok(w) => return w,
            Err(e)
                if Instant::now() < deadline
                    && matches!(
                        e.rdkafka_error_code(),
                        Some(NotLeaderForPartition | LeaderNotAvailable | UnknownTopicOrPartition)
                    ) =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => kafka_unreachable(&e),
        }
    }
}

/// The first copy of each record in `consumed`, in partition order (by
/// topic, `walrelay.event_id` and whether it is a tombstone, which shares
/// its delete's id), after checking that every later copy is identical to
/// it (on the same partition, unless its key is null); and how many later
/// copies there were.
pub fn first_copies(consumed: &[Consumed]) -> (Vec<&Consumed>, usize) {
    let mut sorted: Vec<&Consumed> = consumed.iter().collect();
    sorted
        .sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    let mut first: std::collections::HashMap<(&str, String, bool), &Consumed> =
        std::collections::HashMap::new();
    let mut out = Vec::new();
    let mut copies = 0;
    for c in sorted {
        let id = c
            .header_str("walrelay.event_id")
            .expect("walrelay.event_id");
        match first.entry((c.topic.as_str(), id, c.value.is_some())) {
            std::collections::hash_map::Entry::Occupied(f) => {
                copies += 1;
                let f = f.get();
                // A null key has no partition of its own (librdkafka picks
                // one at random), so only keyed copies must share theirs.
                let partition = |c: &Consumed| c.key.as_ref().map(|_| c.partition);
                assert_eq!(
                    (&f.key, &f.value, &f.headers, partition(f)),
                    (&c.key, &c.value, &c.headers, partition(c)),
                    "a re-sent copy on {} differs from the first",
                    c.topic
                );
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(c);
                out.push(c);
            }
        }
    }
    (out, copies)
}

/// Records currently in `topics` (sum of high minus low watermarks); a topic
/// that does not exist yet holds none. Retries while a partition that is
/// being created does not answer yet.
pub fn records_in<T: AsRef<str>>(topics: &[T]) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("consumer");
    let deadline = Instant::now() + Duration::from_secs(60);
    'retry: loop {
        let mut total = 0;
        for topic in topics {
            let topic = topic.as_ref();
            let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) else {
                continue;
            };
            for t in md
                .topics()
                .iter()
                .filter(|t| t.name() == topic && t.error().is_none())
            {
                for p in t.partitions() {
                    match consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(10)) {
                        Ok((low, high)) => total += high - low,
                        Err(e) => {
                            assert!(
                                Instant::now() < deadline,
                                "watermarks of {topic} [{}]: {e}",
                                p.id()
                            );
                            std::thread::sleep(Duration::from_millis(100));
                            continue 'retry;
                        }
                    }
                }
            }
        }
        return total;
    }
}

/// Reads every record currently in `topics` (up to each partition's high
/// watermark at the time of the call). Deterministic, unlike a subscription.
/// Topics that do not exist yet contribute nothing.
pub fn consume_to_end(topics: &[&str]) -> Vec<Consumed> {
    use rdkafka::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", unique("test_reader"))
        .set("enable.auto.commit", "false")
        .set("allow.auto.create.topics", "false")
        .create()
        .unwrap_or_else(|e| kafka_unreachable(&e));
    let mut tpl = TopicPartitionList::new();
    let mut ends = std::collections::HashMap::new();
    for topic in topics {
        let md = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap_or_else(|e| kafka_unreachable(&e));
        for t in md
            .topics()
            .iter()
            .filter(|t| t.name() == *topic && t.error().is_none())
        {
            for p in t.partitions() {
                let (low, high) = watermarks(&consumer, topic, p.id());
                if high > low {
                    tpl.add_partition_offset(topic, p.id(), Offset::Offset(low))
                        .expect("assign");
                    ends.insert((topic.to_string(), p.id()), high);
                }
            }
        }
    }
    let mut out = Vec::new();
    if ends.is_empty() {
        return out;
    }
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ends.is_empty() {
        assert!(
            Instant::now() < deadline,
            "reading to the end took over 120 s"
        );
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.unwrap_or_else(|e| panic!("consumer error: {e}"));
        let key = (m.topic().to_owned(), m.partition());
        if let Some(high) = ends.get(&key)
            && m.offset() + 1 >= *high
        {
            ends.remove(&key);
        }
        out.push(Consumed::from_message(&m));
    }
    out
}

/// What a `read_committed` consumer reads of `topics` now: every record of
/// a committed Kafka transaction (or written outside one), never one of an
/// aborted or open transaction. Reads each partition to its end as such a
/// consumer sees it (partition EOF: the last stable offset), since its last
/// offsets may be transaction markers that no consumer is ever handed (or,
/// on a busy partition, to the first record past where it ended when the
/// read began).
pub fn consume_committed(topics: &[&str]) -> Vec<Consumed> {
    topics
        .iter()
        .flat_map(|topic| consume_committed_topic(topic))
        .collect()
}

/// [`consume_committed`] of one topic (partition EOF names no topic).
fn consume_committed_topic(topic: &str) -> Vec<Consumed> {
    use rdkafka::error::KafkaError;
    use rdkafka::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", unique("test_committed_reader"))
        .set("enable.auto.commit", "false")
        .set("allow.auto.create.topics", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap_or_else(|e| kafka_unreachable(&e));
    let mut tpl = TopicPartitionList::new();
    // Partition -> high watermark when the read began.
    let mut open = std::collections::HashMap::new();
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap_or_else(|e| kafka_unreachable(&e));
    for t in md
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
    {
        for p in t.partitions() {
            let (low, high) = watermarks(&consumer, topic, p.id());
            if high > low {
                tpl.add_partition_offset(topic, p.id(), Offset::Offset(low))
                    .expect("assign");
                open.insert(p.id(), high);
            }
        }
    }
    let mut out = Vec::new();
    if open.is_empty() {
        return out;
    }
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !open.is_empty() {
        assert!(
            Instant::now() < deadline,
            "reading {topic} to the end took over 120 s"
        );
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                open.remove(&p);
            }
            Some(Err(e)) => panic!("consumer error: {e}"),
            Some(Ok(m)) => {
                // Past where the partition ended when the read began: done,
                // even while transactions keep committing (then no end of
                // partition may come for a while).
                if open
                    .get(&m.partition())
                    .is_some_and(|high| m.offset() + 1 >= *high)
                {
                    open.remove(&m.partition());
                }
                out.push(Consumed::from_message(&m));
            }
        }
    }
    out
}

/// Runs `deploy/dev/kafka.sh <command>` (`stop`, `start`, `quota <client>
/// <rate>`), panicking on failure with what the script said (its progress
/// lines are the test's output, shown when the test fails).
pub fn kafka_script(command: &str) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/dev/kafka.sh");
    let out = std::process::Command::new(script)
        .args(command.split_whitespace())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run deploy/dev/kafka.sh");
    let said = String::from_utf8_lossy(&out.stderr);
    eprint!("{said}");
    assert!(
        out.status.success(),
        "deploy/dev/kafka.sh {command} failed ({}):\n{said}",
        out.status
    );
}

/// A plain HTTP/1.0 GET (for `/healthz` and `/metrics`); empty when nothing
/// listens.
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A loopback address with a port that was free a moment ago.
pub fn free_local_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("local addr")
        .port();
    format!("127.0.0.1:{port}")
}

/// Writes `config` to `walrelay.toml` in a fresh temporary directory.
pub fn write_config(config: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique("walrelay_test"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("walrelay.toml");
    std::fs::write(&path, config).expect("write config");
    path
}

/// `walrelay check --config path`: exit code, stdout, stderr.
pub fn run_check(path: &std::path::Path) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(walrelay_bin())
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("run walrelay check");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `walrelay check`: exit code and stdout (the report).
pub fn check(path: &std::path::Path) -> (Option<i32>, String) {
    let (code, stdout, _) = run_check(path);
    (code, stdout)
}

/// The problems of `check`'s FAIL lines.
pub fn failures(report: &str) -> Vec<String> {
    report
        .lines()
        .filter_map(|l| l.strip_prefix("FAIL  "))
        .map(|l| l.split_once(": ").map(|(_, p)| p).unwrap_or(l).to_owned())
        .collect()
}

/// `walrelay run` on `path` exits 1 (within `START`) and its error line
/// (`walrelay: connector=<name>: …`) says `needle`; returns that line
/// after `walrelay: `.
pub fn run_refuses(path: &std::path::Path, needle: &str) -> String {
    let mut run = RelayProcess::start_with(path, &[]);
    let log = run.expect_exit(1, START);
    let error = log
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("walrelay: "))
        .unwrap_or_else(|| panic!("run printed no error:\n{log}"))
        .to_owned();
    assert!(
        error.contains(needle),
        "run does not say {needle:?}: {error}"
    );
    error
}

fn kafka_admin() -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("admin client")
}

/// Creates `topic` with one partition (for producers that may not
/// auto-create topics).
pub async fn create_topic(topic: &str) {
    create_topic_with_config(topic, &[]).await;
}

/// Creates `topic` with one partition and the topic settings `config`.
pub async fn create_topic_with_config(topic: &str, config: &[(&str, &str)]) {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    let mut new = NewTopic::new(topic, 1, TopicReplication::Fixed(1));
    for (k, v) in config {
        new = new.set(k, v);
    }
    for r in kafka_admin()
        .create_topics(&[new], &AdminOptions::new())
        .await
        .expect("create topic")
    {
        r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
    }
}

/// Creates `topics`, each with `partitions` partitions.
pub async fn create_topics(topics: &[String], partitions: i32) {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
        .collect();
    for r in kafka_admin()
        .create_topics(&new, &AdminOptions::new())
        .await
        .expect("create topics")
    {
        r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
    }
}

/// Changes one setting of `topic`.
pub async fn set_topic_config(topic: &str, key: &str, value: &str) {
    use rdkafka::admin::{AdminOptions, AlterConfig, ResourceSpecifier};
    let alter = AlterConfig::new(ResourceSpecifier::Topic(topic)).set(key, value);
    for r in kafka_admin()
        .alter_configs(&[alter], &AdminOptions::new())
        .await
        .expect("alter topic config")
    {
        r.unwrap_or_else(|(t, e)| panic!("alter {t:?}: {e}"));
    }
}

/// Sets a server setting with ALTER SYSTEM (reloaded) and resets it when
/// dropped, also when the test fails. Only for settings that cannot hurt
/// tests running beside it (test binaries run one at a time).
/// A Kafka client quota on one client id's produce rate (bytes/s), lifted
/// when dropped (also on failure).
pub struct ProduceQuota(String);

impl ProduceQuota {
    pub fn set(client_id: &str, bytes_per_second: u64) -> ProduceQuota {
        kafka_script(&format!("quota {client_id} {bytes_per_second}"));
        ProduceQuota(client_id.to_owned())
    }

    /// Lifts it now.
    pub fn lift(self) {}
}

impl Drop for ProduceQuota {
    fn drop(&mut self) {
        kafka_script(&format!("quota {} none", self.0));
    }
}

/// A server setting changed with `ALTER SYSTEM` (and reloaded), reset
/// when dropped — also when the test fails.
pub struct SystemSetting {
    name: &'static str,
    url: String,
}

impl SystemSetting {
    /// On the shared test server.
    pub async fn set(name: &'static str, value: &str) -> SystemSetting {
        SystemSetting::set_at(pg_superuser_url("postgres"), name, value).await
    }

    /// On the server of `url` (a superuser's).
    pub async fn set_at(url: String, name: &'static str, value: &str) -> SystemSetting {
        let (admin, conn) = tokio_postgres::connect(&url, NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to set {name}: {e}"));
        tokio::spawn(conn);
        for sql in [
            format!("ALTER SYSTEM SET {name} = '{value}'"),
            "SELECT pg_reload_conf()".to_owned(),
        ] {
            admin
                .batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        SystemSetting { name, url }
    }
}

impl Drop for SystemSetting {
    fn drop(&mut self) {
        let url = self.url.clone();
        let name = self.name;
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Runtime::new() else {
                return;
            };
            runtime.block_on(async {
                if let Ok((client, conn)) = tokio_postgres::connect(&url, NoTls).await {
                    tokio::spawn(conn);
                    for sql in [
                        format!("ALTER SYSTEM RESET {name}"),
                        "SELECT pg_reload_conf()".to_owned(),
                    ] {
                        let _ = client.batch_execute(&sql).await;
                    }
                }
            });
        })
        .join();
    }
}

/// Creates `items (id int8 PRIMARY KEY, version int8, note text)` owned by
/// walrelay, with `rows` rows at version 0: the table the freshness tests
/// fold ([`fold_versions`]) and write to ([`ItemsWriters`]).
pub async fn create_items(client: &Client, rows: i64) {
    client
        .batch_execute(&format!(
            "CREATE TABLE items (id int8 PRIMARY KEY, version int8 NOT NULL, note text);
             ALTER TABLE items OWNER TO walrelay;
             INSERT INTO items SELECT g, 0, repeat('n', 50) FROM generate_series(1, {rows}) g;"
        ))
        .await
        .unwrap();
}

/// `items`' state as [`fold_versions`] reads it from its topic: id -> version.
pub async fn items_state(client: &Client) -> std::collections::HashMap<i64, i64> {
    client
        .query("SELECT id, version FROM items", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Writers on `items` until stopped: each repeatedly picks a random id in
/// `1..=max_id` and deletes it (1 in 10), inserts it if absent (1 in 10)
/// or bumps its version, each statement its own transaction, `pause`
/// between statements.
pub struct ItemsWriters {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ItemsWriters {
    pub fn start(db: &str, writers: u64, max_id: i64, pause: Duration) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks = (0..writers)
            .map(|w| {
                let (name, stop) = (db.to_string(), stop.clone());
                tokio::spawn(async move {
                    use rand::{RngExt, SeedableRng};
                    let client = pg_connect(&name).await;
                    let seed = w + u64::from(std::process::id());
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        let id = rng.random_range(1..=max_id);
                        let sql = match rng.random_range(0..10) {
                            0 => format!("DELETE FROM items WHERE id = {id}"),
                            1 => format!(
                                "INSERT INTO items VALUES ({id}, 0, 'new') ON CONFLICT (id) DO NOTHING"
                            ),
                            _ => format!("UPDATE items SET version = version + 1 WHERE id = {id}"),
                        };
                        client.batch_execute(&sql).await.unwrap();
                        if !pause.is_zero() {
                            tokio::time::sleep(pause).await;
                        }
                    }
                })
            })
            .collect();
        Self { stop, tasks }
    }

    /// Stops the writers and waits for their last statement.
    pub async fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in self.tasks {
            t.await.unwrap();
        }
    }
}

/// Folds a `[[table]]` topic of a table `(id int8, version int8, …)` in
/// partition order: read, create and update events upsert `after.id ->
/// after.version`, deletes remove `before.id`, tombstones are skipped.
/// Returns the state and the number of read (`op: "r"`) events.
pub fn fold_versions(topic: &str) -> (std::collections::HashMap<i64, i64>, usize) {
    let mut got = consume_to_end(&[topic]);
    got.sort_by_key(|r| (r.partition, r.offset));
    let mut state = std::collections::HashMap::new();
    let mut reads = 0;
    for r in &got {
        let Some(value) = r.value.as_deref() else {
            continue; // tombstone
        };
        let v: serde_json::Value = serde_json::from_slice(value).unwrap();
        match v["op"].as_str().unwrap() {
            "d" => {
                state.remove(&v["before"]["id"].as_i64().unwrap());
            }
            op => {
                reads += usize::from(op == "r");
                let after = &v["after"];
                state.insert(
                    after["id"].as_i64().unwrap(),
                    after["version"].as_i64().unwrap(),
                );
            }
        }
    }
    (state, reads)
}
