//! The inbox consumer's `/metrics` and `/healthz` (served by
//! `telemetry::serve_routes`, the connector's HTTP endpoint code).
//!
//! Every sample carries `consumer="<inbox.name>"`. The per-partition
//! frontier gauges and the oldest-record age are set by the consumer loop at
//! every offset commit (`inbox.commit_interval`), not at scrape time; unknown
//! readings (nothing in progress) are left out, never written as sentinels.
//! Scraping only reads.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Per partition, as of the last commit: the committed frontier and how far
/// it is behind the highest offset received.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PartitionReading {
    pub position: i64,
    pub lag: i64,
}

/// Counters and gauges of one inbox consumer.
#[derive(Debug)]
pub struct InboxMetrics {
    consumer: String,
    pub applied: AtomicU64,
    pub duplicates: AtomicU64,
    pub retries: AtomicU64,
    pub quarantined: AtomicU64,
    pub db_reconnects: AtomicU64,
    pub offset_commits: AtomicU64,
    pub offset_commit_errors: AtomicU64,
    /// Records received and not done.
    pub in_progress: AtomicI64,
    pub running: AtomicI64,
    pub retry_wait: AtomicI64,
    /// Age of the oldest record in progress, ms; -1: none (left out).
    pub oldest_ms: AtomicI64,
    pub(crate) partitions: Mutex<BTreeMap<(String, i32), PartitionReading>>,
    /// Partitions stopped at a quarantined record, with the reason.
    pub(crate) stopped: Mutex<BTreeMap<(String, i32), String>>,
    /// Why the consumer is not consuming, if it is not (e.g. the database
    /// cannot be reached).
    pub(crate) trouble: Mutex<Option<String>>,
}

impl InboxMetrics {
    pub fn new(consumer: &str) -> Self {
        InboxMetrics {
            consumer: consumer.to_owned(),
            applied: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            quarantined: AtomicU64::new(0),
            db_reconnects: AtomicU64::new(0),
            offset_commits: AtomicU64::new(0),
            offset_commit_errors: AtomicU64::new(0),
            in_progress: AtomicI64::new(0),
            running: AtomicI64::new(0),
            retry_wait: AtomicI64::new(0),
            oldest_ms: AtomicI64::new(-1),
            partitions: Mutex::new(BTreeMap::new()),
            stopped: Mutex::new(BTreeMap::new()),
            trouble: Mutex::new(None),
        }
    }

    pub(crate) fn set_trouble(&self, what: Option<String>) {
        if let Ok(mut t) = self.trouble.lock() {
            *t = what;
        }
    }

    /// `Ok` with a line of state, or `Err` with why not: a stopped partition
    /// or a database that cannot be reached.
    pub fn health(&self) -> Result<String, String> {
        if let Ok(stopped) = self.stopped.lock()
            && let Some(((topic, partition), why)) = stopped.iter().next()
        {
            return Err(format!(
                "partition {topic}/{partition} stopped ({} stopped in all): {why}",
                stopped.len()
            ));
        }
        if let Ok(t) = self.trouble.lock()
            && let Some(why) = t.as_ref()
        {
            return Err(why.clone());
        }
        Ok(format!(
            "consuming; {} record(s) in progress",
            self.in_progress.load(Ordering::Relaxed)
        ))
    }

