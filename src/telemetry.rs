//! Health and metrics for operators: `/healthz` and `/metrics` (Prometheus
//! text format) on the `[health] listen` address.
//!
//! The relay updates a shared [`Metrics`] of atomics (and a histogram and
//! two label families from `prometheus-client`); nothing here feeds back
//! into the data path (metrics are observations, not control). All metric
//! names are in [`exposition`], in one place, written by `prometheus-client`
//! in the OpenMetrics text format; unknown readings are left out, never
//! written as sentinels.
//!
//! The slot gauges come from `pg_replication_slots`, polled by the relay:
//! - `walrelay_slot_lag_bytes`: WAL written since the slot's
//!   `confirmed_flush_lsn` — how far the connector is behind.
//! - `walrelay_slot_retained_wal_bytes`: WAL the slot holds back from
//!   recycling (`pg_current_wal_lsn() - restart_lsn`; on a standby captured
//!   from, its replay position) — what fills the disk.
//! - `walrelay_slot_safe_wal_bytes`: how much more WAL may be written before
//!   the slot is lost (`safe_wal_size`; absent without `max_slot_wal_keep_size`).
//! - `walrelay_slot_wal_status`: 1 for the current `wal_status`.
//! - `walrelay_slot_poll_age_seconds`: how old those readings are. The slot is
//!   read every 5 s for the life of the connector, also while no session
//!   runs (Kafka down); a growing age means the slot cannot be read (the
//!   watcher's log warning says why: `crate::relay`'s `slot_watch`).
//!
//! Heartbeats (`[heartbeat]`, see `crate::relay` and docs/operations.md):
//! - `walrelay_heartbeat_age_seconds`: time since this connector's last
//!   heartbeat came back through the slot; absent until the first one. It
//!   grows when any part of the path (catalog connection, WAL, walsender,
//!   decoding, this process) stops.
//! - `walrelay_heartbeat_round_trip_seconds`: how long the last one took
//!   from `pg_logical_emit_message` to the stream (absent until the first).
//! - `walrelay_heartbeats_sent_total`, `walrelay_heartbeats_received_total`,
//!   `walrelay_heartbeat_write_errors_total`.
//!
//! Health: 200 while a session is streaming and Kafka acknowledged something
//! (or had nothing to acknowledge) within the stall window, and 200
//! (`standby: …`) while this instance waits for the lease another instance
//! holds (a standby is ready: it takes over by itself, see
//! `crate::source::lease`); 503 with the reason otherwise.
//!
//! Role: `walrelay_role{role="active"|"standby"}`, 1 for the role this
//! instance has (both 0 before it knows: not yet connected to PostgreSQL).
//!
//! Logs (the binary's `tracing` setup, see [`log_filter`], [`use_ansi`],
//! [`Lossy`]):
//! - Writing a log line never fails and never panics: when stderr's reader is
//!   gone (a closed pipe, a restarting log shipper) the line is dropped. A
//!   sidecar must still stop cleanly when signalled, whatever happened to its
//!   log reader.
//! - ANSI colours only on a terminal, never with `NO_COLOR` set.
//! - A `WALRELAY_LOG` that would hide the logs by mistake is refused, naming
//!   the variable and the problem (the binary exits 2, like a bad config).
//! - Every line carries the connector's name ([`RootSpan`]).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use std::time::{Duration, Instant};

pub mod exposition;
mod http;
mod logging;
pub mod outage;
mod process;
mod root_span;

pub use http::{serve, serve_routes};
pub use logging::{DEFAULT_LOG_FILTER, Lossy, log_filter, use_ansi};

pub use root_span::{InConnectorSpan, RootSpan};

