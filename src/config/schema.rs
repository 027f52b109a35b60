//! The typed configuration sections and their defaults.
//!
//! Field documentation here is the source for `docs/configuration.md`; keep
//! the two in step.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;

use super::template::TopicTemplate;
use super::units;

mod kafka;
mod outbox;
mod postgres;
mod registry;
mod table;

pub use kafka::{
    Compression, Delivery, KafkaConfig, SECURITY_KEYS, SaslMechanism, SecurityProtocol,
    is_secret_property,
};
pub use outbox::{
    CloudEventsConfig, CloudEventsMode, Converter, OnUpdate, OutboxConfig, OutboxFormat,
    RetentionConfig, placement,
};
pub use postgres::{CaptureFrom, PostgresConfig, SslMode};
pub use registry::{SchemaRegistryConfig, SubjectNameStrategy};
pub use table::{
    BinaryHandlingMode, ColumnFilter, ColumnMask, DecimalHandlingMode, HASH_ALGORITHMS,
    IntervalHandlingMode, SkippedOperations, SpecialValues, TableConfig, TableDefaults,
    TableFormat, TimePrecisionMode, UnmappedTypes, glob_match,
};

/// `[connector]`: identity of this connector instance.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectorConfig {
    /// Identifies the connector in the offset-store key, logs and metrics.
    /// `[A-Za-z0-9._-]{1,64}`. Required.
    pub name: String,
}

/// `[health]`: the HTTP endpoint for `/healthz` and `/metrics`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthConfig {
    /// Address to listen on.
    #[serde(
        default = "defaults::health_listen",
        deserialize_with = "units::socket_addr"
    )]
    pub listen: SocketAddr,
}

/// `[log]`: how walrelay writes its log lines (stderr).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (default) or `json`. `--log-format` / `WALRELAY_LOG_FORMAT`
    /// win over it.
    #[serde(default)]
    pub format: LogFormat,
}

/// `[log] format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line, fields as keys.
    Json,
}

/// `[snapshot] mode`: whether and when to read the outbox tables' existing
/// rows before streaming, with Debezium's `snapshot.mode` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// Snapshot when the connector starts with no slot and no stored offset,
    /// then stream.
    #[default]
    Initial,
    /// Never snapshot: stream from the slot's consistent point.
    NoData,
    /// Snapshot as `initial`, then stop instead of streaming.
    InitialOnly,
    /// Snapshot as `initial`, and also when the stored position can no longer
    /// be resumed (slot lost or recreated), instead of stopping.
    WhenNeeded,
    /// Snapshot at every start. Refused by validation: it needs incremental
    /// snapshots, which walrelay does not have.
    Always,
}

impl SnapshotMode {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMode::Initial => "initial",
            SnapshotMode::NoData => "no_data",
            SnapshotMode::InitialOnly => "initial_only",
            SnapshotMode::WhenNeeded => "when_needed",
            SnapshotMode::Always => "always",
        }
    }
}

/// `[snapshot]`: the initial snapshot of the outbox tables (optional
/// section; every key has a default).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotConfig {
    /// When to snapshot. Unset: `initial` when walrelay creates the slot
    /// itself, and streaming from the slot's position (no snapshot) when
    /// the slot exists already — a snapshot can only be aligned with a slot
    /// walrelay creates. Set explicitly, a mode that asks for a snapshot
    /// refuses an existing slot instead.
    #[serde(default)]
    pub mode: Option<SnapshotMode>,
    /// Readers per table, each on its own connection importing the same
    /// exported snapshot; rows are split among them by a hash of the
    /// aggregate id, so one aggregate's rows stay with one reader. 1..=16.
    #[serde(default = "defaults::snapshot_parallelism")]
    pub parallelism: u32,
    /// Rows a reader hands on at a time (one batch). 1..=1,000,000.
    #[serde(default = "defaults::snapshot_fetch_rows")]
    pub fetch_rows: usize,
    /// Rows per chunk of an incremental snapshot. 1..=1,000,000.
    #[serde(default = "defaults::snapshot_chunk_rows")]
    pub chunk_rows: usize,
    /// How an incremental snapshot's chunks are reconciled with the stream
    /// ([`Watermarks`]).
    #[serde(default)]
    pub watermarks: Watermarks,
}

/// `[snapshot] watermarks`: how an incremental snapshot tells, in the
/// stream, where each chunk's read stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Watermarks {
    /// `messages` when the role may execute `pg_logical_emit_message` on
    /// the primary, else `read_only` (said once at start and by `check`).
    #[default]
    Auto,
    /// A low and a high watermark written around each chunk's read
    /// (`pg_logical_emit_message` on the primary, two WAL flushes).
    Messages,
    /// Nothing written: the chunk's snapshot (`pg_current_snapshot()`) and
    /// WAL position read with it place it in the stream (Debezium's
    /// read-only incremental snapshots). A chunk then waits for the stream
    /// to pass that position, which needs some WAL written after the read.
    ReadOnly,
}

impl Watermarks {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Watermarks::Auto => "auto",
            Watermarks::Messages => "messages",
            Watermarks::ReadOnly => "read_only",
        }
    }
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig {
            mode: None,
            parallelism: defaults::snapshot_parallelism(),
            fetch_rows: defaults::snapshot_fetch_rows(),
            chunk_rows: defaults::snapshot_chunk_rows(),
            watermarks: Watermarks::default(),
        }
    }
}

