//! `/metrics`: the [`Metrics`] atomics, histograms and families written in
//! the OpenMetrics text format by `prometheus-client` (names, escaping,
//! `_total` suffixes and `# EOF` are the crate's, not hand-written).
//!
//! Invariants:
//! - Every sample carries `connector="<name>"`.
//! - No sentinel values: a reading that is unknown (the slot not read yet,
//!   no heartbeat back yet, `safe_wal_size` unlimited) is left out, never
//!   written as `-1`.
//! - Scraping only reads: it never blocks the data path beyond the
//!   relaxed atomic loads and one short lock per string gauge.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::{Metrics, SLOT_STAT_NAMES, process};

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The exposition of `metrics`.
pub fn render(metrics: &Arc<Metrics>) -> String {
    let mut registry = Registry::with_labels(
        [(
            Cow::Borrowed("connector"),
            Cow::Owned(metrics.connector.clone()),
        )]
        .into_iter(),
    );
    registry.register(
        "walrelay_commit_to_ack_seconds",
        "From a transaction's commit (its Commit message's timestamp) to Kafka's acknowledgement of each of its records",
        metrics.commit_to_ack.clone(),
    );
    registry.register(
        "walrelay_kafka_transaction_records",
        "exactly_once: records per committed Kafka transaction (the offset-store record included)",
        metrics.kafka_transaction_records.clone(),
    );
    registry.register(
        "walrelay_kafka_transaction_seconds",
        "exactly_once: from a Kafka transaction's first record to its commit",
        metrics.kafka_transaction_seconds.clone(),
    );
    registry.register(
        "walrelay_records_published_by_topic",
        "Records handed to the Kafka producer, by topic",
        metrics.records_by_topic.clone(),
    );
    registry.register(
        "walrelay_dead_letter_records",
        "Changes published to the dead-letter topic instead of their own record, by reason and table",
        metrics.dead_letter_records.clone(),
    );
    registry.register(
        "walrelay_session_errors_by_cause",
        "Sessions ended by an error, by class (transient: retried; definite: stopped; resync: the slot needs an operator) and cause",
        metrics.session_errors_by_cause.clone(),
    );
    registry.register_collector(Box::new(View(metrics.clone())));
    let mut out = String::with_capacity(8192);
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// The atomics, read at scrape time.
#[derive(Debug)]
struct View(Arc<Metrics>);

fn u(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

fn gauge<V: prometheus_client::encoding::EncodeGaugeValue + std::fmt::Debug + Send + Sync>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: V,
) -> Result<(), std::fmt::Error> {
    let metric = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

/// `name` without `_total`: the encoder adds it.
fn counter<V: prometheus_client::encoding::EncodeCounterValue + std::fmt::Debug + Send + Sync>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: V,
) -> Result<(), std::fmt::Error> {
    let metric = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(metric)
}

impl Collector for View {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = &*self.0;
        let flag = |b: &std::sync::atomic::AtomicBool| i64::from(b.load(Ordering::Relaxed));
        {
            let metric = e.encode_descriptor(
                "walrelay_build",
                "The walrelay build: version, and the librdkafka it links.",
                None,
                MetricType::Info,
            )?;
            let labels = [
                ("version", env!("CARGO_PKG_VERSION")),
                ("librdkafka", m.librdkafka_version.as_str()),
            ];
            prometheus_client::metrics::info::Info::new(labels).encode(metric)?;
        }
        counter(
            &mut e,
            "walrelay_schema_registry_requests",
            "Requests to the schema registry (a schema id not cached yet, or a retry).",
            u(&m.schema_registry_requests),
        )?;
        counter(
            &mut e,
            "walrelay_schema_registry_errors",
            "Schema registry requests that failed: unreachable, timed out, or answered with an error.",
            u(&m.schema_registry_errors),
        )?;
        counter(
            &mut e,
            "walrelay_kafka_transactions_committed",
            "exactly_once: Kafka transactions committed (each holds its position's offset-store record).",
            u(&m.kafka_transactions_committed),
        )?;
        counter(
            &mut e,
            "walrelay_kafka_transactions_aborted",
            "exactly_once: Kafka transactions aborted (none of their records is visible to read_committed consumers; sent again).",
            u(&m.kafka_transactions_aborted),
        )?;
        gauge(
            &mut e,
            "walrelay_kafka_producer_behind",
            "1 while records go to the producer that lingers kafka.linger_while_behind (walrelay is behind its commits), 0 while to the one that lingers kafka.linger.",
            u(&m.kafka_producer_behind),
        )?;
        counter(
            &mut e,
            "walrelay_kafka_producer_switches",
            "Switches between the two producers (kafka.linger and kafka.linger_while_behind).",
            u(&m.kafka_producer_switches),
        )?;
        counter(
            &mut e,
            "walrelay_kafka_transactions_fenced",
            "exactly_once: Kafka transactions aborted because a newer producer with this connector's transactional id fenced this one (another instance took over).",
            u(&m.kafka_transactions_fenced),
        )?;
        gauge(
            &mut e,
            "walrelay_streaming",
            "1 while a replication session streams (or takes the initial snapshot).",
            flag(&m.streaming),
        )?;
        {
            let mut metric = e.encode_descriptor(
                "walrelay_role",
                "1 for this instance's role: active (holds the lease) or standby (waits for it); both 0 before PostgreSQL was reached.",
                None,
                MetricType::Gauge,
            )?;
            let role = m.role();
            for (name, r) in [
                ("active", crate::telemetry::Role::Active),
                ("standby", crate::telemetry::Role::Standby),
            ] {
                let labels = [("role", name)];
                ConstGauge::new(i64::from(role == r)).encode(metric.encode_family(&labels)?)?;
            }
        }
        gauge(
            &mut e,
            "walrelay_healthy",
            "1 when /healthz answers 200.",
            i64::from(m.health().is_ok()),
        )?;
        gauge(
            &mut e,
            "walrelay_snapshot_running",
            "1 while the initial snapshot is read and published.",
            flag(&m.snapshot_running),
        )?;
        counter(
            &mut e,
            "walrelay_snapshot_rows",
            "Rows read by the initial snapshot (each one published as a record).",
            u(&m.snapshot_rows),
        )?;
        gauge(
            &mut e,
            "walrelay_snapshot_tables_remaining",
            "Snapshot tables not yet completely acknowledged by Kafka.",
            u(&m.snapshot_tables_remaining) as i64,
        )?;
        gauge(
            &mut e,
            "walrelay_incremental_snapshot_running",
            "1 while an incremental snapshot is being read beside the stream.",
            i64::from(m.incremental_running.load(Ordering::Relaxed)),
        )?;
        counter(
            &mut e,
            "walrelay_incremental_snapshot_rows",
            "Rows published by incremental snapshot chunks.",
            u(&m.incremental_rows),
        )?;
        gauge(
            &mut e,
            "walrelay_incremental_snapshot_tables_remaining",
            "Tables of the incremental snapshot not read to the end yet.",
            u(&m.incremental_tables_remaining) as i64,
        )?;
        gauge(
            &mut e,
            "walrelay_slot_creation_waiting_transactions",
            "Open transactions that creating the snapshot's replication slot waits for (0: none).",
            u(&m.slot_creation_waiting_for) as i64,
        )?;
        if let Some(ms) = m.snapshot_duration() {
            gauge(
                &mut e,
                "walrelay_snapshot_duration_seconds",
                "How long the last completed initial snapshot took (absent until one completes).",
                ms,
            )?;
        }
        counter(
            &mut e,
            "walrelay_records_published",
            "Records handed to the Kafka producer.",
            u(&m.records_published),
        )?;
        counter(
            &mut e,
            "walrelay_published_bytes",
            "Bytes of records (key, value, headers) handed to the Kafka producer.",
            u(&m.published_bytes),
        )?;
        counter(
            &mut e,
            "walrelay_records_acked",
            "Records Kafka acknowledged (acks=all).",
            u(&m.records_acked),
        )?;
        counter(
            &mut e,
            "walrelay_transactions",
            "Committed transactions received from PostgreSQL.",
            u(&m.transactions),
        )?;
        counter(
            &mut e,
            "walrelay_updates_ignored",
            "Updates of outbox rows, not published (on_update = warn or skip).",
            u(&m.updates_ignored),
        )?;
        counter(
            &mut e,
            "walrelay_rows_unclaimed",
            "Rows inserted into published tables that no [[outbox]] section claims, not published.",
            u(&m.rows_unclaimed),
        )?;
        counter(
            &mut e,
            "walrelay_trace_contexts_invalid",
            "Outbox rows whose trace_context_column held no valid W3C trace context: published without trace headers.",
            u(&m.trace_contexts_invalid),
        )?;
        counter(
            &mut e,
            "walrelay_sessions_started",
            "Replication sessions that reached streaming.",
            u(&m.sessions_started),
        )?;
        counter(
            &mut e,
            "walrelay_session_errors",
            "Sessions ended by an error (retried or not); by class and cause in walrelay_session_errors_by_cause.",
            u(&m.session_errors),
        )?;
        counter(
            &mut e,
            "walrelay_streaming_session_errors",
            "Sessions that reached streaming (or the snapshot) and then ended by an error; failed connection attempts are not counted.",
            u(&m.streaming_session_errors),
        )?;
        counter(
            &mut e,
            "walrelay_streamed_transactions",
            "Transactions PostgreSQL sent while they ran (larger than its logical_decoding_work_mem; postgres.stream_in_progress), held until their commit and published then.",
            u(&m.streamed_transactions),
        )?;
        counter(
            &mut e,
            "walrelay_stream_spilled_bytes",
            "Bytes of such transactions held in spill files in postgres.stream_spill_dir, past postgres.stream_memory_limit.",
            u(&m.stream_spilled_bytes),
        )?;
        counter(
            &mut e,
            "walrelay_backpressure_seconds",
            "Time the replication stream was not read because the in-flight limits were reached (Kafka slower than PostgreSQL).",
            m.backpressure_seconds(),
        )?;
        for (name, help, value) in [
            (
                "walrelay_received_lsn",
                "Newest WAL position received from PostgreSQL, as a 64-bit LSN.",
                &m.received_lsn,
            ),
            (
                "walrelay_published_lsn",
                "Commit LSN of the newest transaction with a record handed to Kafka.",
                &m.published_lsn,
            ),
            (
                "walrelay_acked_lsn",
                "End LSN of the newest transaction Kafka holds completely, with every older one (the checkpoint's frontier).",
                &m.acked_lsn,
            ),
            (
                "walrelay_confirmed_lsn",
                "Position stored in the offset store and reported to PostgreSQL.",
                &m.confirmed_lsn,
            ),
        ] {
            gauge(
                &mut e,
                name,
                help,
                i64::try_from(u(value)).unwrap_or(i64::MAX),
            )?;
        }
        gauge(
            &mut e,
            "walrelay_in_flight_records",
            "Records sent to Kafka and not yet acknowledged.",
            u(&m.in_flight_records) as i64,
        )?;
        gauge(
            &mut e,
            "walrelay_in_flight_bytes",
            "Bytes sent to Kafka and not yet acknowledged.",
            u(&m.in_flight_bytes) as i64,
        )?;
        if let Some(age) = m.since(&m.last_ack_ms) {
            gauge(
                &mut e,
                "walrelay_kafka_last_ack_age_seconds",
                "Seconds since Kafka last acknowledged a record (absent until the first).",
                age,
            )?;
        }
        if let Some(age) = m.since(&m.offset_written_ms) {
            gauge(
                &mut e,
                "walrelay_offset_store_write_age_seconds",
                "Seconds since an offset-store write was last acknowledged (absent until the first).",
                age,
            )?;
        }
        for (name, help, value) in [
            (
                "walrelay_slot_lag_bytes",
                "WAL written since the slot's confirmed_flush_lsn (absent while unknown).",
                m.slot_lag_bytes.get(),
            ),
            (
                "walrelay_slot_retained_wal_bytes",
                "WAL the slot keeps from being recycled (absent while unknown).",
                m.slot_retained_bytes.get(),
            ),
            (
                "walrelay_slot_safe_wal_bytes",
                "WAL that may still be written before the slot is lost (absent when unlimited or unknown).",
                m.slot_safe_wal_bytes.get(),
            ),
        ] {
            if let Some(v) = value {
                gauge(&mut e, name, help, v)?;
            }
        }
        if let Some(age) = m.slot_poll_age() {
            gauge(
                &mut e,
                "walrelay_slot_poll_age_seconds",
                "Seconds since the slot gauges were last read from PostgreSQL (absent until the first read).",
                age.as_secs_f64(),
            )?;
        }
        let status = m.slot_wal_status();
        if !status.is_empty() {
            let mut metric = e.encode_descriptor(
                "walrelay_slot_wal_status",
                "1 for the slot's current wal_status.",
                None,
                MetricType::Gauge,
            )?;
            for s in ["reserved", "extended", "unreserved", "lost"] {
                let labels = [("status", s)];
                let family = metric.encode_family(&labels)?;
                ConstGauge::new(i64::from(status == s)).encode(family)?;
            }
        }
        let reason = m.slot_invalidation_reason();
        if !reason.is_empty() {
            let mut metric = e.encode_descriptor(
                "walrelay_slot_invalidation_reason",
                "1 with the reason PostgreSQL (17+) invalidated the slot (pg_replication_slots.invalidation_reason).",
                None,
                MetricType::Gauge,
            )?;
            let labels = [("reason", reason.as_str())];
            ConstGauge::new(1i64).encode(metric.encode_family(&labels)?)?;
        }
        if let Some(stats) = m.slot_stats() {
            for (i, (name, help)) in SLOT_STAT_NAMES.iter().enumerate() {
                counter(&mut e, name, help, stats[i])?;
            }
        }
        counter(
            &mut e,
            "walrelay_heartbeats_sent",
            "Heartbeats written with pg_logical_emit_message ([heartbeat] interval).",
            u(&m.heartbeats_sent),
        )?;
        counter(
            &mut e,
            "walrelay_heartbeat_write_errors",
            "Heartbeat writes that failed (retried every interval).",
            u(&m.heartbeat_write_errors),
        )?;
        counter(
            &mut e,
            "walrelay_heartbeats_received",
            "This connector's heartbeats seen coming back through the replication slot.",
            u(&m.heartbeats_received),
        )?;
        if let Some(age) = m.heartbeat_age() {
            gauge(
                &mut e,
                "walrelay_heartbeat_age_seconds",
                "Seconds since the last heartbeat came back through the slot (absent until the first).",
                age.as_secs_f64(),
            )?;
            gauge(
                &mut e,
                "walrelay_heartbeat_round_trip_seconds",
                "How long the last heartbeat took from pg_logical_emit_message to the replication stream.",
                m.heartbeat_round_trip_us.load(Ordering::Relaxed) as f64 / 1e6,
            )?;
        }
        // The process, under the names every Prometheus client library uses.
        let p = process::read();
        if let Some(rss) = p.resident_bytes {
            gauge(
                &mut e,
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                rss as i64,
            )?;
        }
        if let Some(cpu) = p.cpu_seconds {
            counter(
                &mut e,
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                cpu,
            )?;
        }
        if let Some(fds) = p.open_fds {
            gauge(
                &mut e,
                "process_open_fds",
                "Number of open file descriptors.",
                fds as i64,
            )?;
        }
        gauge(
            &mut e,
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds.",
            m.start_time_seconds,
        )?;
        Ok(())
    }
}