    /// The OpenMetrics text of these metrics.
    pub fn render(self: &Arc<Self>) -> String {
        let mut registry = Registry::with_labels(
            [(Cow::Borrowed("consumer"), Cow::Owned(self.consumer.clone()))].into_iter(),
        );
        registry.register_collector(Box::new(View(self.clone())));
        let mut out = String::with_capacity(4096);
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

#[derive(Debug)]
struct View(Arc<InboxMetrics>);

fn counter(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: &AtomicU64,
) -> Result<(), std::fmt::Error> {
    let metric = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value.load(Ordering::Relaxed)).encode(metric)
}

fn gauge(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), std::fmt::Error> {
    let metric = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

impl Collector for View {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = &*self.0;
        let load = |a: &AtomicI64| a.load(Ordering::Relaxed);
        counter(
            &mut e,
            "walrelay_inbox_records_applied",
            "Records whose event id was new: the handler ran and committed with the inbox row.",
            &m.applied,
        )?;
        counter(
            &mut e,
            "walrelay_inbox_duplicates_skipped",
            "Records whose event id was already in the inbox (a re-send, or a re-delivery after a restart): skipped.",
            &m.duplicates,
        )?;
        counter(
            &mut e,
            "walrelay_inbox_retries",
            "Handler attempts that failed and were retried after a backoff.",
            &m.retries,
        )?;
        counter(
            &mut e,
            "walrelay_inbox_quarantined",
            "Records set aside in the quarantine table after inbox.max_attempts failed attempts (or without an event id).",
            &m.quarantined,
        )?;
        counter(
            &mut e,
            "walrelay_inbox_db_reconnects",
            "Database connections made again after one was lost (not counted as handler attempts).",
            &m.db_reconnects,
        )?;
        counter(
            &mut e,
            "walrelay_inbox_offset_commits",
            "Kafka offset commits of the frontier.",
            &m.offset_commits,
        )?;
        counter(
            &mut e,
            "walrelay_inbox_offset_commit_errors",
            "Kafka offset commits that failed (the next one commits the same frontier or a later one).",
            &m.offset_commit_errors,
        )?;
        gauge(
            &mut e,
            "walrelay_inbox_in_progress",
            "Records received and not done (at most inbox.max_in_flight).",
            load(&m.in_progress),
        )?;
        {
            let mut metric = e.encode_descriptor(
                "walrelay_inbox_tasks",
                "Records in progress by state: ready (waiting for a worker or an earlier record of its key), running, retry_wait.",
                None,
                MetricType::Gauge,
            )?;
            let running = load(&m.running);
            let retry_wait = load(&m.retry_wait);
            let ready = (load(&m.in_progress) - running - retry_wait).max(0);
            for (state, v) in [
                (super::TaskState::Ready, ready),
                (super::TaskState::Running, running),
                (super::TaskState::RetryWait, retry_wait),
            ] {
                ConstGauge::new(v).encode(metric.encode_family(&[("state", state.as_str())])?)?;
            }
        }
        let oldest = load(&m.oldest_ms);
        if oldest >= 0 {
            let metric = e.encode_descriptor(
                "walrelay_inbox_oldest_in_progress_seconds",
                "Age of the oldest record received and not done (as of the last commit); absent when none is.",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(oldest as f64 / 1000.0).encode(metric)?;
        }
        let partitions = m.partitions.lock().map(|p| p.clone()).unwrap_or_default();
        {
            let mut metric = e.encode_descriptor(
                "walrelay_inbox_frontier_lag_records",
                "Per partition: offsets received above the committed frontier (records in progress, or done behind one that is).",
                None,
                MetricType::Gauge,
            )?;
            for ((topic, partition), r) in &partitions {
                let p = partition.to_string();
                let labels = [("topic", topic.as_str()), ("partition", p.as_str())];
                ConstGauge::new(r.lag).encode(metric.encode_family(&labels)?)?;
            }
        }
        {
            let mut metric = e.encode_descriptor(
                "walrelay_inbox_committed_offset",
                "Per partition: the offset last committed to Kafka (the frontier: the next record to read).",
                None,
                MetricType::Gauge,
            )?;
            for ((topic, partition), r) in &partitions {
                let p = partition.to_string();
                let labels = [("topic", topic.as_str()), ("partition", p.as_str())];
                ConstGauge::new(r.position).encode(metric.encode_family(&labels)?)?;
            }
        }
        let stopped = m.stopped.lock().map(|s| s.len()).unwrap_or(0);
        gauge(
            &mut e,
            "walrelay_inbox_partitions_stopped",
            "Partitions stopped at a quarantined record (on_quarantine = \"stop\").",
            stopped as i64,
        )?;
        gauge(
            &mut e,
            "walrelay_inbox_healthy",
            "1 when /healthz answers 200.",
            i64::from(m.health().is_ok()),
        )?;
        Ok(())
    }
}