/// Counters and gauges shared by the relay and the HTTP endpoint.
#[derive(Debug)]
pub struct Metrics {
    started: Instant,
    /// This instance's [`Role`], as a `u8`.
    role: AtomicU8,
    /// While a standby: the lease holder PostgreSQL names ("" if none).
    lease_holder: Mutex<String>,
    /// The connector's name, the `connector` label of every sample.
    connector: String,
    /// Unix seconds when the process started (when this was made).
    start_time_seconds: f64,
    librdkafka_version: String,
    pub streaming: AtomicBool,
    /// An initial snapshot is being read and published.
    pub snapshot_running: AtomicBool,
    /// Snapshot rows read (this process).
    pub snapshot_rows: AtomicU64,
    /// Snapshot tables not yet completely in Kafka.
    pub snapshot_tables_remaining: AtomicU64,
    /// Open transactions the creation of the snapshot's slot waits for (0
    /// when it waits for none).
    pub slot_creation_waiting_for: AtomicU64,
    /// An incremental snapshot is being read.
    pub incremental_running: AtomicBool,
    /// Incremental snapshot rows published (this process).
    pub incremental_rows: AtomicU64,
    /// Incremental snapshot tables not read to the end yet.
    pub incremental_tables_remaining: AtomicU64,
    /// How long the last completed snapshot took, in milliseconds (0: none).
    pub snapshot_duration_ms: AtomicU64,
    pub records_published: AtomicU64,
    /// Bytes of the records handed to the producer.
    pub published_bytes: AtomicU64,
    pub records_acked: AtomicU64,
    pub transactions: AtomicU64,
    pub updates_ignored: AtomicU64,
    pub rows_unclaimed: AtomicU64,
    /// Trace context column values that were not a valid W3C trace context.
    pub trace_contexts_invalid: AtomicU64,
    pub sessions_started: AtomicU64,
    pub session_errors: AtomicU64,
    /// Sessions that reached streaming (or the snapshot), then ended by an
    /// error: the restarts that re-send the unconfirmed tail. Failed
    /// connection attempts are in `session_errors` only.
    pub streaming_session_errors: AtomicU64,
    pub confirmed_lsn: AtomicU64,
    pub received_lsn: AtomicU64,
    /// Bytes of transactions PostgreSQL streamed while they ran that
    /// walrelay held in spill files (past `postgres.stream_memory_limit`).
    pub stream_spilled_bytes: AtomicU64,
    /// Transactions PostgreSQL streamed while they ran, committed and
    /// replayed.
    pub streamed_transactions: AtomicU64,
    /// Commit LSN of the newest transaction with a record handed to Kafka.
    pub published_lsn: AtomicU64,
    /// The checkpoint's frontier: Kafka holds every record below it.
    pub acked_lsn: AtomicU64,
    pub in_flight_records: AtomicU64,
    pub in_flight_bytes: AtomicU64,
    pub slot_lag_bytes: MaybeGauge,
    pub slot_retained_bytes: MaybeGauge,
    pub slot_safe_wal_bytes: MaybeGauge,
    /// Milliseconds since `started` of the last Kafka acknowledgement, or of
    /// the last moment nothing was waiting for one.
    pub kafka_progress_ms: AtomicU64,
    /// Milliseconds since `started` of the last acknowledged record, plus
    /// one (0: none yet).
    last_ack_ms: AtomicU64,
    /// Milliseconds since `started` of the last acknowledged offset-store
    /// write, plus one (0: none yet).
    offset_written_ms: AtomicU64,
    /// Microseconds the stream was not read for backpressure.
    backpressure_us: AtomicU64,
    /// Commit → Kafka acknowledgement, per record.
    pub commit_to_ack: Histogram,
    /// `exactly_once`: Kafka transactions committed, aborted, and aborted
    /// because a newer producer fenced this one.
    pub kafka_transactions_committed: AtomicU64,
    pub kafka_transactions_aborted: AtomicU64,
    pub kafka_transactions_fenced: AtomicU64,
    /// 1 while records go to the producer for while walrelay is behind
    /// (`kafka.linger_while_behind`), 0 otherwise; switches between the two.
    pub kafka_producer_behind: AtomicU64,
    pub kafka_producer_switches: AtomicU64,
    /// `exactly_once`: records per committed Kafka transaction.
    pub kafka_transaction_records: Histogram,
    /// `exactly_once`: a Kafka transaction's first record to its commit.
    pub kafka_transaction_seconds: Histogram,
    /// Records handed to the producer, by topic (a bounded label set:
    /// `relay::topic_metric`).
    pub records_by_topic: Family<Vec<(&'static str, String)>, Counter>,
    /// The topic names that have a `records_by_topic` series of their own.
    named_topics: Mutex<std::collections::HashSet<String>>,
    /// Changes sent to the dead-letter topic, by reason and table
    /// (`relay::dead_letter` bounds the table names).
    pub dead_letter_records: Family<Vec<(&'static str, String)>, Counter>,
    /// Requests to the schema registry (`sink::registry`): one per
    /// (subject, schema) not cached yet, and per retry.
    pub schema_registry_requests: AtomicU64,
    /// Of those, the ones that failed (unreachable, an error status).
    pub schema_registry_errors: AtomicU64,
    /// Session errors by class and cause.
    pub session_errors_by_cause: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// Milliseconds since `started` of the last successful slot read, plus
    /// one (0: never read).
    slot_polled_ms: AtomicU64,
    slot_wal_status: Mutex<String>,
    /// PostgreSQL 17+: why the slot was invalidated ("" when it was not).
    slot_invalidation_reason: Mutex<String>,
    /// `pg_stat_replication_slots` counters, in [`SLOT_STAT_NAMES`] order.
    slot_stats: [AtomicU64; 8],
    slot_stats_known: AtomicBool,
    last_error: Mutex<String>,
    /// Heartbeats written with `pg_logical_emit_message`.
    pub heartbeats_sent: AtomicU64,
    /// Heartbeat writes that failed.
    pub heartbeat_write_errors: AtomicU64,
    /// This connector's heartbeats seen coming back through the slot.
    pub heartbeats_received: AtomicU64,
    /// Milliseconds since `started` when the last heartbeat came back, plus
    /// one (0: none yet).
    heartbeat_received_ms: AtomicU64,
    /// The last heartbeat's round trip, in microseconds.
    heartbeat_round_trip_us: AtomicU64,
}

/// The `pg_stat_replication_slots` columns walrelay exports (PostgreSQL
/// 14+), as counter names (without `_total`) and help.
pub const SLOT_STAT_NAMES: [(&str, &str); 8] = [
    (
        "walrelay_slot_spill_txns",
        "Transactions the slot's decoding spilled to disk (logical_decoding_work_mem exceeded).",
    ),
    (
        "walrelay_slot_spill_count",
        "Times the slot's decoding spilled transactions to disk.",
    ),
    (
        "walrelay_slot_spill_bytes",
        "Bytes of decoded transactions the slot spilled to disk.",
    ),
    (
        "walrelay_slot_stream_txns",
        "In-progress transactions the slot streamed (postgres.stream_in_progress: larger than logical_decoding_work_mem, sent while they ran).",
    ),
    (
        "walrelay_slot_stream_count",
        "Times the slot streamed in-progress transactions.",
    ),
    (
        "walrelay_slot_stream_bytes",
        "Bytes of in-progress transactions the slot streamed.",
    ),
    (
        "walrelay_slot_total_txns",
        "Transactions the slot decoded and sent.",
    ),
    (
        "walrelay_slot_total_bytes",
        "Bytes of transactions the slot decoded and sent.",
    ),
];

/// A gauge that may be unknown (then left out of `/metrics`).
#[derive(Debug)]
pub struct MaybeGauge(AtomicI64);

impl MaybeGauge {
    const UNKNOWN: i64 = i64::MIN;

    fn new() -> MaybeGauge {
        MaybeGauge(AtomicI64::new(Self::UNKNOWN))
    }

    pub fn set(&self, value: Option<i64>) {
        self.0
            .store(value.unwrap_or(Self::UNKNOWN), Ordering::Relaxed);
    }

    pub fn get(&self) -> Option<i64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|v| *v != Self::UNKNOWN)
    }
}