/// `[heartbeat]`: a message written into the WAL every `interval`, seen
/// coming back through the slot (optional section; off by default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// How often to write `pg_logical_emit_message(false, 'walrelay.heartbeat',
    /// …)` on the catalog connection. Unset or `"0s"`: no heartbeats.
    #[serde(default, deserialize_with = "units::optional_duration")]
    pub interval: Option<Duration>,
    /// Also publish a Debezium-shaped heartbeat record to `topic` for every
    /// heartbeat that comes back.
    #[serde(default)]
    pub publish: bool,
    /// The heartbeat topic. Unset: `__debezium-heartbeat.<topic prefix>`
    /// (`table_defaults.topic_prefix`, or the connector's name), Debezium's
    /// default for its `topic.prefix`.
    #[serde(default)]
    pub topic: Option<String>,
    /// How heartbeat records are written: `json` (Debezium's under
    /// `JsonConverter`, schemas off), `avro` or `json_schema` (Debezium's
    /// `ServerNameKey` / `Heartbeat` schemas under Confluent's converters,
    /// ids from `[kafka.schema_registry]`).
    #[serde(default)]
    pub format: super::TableFormat,
}

impl HeartbeatConfig {
    /// The interval when heartbeats are on.
    pub fn enabled(&self) -> Option<Duration> {
        self.interval.filter(|d| !d.is_zero())
    }

    /// The topic heartbeat records go to: `topic`, or Debezium's
    /// `__debezium-heartbeat.<topic.prefix>` with `topic_prefix`
    /// ([`Config::topic_prefix`](super::Config::topic_prefix)).
    pub fn topic_for(&self, topic_prefix: &str) -> String {
        self.topic
            .clone()
            .unwrap_or_else(|| format!("__debezium-heartbeat.{topic_prefix}"))
    }
}

/// `[dead_letter]`: where a change that cannot become its record goes
/// instead of stopping the connector (optional section; absent: stop and
/// name the row). See docs/delivery.md, "Dead-letter topic".
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// The dead-letter topic.
    pub topic: String,
}

/// Default values, one function per key (serde needs functions).
pub(crate) mod defaults {
    use super::*;

    pub(crate) fn host() -> String {
        "127.0.0.1".to_owned()
    }
    pub(crate) fn pg_port() -> u16 {
        5432
    }
    pub(crate) fn user() -> String {
        "walrelay".to_owned()
    }
    pub(crate) fn slot() -> String {
        "walrelay".to_owned()
    }
    pub(crate) fn publication() -> String {
        "walrelay".to_owned()
    }
    pub(crate) fn yes() -> bool {
        true
    }
    pub(crate) fn retention_batch_rows() -> u32 {
        1_000
    }
    pub(crate) fn retention_lock_timeout() -> Duration {
        Duration::from_secs(1)
    }
    pub(crate) fn retention_statement_timeout() -> Duration {
        Duration::from_secs(30)
    }
    pub(crate) fn connect_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub(crate) fn status_interval() -> Duration {
        Duration::from_secs(1)
    }
    pub(crate) fn max_message_size() -> u64 {
        64 << 20
    }
    pub(crate) fn stream_memory_limit() -> u64 {
        8 << 20
    }
    pub(crate) fn reconnect_backoff_initial() -> Duration {
        Duration::from_millis(500)
    }
    pub(crate) fn reconnect_backoff_max() -> Duration {
        Duration::from_secs(30)
    }
    pub(crate) fn linger() -> Duration {
        Duration::from_millis(5)
    }
    pub(crate) fn linger_while_behind() -> Duration {
        Duration::from_millis(20)
    }
    pub(crate) fn max_in_flight_records() -> usize {
        100_000
    }
    pub(crate) fn max_in_flight_bytes() -> u64 {
        64 << 20
    }
    pub(crate) fn shutdown_flush_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub(crate) fn transaction_max_records() -> usize {
        20_000
    }
    pub(crate) fn transaction_max_bytes() -> u64 {
        32 << 20
    }
    pub(crate) fn transaction_max_time() -> Duration {
        Duration::from_millis(100)
    }
    pub(crate) fn transaction_timeout() -> Duration {
        Duration::from_secs(60)
    }
    pub(crate) fn offsets_topic() -> String {
        "walrelay.offsets".to_owned()
    }
    pub(crate) fn health_listen() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 9187))
    }
    pub(crate) fn id_column() -> String {
        "id".to_owned()
    }
    pub(crate) fn aggregate_type_column() -> String {
        "aggregatetype".to_owned()
    }
    pub(crate) fn aggregate_id_column() -> String {
        "aggregateid".to_owned()
    }
    pub(crate) fn type_column() -> String {
        "type".to_owned()
    }
    pub(crate) fn payload_column() -> String {
        "payload".to_owned()
    }
    pub(crate) fn snapshot_parallelism() -> u32 {
        1
    }
    pub(crate) fn snapshot_fetch_rows() -> usize {
        10_000
    }
    pub(crate) fn snapshot_chunk_rows() -> usize {
        4_096
    }
    pub(crate) fn unavailable_value_placeholder() -> String {
        "__debezium_unavailable_value".to_owned()
    }
    pub(crate) fn table_topic() -> TopicTemplate {
        TopicTemplate::table_default()
    }
    pub(crate) fn header_columns() -> Vec<String> {
        vec!["type".to_owned()]
    }
}
