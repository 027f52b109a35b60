//! Shared support for integration tests against the real services.
//!
//! Connection settings come from the environment that the service scripts
//! print (`deploy/dev/postgres.sh env`, `deploy/dev/kafka.sh env`), with the
//! scripts' fixed defaults when unset. Every test gets fresh names (database,
//! slot, topic) so tests can run in parallel and re-runs never collide.
//!
//! A service that is not reachable is a test failure whose message names the
//! script to run — never a silent skip, in CI or anywhere else.

#![allow(dead_code)]

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

/// A superuser connection to `database`.
pub async fn pg_connect(database: &str) -> Client {
    let (client, conn) = match tokio_postgres::connect(&pg_superuser_url(database), NoTls).await {
        Ok(c) => c,
        Err(e) => pg_unreachable(&e),
    };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A fresh database owned by the `walrelay` role.
pub struct TestDb {
    pub name: String,
    pub client: Client,
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
    let deadline = Instant::now() + timeout;
    let mut settle_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if let Some(s) = settle_until {
            if now > s {
                break;
            }
        } else if out.len() >= expected {
            settle_until = Some(now + settle);
        } else if now > deadline {
            break;
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => {
                // Subscribing to a topic that is not created yet is normal.
                if !e.to_string().contains("Unknown topic") {
                    eprintln!("consumer error: {e}");
                }
            }
            Some(Ok(m)) => {
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
                out.push(Consumed {
                    topic: m.topic().to_owned(),
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers,
                    timestamp: m.timestamp().to_millis(),
                });
            }
        }
    }
    out
}