/// Buckets of `walrelay_commit_to_ack_seconds`: 5 ms to 10 minutes.
const COMMIT_TO_ACK_BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// Buckets of `walrelay_kafka_transaction_records`: 1 to a million.
const TRANSACTION_RECORDS_BUCKETS: [f64; 13] = [
    1.0,
    10.0,
    100.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    25_000.0,
    50_000.0,
    100_000.0,
    250_000.0,
    1_000_000.0,
];

impl Metrics {
    /// Metrics labelled with the connector's name.
    pub fn new(connector: &str) -> Self {
        Metrics {
            started: Instant::now(),
            role: AtomicU8::new(Role::Unknown as u8),
            lease_holder: Mutex::new(String::new()),
            connector: connector.to_owned(),
            start_time_seconds: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            librdkafka_version: rdkafka::util::get_rdkafka_version().1,
            streaming: AtomicBool::new(false),
            snapshot_running: AtomicBool::new(false),
            snapshot_rows: AtomicU64::new(0),
            snapshot_tables_remaining: AtomicU64::new(0),
            slot_creation_waiting_for: AtomicU64::new(0),
            incremental_running: AtomicBool::new(false),
            incremental_rows: AtomicU64::new(0),
            incremental_tables_remaining: AtomicU64::new(0),
            snapshot_duration_ms: AtomicU64::new(0),
            records_published: AtomicU64::new(0),
            published_bytes: AtomicU64::new(0),
            records_acked: AtomicU64::new(0),
            transactions: AtomicU64::new(0),
            updates_ignored: AtomicU64::new(0),
            rows_unclaimed: AtomicU64::new(0),
            trace_contexts_invalid: AtomicU64::new(0),
            sessions_started: AtomicU64::new(0),
            session_errors: AtomicU64::new(0),
            streaming_session_errors: AtomicU64::new(0),
            confirmed_lsn: AtomicU64::new(0),
            received_lsn: AtomicU64::new(0),
            stream_spilled_bytes: AtomicU64::new(0),
            streamed_transactions: AtomicU64::new(0),
            published_lsn: AtomicU64::new(0),
            acked_lsn: AtomicU64::new(0),
            in_flight_records: AtomicU64::new(0),
            in_flight_bytes: AtomicU64::new(0),
            slot_lag_bytes: MaybeGauge::new(),
            slot_retained_bytes: MaybeGauge::new(),
            slot_safe_wal_bytes: MaybeGauge::new(),
            kafka_progress_ms: AtomicU64::new(0),
            last_ack_ms: AtomicU64::new(0),
            offset_written_ms: AtomicU64::new(0),
            backpressure_us: AtomicU64::new(0),
            commit_to_ack: Histogram::new(COMMIT_TO_ACK_BUCKETS),
            kafka_transactions_committed: AtomicU64::new(0),
            kafka_transactions_aborted: AtomicU64::new(0),
            kafka_transactions_fenced: AtomicU64::new(0),
            kafka_producer_behind: AtomicU64::new(0),
            kafka_producer_switches: AtomicU64::new(0),
            kafka_transaction_records: Histogram::new(TRANSACTION_RECORDS_BUCKETS),
            kafka_transaction_seconds: Histogram::new(COMMIT_TO_ACK_BUCKETS),
            records_by_topic: Family::default(),
            named_topics: Mutex::default(),
            session_errors_by_cause: Family::default(),
            dead_letter_records: Family::default(),
            schema_registry_requests: AtomicU64::new(0),
            schema_registry_errors: AtomicU64::new(0),
            slot_polled_ms: AtomicU64::new(0),
            slot_wal_status: Mutex::new(String::new()),
            slot_invalidation_reason: Mutex::new(String::new()),
            slot_stats: Default::default(),
            slot_stats_known: AtomicBool::new(false),
            last_error: Mutex::new(String::new()),
            heartbeats_sent: AtomicU64::new(0),
            heartbeat_write_errors: AtomicU64::new(0),
            heartbeats_received: AtomicU64::new(0),
            heartbeat_received_ms: AtomicU64::new(0),
            heartbeat_round_trip_us: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Seconds since the moment stored (plus one) in `at`, if any.
    fn since(&self, at: &AtomicU64) -> Option<f64> {
        let at = at.load(Ordering::Relaxed);
        (at > 0).then(|| self.now_ms().saturating_sub(at - 1) as f64 / 1000.0)
    }

    /// Kafka acknowledged a record now.
    pub fn record_acked(&self) {
        self.last_ack_ms
            .store(self.now_ms().saturating_add(1), Ordering::Relaxed);
    }

    /// `exactly_once`: a Kafka transaction of `records` records (and
    /// `bytes` bytes) committed, `open_for` after its first record.
    pub fn kafka_transaction_committed(&self, records: u64, _bytes: u64, open_for: Duration) {
        self.kafka_transactions_committed
            .fetch_add(1, Ordering::Relaxed);
        self.kafka_transaction_records.observe(records as f64);
        self.kafka_transaction_seconds
            .observe(open_for.as_secs_f64());
    }

    /// `exactly_once`: a Kafka transaction aborted (`fenced`: because a
    /// newer producer with this connector's transactional id fenced it).
    pub fn kafka_transaction_aborted(&self, fenced: bool) {
        self.kafka_transactions_aborted
            .fetch_add(1, Ordering::Relaxed);
        if fenced {
            self.kafka_transactions_fenced
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Kafka acknowledged an offset-store write now.
    pub fn offset_written(&self) {
        self.offset_written_ms
            .store(self.now_ms().saturating_add(1), Ordering::Relaxed);
    }

    /// The stream was not read for `paused` because of backpressure.
    pub fn backpressure(&self, paused: Duration) {
        let us = u64::try_from(paused.as_micros()).unwrap_or(u64::MAX);
        self.backpressure_us.fetch_add(us, Ordering::Relaxed);
    }

    fn backpressure_seconds(&self) -> f64 {
        self.backpressure_us.load(Ordering::Relaxed) as f64 / 1e6
    }

    fn snapshot_duration(&self) -> Option<f64> {
        let ms = self.snapshot_duration_ms.load(Ordering::Relaxed);
        (ms > 0).then(|| ms as f64 / 1000.0)
    }

    /// A session ended on an error of `class` (transient, definite, resync)
    /// and `cause`.
    pub fn session_error(&self, class: &'static str, cause: &'static str) {
        self.session_errors.fetch_add(1, Ordering::Relaxed);
        self.session_errors_by_cause
            .get_or_create(&vec![("class", class), ("cause", cause)])
            .inc();
    }

    /// A change went to the dead-letter topic.
    pub fn dead_letter(&self, reason: &'static str, table: String) {
        self.dead_letter_records
            .get_or_create(&vec![("reason", reason.to_owned()), ("table", table)])
            .inc();
    }

    /// `pg_stat_replication_slots` counters ([`SLOT_STAT_NAMES`] order), or
    /// `None` when unknown.
    pub fn set_slot_stats(&self, stats: Option<[u64; 8]>) {
        if let Some(stats) = stats {
            for (cell, v) in self.slot_stats.iter().zip(stats) {
                cell.store(v, Ordering::Relaxed);
            }
        }
        self.slot_stats_known
            .store(stats.is_some(), Ordering::Relaxed);
    }

    fn slot_stats(&self) -> Option<[u64; 8]> {
        self.slot_stats_known
            .load(Ordering::Relaxed)
            .then(|| std::array::from_fn(|i| self.slot_stats[i].load(Ordering::Relaxed)))
    }

    pub fn set_invalidation_reason(&self, reason: &str) {
        if let Ok(mut s) = self.slot_invalidation_reason.lock() {
            reason.clone_into(&mut s);
        }
    }

    fn slot_invalidation_reason(&self) -> String {
        self.slot_invalidation_reason
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    fn slot_wal_status(&self) -> String {
        self.slot_wal_status
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }
}

/// Milliseconds since 1970, now (0 if the clock is before 1970).
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Distinct topic names that get a `records_by_topic` series of their own
/// (`relay::topic_metric` explains the label set).
pub const MAX_NAMED_TOPICS: usize = 100;

/// The `records_by_topic` label of topics past [`MAX_NAMED_TOPICS`].
pub const OTHER: &str = "other";

/// How long Kafka may leave records unacknowledged before health says so.
pub const STALL: Duration = Duration::from_secs(10);

impl Metrics {
    /// The `records_by_topic` label of a topic that is not made from row
    /// identifiers: its own name while fewer than
    /// [`MAX_NAMED_TOPICS`] names have one, else
    /// `"other"`.
    pub fn topic_label(&self, topic: &str) -> String {
        let Ok(mut named) = self.named_topics.lock() else {
            return OTHER.to_owned();
        };
        if named.contains(topic) {
            return topic.to_owned();
        }
        if named.len() < MAX_NAMED_TOPICS {
            named.insert(topic.to_owned());
            return topic.to_owned();
        }
        OTHER.to_owned()
    }

    /// Kafka made progress (or nothing waits for it) now.
    pub fn kafka_progress(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.kafka_progress_ms.store(ms, Ordering::Relaxed);
    }

    /// The slot's gauges were just read from PostgreSQL.
    pub fn slot_polled(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.slot_polled_ms
            .store(ms.saturating_add(1), Ordering::Relaxed);
    }

    /// Seconds since the slot's gauges were last read, if ever.
    pub fn slot_poll_age(&self) -> Option<Duration> {
        let polled = self.slot_polled_ms.load(Ordering::Relaxed);
        (polled > 0).then(|| {
            self.started
                .elapsed()
                .saturating_sub(Duration::from_millis(polled - 1))
        })
    }

    /// One of this connector's heartbeats came back through the slot, `round_trip`
    /// after it was written.
    pub fn heartbeat_received(&self, round_trip: Duration) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let us = u64::try_from(round_trip.as_micros()).unwrap_or(u64::MAX);
        self.heartbeat_round_trip_us.store(us, Ordering::Relaxed);
        self.heartbeats_received.fetch_add(1, Ordering::Relaxed);
        self.heartbeat_received_ms
            .store(ms.saturating_add(1), Ordering::Relaxed);
    }

    /// Time since the last heartbeat came back, if one did.
    pub fn heartbeat_age(&self) -> Option<Duration> {
        let received = self.heartbeat_received_ms.load(Ordering::Relaxed);
        (received > 0).then(|| {
            self.started
                .elapsed()
                .saturating_sub(Duration::from_millis(received - 1))
        })
    }

    pub fn set_wal_status(&self, status: &str) {
        if let Ok(mut s) = self.slot_wal_status.lock() {
            status.clone_into(&mut s);
        }
    }

    pub fn set_error(&self, error: &str) {
        if let Ok(mut s) = self.last_error.lock() {
            error.clone_into(&mut s);
        }
    }

    /// This instance's role now.
    pub fn role(&self) -> Role {
        match self.role.load(Ordering::Relaxed) {
            1 => Role::Standby,
            2 => Role::Active,
            _ => Role::Unknown,
        }
    }

    /// Sets the role; `holder` names the active instance while a standby.
    pub fn set_role(&self, role: Role, holder: &str) {
        if let Ok(mut h) = self.lease_holder.lock() {
            holder.clone_into(&mut h);
        }
        self.role.store(role as u8, Ordering::Relaxed);
    }

    /// `Ok(reason)` when healthy, `Err(reason)` when not.
    pub fn health(&self) -> Result<String, String> {
        if self.role() == Role::Standby {
            let holder = self
                .lease_holder
                .lock()
                .map(|h| h.clone())
                .unwrap_or_default();
            return Ok(if holder.is_empty() {
                "standby: another instance holds the lease".to_owned()
            } else {
                format!("standby: the active instance is {holder}")
            });
        }
        if !self.streaming.load(Ordering::Relaxed) {
            let err = self
                .last_error
                .lock()
                .map(|e| e.clone())
                .unwrap_or_default();
            return Err(if err.is_empty() {
                "not streaming yet".to_owned()
            } else {
                format!("not streaming: {err}")
            });
        }
        let since = self.started.elapsed().as_millis() as u64;
        let last = self.kafka_progress_ms.load(Ordering::Relaxed);
        let stalled = Duration::from_millis(since.saturating_sub(last));
        if stalled > STALL {
            return Err(format!(
                "Kafka has not acknowledged records for {}s",
                stalled.as_secs()
            ));
        }
        if self
            .slot_wal_status
            .lock()
            .map(|s| s.as_str() == "lost")
            .unwrap_or(false)
        {
            return Err("replication slot is lost".to_owned());
        }
        Ok(if self.snapshot_running.load(Ordering::Relaxed) {
            "snapshotting".to_owned()
        } else {
            "streaming".to_owned()
        })
    }
}

/// Whether this instance holds the lease (see `crate::source::lease`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    /// Not known yet (PostgreSQL not reached).
    Unknown = 0,
    /// Waiting for the lease another instance holds.
    Standby = 1,
    /// Holds the lease.
    Active = 2,
}

#[cfg(test)]
mod tests;
