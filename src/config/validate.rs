//! Validation rules that serde cannot express: name syntax, ranges, cross-key
//! consistency, and the librdkafka properties that must not be overridden.
//!
//! Each rule yields a [`Problem`] naming the key path, what is wrong and the
//! fix. All problems are collected, so one run reports everything.

use std::time::Duration;

use humantime_serde::re::humantime::format_duration;

use super::Config;
use super::error::{Problem, quoted};
use super::schema::HeartbeatConfig;
use super::schema::{SnapshotConfig, SnapshotMode};
use super::template::topic_name_problem;

mod kafka;
mod postgres;
mod registry;
mod routes;

use kafka::{dead_letter, kafka};
use postgres::postgres;
use routes::{outboxes, tables};

/// Upper bounds of the numeric and duration keys. Each is far above any
/// useful setting and low enough that arithmetic on it (doubling a backoff,
/// adding to an `Instant`, deriving librdkafka queue sizes) cannot overflow.
pub(crate) mod limits {
    use std::time::Duration;

    pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(600);
    pub(crate) const STATUS_INTERVAL: Duration = Duration::from_secs(600);
    pub(crate) const RECONNECT_BACKOFF: Duration = Duration::from_secs(3600);
    /// PostgreSQL cannot build a message over 1 GiB (MaxAllocSize).
    pub(crate) const MAX_MESSAGE_SIZE: u64 = 1 << 30;
    /// `postgres.stream_memory_limit`: more than any sidecar should hold.
    pub(crate) const MAX_STREAM_MEMORY: u64 = 64 << 30;
    /// Batches wait at most this long (librdkafka itself allows 900s).
    pub(crate) const LINGER: Duration = Duration::from_secs(60);
    pub(crate) const MAX_IN_FLIGHT_RECORDS: usize = 10_000_000;
    pub(crate) const MAX_IN_FLIGHT_BYTES: u64 = 16 << 30;
    pub(crate) const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(3600);
    /// Records and bytes of one Kafka transaction (`exactly_once`).
    pub(crate) const TRANSACTION_MAX_RECORDS: usize = 10_000_000;
    pub(crate) const TRANSACTION_MAX_BYTES: u64 = 16 << 30;
    /// How long a Kafka transaction may collect records.
    pub(crate) const TRANSACTION_MAX_TIME: Duration = Duration::from_secs(60);
    /// librdkafka's `transaction.timeout.ms` (the broker caps it lower).
    pub(crate) const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(3600);
    /// Snapshot readers per table, each a PostgreSQL connection.
    pub(crate) const SNAPSHOT_PARALLELISM: u32 = 16;
    /// Rows per snapshot batch.
    pub(crate) const SNAPSHOT_FETCH_ROWS: usize = 1_000_000;
    /// Heartbeats: at least this far apart (each is a WAL record and a round
    /// trip on the catalog connection) …
    pub(crate) const HEARTBEAT_MIN: Duration = Duration::from_millis(100);
    /// … and at most this far (longer is no longer a heartbeat).
    pub(crate) const HEARTBEAT_MAX: Duration = Duration::from_secs(3600);
}

/// Every problem in `config`, in no particular order.
pub(crate) fn problems(config: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    connector_name(&config.connector.name, &mut out);
    postgres(&config.postgres, &mut out);
    kafka(&config.kafka, &mut out);
    outboxes(
        &config.outbox,
        !config.tables.is_empty() || !config.messages.is_empty(),
        &mut out,
    );
    tables(config, &mut out);
    super::message::problems(&config.messages, &mut out);
    snapshot(&config.snapshot, &mut out);
    heartbeat(
        &config.heartbeat,
        config.topic_prefix(),
        &config.kafka.offsets_topic,
        &mut out,
    );
    dead_letter(config, &mut out);
    registry::registry(config, &mut out);
    out
}

fn heartbeat(
    hb: &HeartbeatConfig,
    topic_prefix: &str,
    offsets_topic: &str,
    out: &mut Vec<Problem>,
) {
    if let Some(interval) = hb.enabled()
        && !(limits::HEARTBEAT_MIN..=limits::HEARTBEAT_MAX).contains(&interval)
    {
        out.push(Problem::new(
            "heartbeat.interval",
            format!(
                "must be from {} to {} (got {}), e.g. \"10s\"; \"0s\" or no interval turns \
                 heartbeats off",
                format_duration(limits::HEARTBEAT_MIN),
                format_duration(limits::HEARTBEAT_MAX),
                format_duration(interval)
            ),
        ));
    }
    let off = hb.enabled().is_none();
    if off && hb.publish {
        out.push(Problem::new(
            "heartbeat.publish",
            "publishes the heartbeats that come back, but heartbeats are off; set \
             heartbeat.interval (e.g. \"10s\") or remove publish",
        ));
    }
    if off && hb.topic.is_some() {
        out.push(Problem::new(
            "heartbeat.topic",
            "names the heartbeat topic, but heartbeats are off; set heartbeat.interval \
             (e.g. \"10s\") and publish = true, or remove topic",
        ));
    }
    let topic = hb.topic_for(topic_prefix);
    if hb.topic.is_none() && topic_name_problem(topic_prefix).is_some() {
        // The default topic only inherits the prefix's problem, which is
        // reported under the prefix's own key (connector.name or
        // table_defaults.topic_prefix): the cause, not this consequence.
    } else if let Some(why) = topic_name_problem(&topic) {
        let why = if hb.topic.is_some() {
            why
        } else {
            format!(
                "defaults to {} (from table_defaults.topic_prefix, or connector.name): \
                 {why}; set heartbeat.topic",
                quoted(&topic)
            )
        };
        out.push(Problem::new("heartbeat.topic", why));
    } else if topic == offsets_topic {
        out.push(Problem::new(
            "heartbeat.topic",
            format!(
                "is the offset-store topic (kafka.offsets_topic = {}); heartbeat records \
                 would be read back as offsets: choose another topic",
                quoted(offsets_topic)
            ),
        ));
    }
}

fn snapshot(snapshot: &SnapshotConfig, out: &mut Vec<Problem>) {
    if snapshot.mode == Some(SnapshotMode::Always) {
        out.push(Problem::new(
            "snapshot.mode",
            "\"always\" is not supported: it would publish every table again at every \
             start; use initial or when_needed, and `walrelay snapshot --table …` (an \
             incremental snapshot beside the stream) when a table must be read again",
        ));
    }
    if !(1..=limits::SNAPSHOT_PARALLELISM).contains(&snapshot.parallelism) {
        out.push(Problem::new(
            "snapshot.parallelism",
            format!(
                "must be from 1 to {} (got {}); it is the number of readers per table, each \
                 a PostgreSQL connection, e.g. 4",
                limits::SNAPSHOT_PARALLELISM,
                snapshot.parallelism
            ),
        ));
    }
    if !(1..=limits::SNAPSHOT_FETCH_ROWS).contains(&snapshot.fetch_rows) {
        out.push(Problem::new(
            "snapshot.fetch_rows",
            format!(
                "must be from 1 to {} (got {}); it is the number of rows a snapshot reader \
                 hands on at a time, e.g. 10000",
                limits::SNAPSHOT_FETCH_ROWS,
                snapshot.fetch_rows
            ),
        ));
    }
    if !(1..=limits::SNAPSHOT_FETCH_ROWS).contains(&snapshot.chunk_rows) {
        out.push(Problem::new(
            "snapshot.chunk_rows",
            format!(
                "must be from 1 to {} (got {}); it is the number of rows an incremental \
                 snapshot reads per chunk, e.g. 4096",
                limits::SNAPSHOT_FETCH_ROWS,
                snapshot.chunk_rows
            ),
        ));
    }
}

fn connector_name(name: &str, out: &mut Vec<Problem>) {
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        out.push(Problem::new(
            "connector.name",
            format!(
                "{} is not a valid connector name; use 1 to 64 characters from A-Z a-z 0-9 \
                 . _ - (it is part of the offset-store key, log fields and metric labels)",
                quoted(name)
            ),
        ));
    }
}

/// A duration key and its allowed range.
pub(super) struct DurationRule {
    key: &'static str,
    value: Duration,
    zero_allowed: bool,
    max: Duration,
    example: &'static str,
}

impl DurationRule {
    pub(super) fn check(&self, out: &mut Vec<Problem>) {
        let too_small = self.value.is_zero() && !self.zero_allowed;
        if too_small || self.value > self.max {
            let range = if self.zero_allowed {
                format!("at most {}", format_duration(self.max))
            } else {
                format!("longer than 0 and at most {}", format_duration(self.max))
            };
            out.push(Problem::new(
                self.key,
                format!(
                    "must be {range} (got {}), e.g. \"{}\"",
                    format_duration(self.value),
                    self.example
                ),
            ));
        }
    }
}

/// libpq's rule for a private key file: no access for others, and none for
/// the group unless root owns it (`0600`, or `0640` owned by root, at most).
/// Returns the file's mode when it allows more. The same rule judges secret
/// files (`${file:...}`, see `interpolate`).
pub(super) fn readable_by_others(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let mode = meta.mode() & 0o777;
    let allowed = if meta.uid() == 0 { 0o037 } else { 0o077 };
    (mode & allowed != 0).then_some(mode)
}

/// A private key anyone on the host can read is not private: refused, with
/// the `chmod` to run ([`readable_by_others`]).
pub(super) fn private_key_problem(path: &std::path::Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    readable_by_others(&meta).map(|mode| {
        format!(
            "{} is readable by the group or by others (mode {mode:04o}); a private key must not \
             be: run chmod 600 {} (as libpq requires)",
            path.display(),
            path.display()
        )
    })
}
