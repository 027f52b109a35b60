//! The offset store: where walrelay remembers how far Kafka holds the stream.
//!
//! A compacted Kafka topic (default `walrelay.offsets`) keyed by connector
//! name; each value is a JSON [`StoredOffset`] naming the cluster (system
//! identifier, timeline), the slot and the confirmed LSN.
//!
//! Invariants:
//! - A position is written here, and the write acknowledged, *before* it is
//!   reported to PostgreSQL (the relay enforces this by reporting only
//!   acknowledged offsets). So in normal operation the slot is never ahead of
//!   the stored offset.
//! - At start, [`compare`] classifies the slot against the stored offset:
//!   slot behind or equal, on the same cluster, slot and timeline, is normal,
//!   and streaming resumes at the stored offset (below it everything is in
//!   Kafka; the walsender skips what committed before it, so a slot that
//!   forgot its progress in a PostgreSQL restart re-sends nothing); slot
//!   ahead, slot lost, a different cluster, slot
//!   or timeline is an error with a recovery hint — never a silent jump over
//!   events that were never published, nor a silent re-use of LSNs.
//! - The topic stays small: a connector writes about one offset a second, so
//!   the topic must be compacted, and compacted often (see [`TOPIC_CONFIG`]).
//!   An existing topic that is not `cleanup.policy=compact` is refused.
//! - [`OffsetStore::load`] reads to the end however big the topic is, as long
//!   as Kafka keeps delivering: its limit is on *stalls*, not on the total.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use serde::{Deserialize, Serialize};

use crate::Lsn;
use crate::router::Record;

/// Settings of the offset topic when walrelay creates it.
///
/// Kafka compacts only closed segments, and closes (rolls) a segment only
/// after `segment.ms` (default 7 days) or `segment.bytes` (default 1 GiB). At
/// one offset a second per connector the default keeps a week of offsets in
/// the active segment, uncompacted, and every start reads all of it. So:
/// - `cleanup.policy=compact`: keep the newest offset per connector forever
///   (`delete` would drop a stopped connector's only offset after
///   `retention.ms`, and the start-up check could then no longer notice a
///   recreated slot);
/// - `segment.ms=1h`: roll hourly, so at most about an hour of offsets per
///   connector is uncompacted;
/// - `min.cleanable.dirty.ratio=0.1`, `min.compaction.lag.ms=0`,
///   `max.compaction.lag.ms=1h`: compact a rolled segment soon, even though
///   the topic is tiny (the cleaner's defaults wait for half the log to be
///   dirty).
pub const TOPIC_CONFIG: &[(&str, &str)] = &[
    ("cleanup.policy", "compact"),
    ("segment.ms", "3600000"),
    ("min.cleanable.dirty.ratio", "0.1"),
    ("min.compaction.lag.ms", "0"),
    ("max.compaction.lag.ms", "3600000"),
];

/// A load that read more records than this logs a warning: compaction is not
/// keeping up (or the topic is not compacted).
const BIG_TOPIC_RECORDS: u64 = 100_000;

/// What is stored per connector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredOffset {
    pub connector: String,
    pub system_id: String,
    pub timeline: u32,
    pub slot: String,
    /// Confirmed position as `X/Y` text (what operators compare by eye).
    pub lsn: String,
    /// Unix milliseconds of the write.
    pub written_at_ms: i64,
    /// Commit time (Unix ms, the server's clock) of the newest transaction
    /// at or below `lsn` that this connector streamed — or, before it
    /// streamed any on this slot, walrelay's clock just before it created
    /// the slot. Every transaction after `lsn` committed at or after it (up
    /// to clock steps): after a lost slot, the outbox rows to re-publish are
    /// those committed since this time ("Lost slot" in
    /// docs/operations.md). `written_at_ms` is no such bound: a lagging
    /// connector writes offsets of transactions committed long before.
    /// Absent in offsets written before walrelay stored it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_at_ms: Option<i64>,
    /// The initial snapshot, when this connector took one. Absent in offsets
    /// of connectors that never snapshotted (and in offsets written before
    /// walrelay had snapshots): they stream, nothing to resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotProgress>,
    /// The last range the operator accepted as never streamed
    /// (`--accept-slot-position`): what to reconcile, kept with every later
    /// write so `walrelay status` can still name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_gap: Option<AcceptedGap>,
    /// The incremental snapshot under way (or the last one, completed), with
    /// how far Kafka holds it at `lsn`: a restart goes on after the last
    /// chunk stored here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental: Option<IncrementalProgress>,
    /// The tables (`schema.table`) the connector was configured with when
    /// this was written: a table configured later is one whose existing rows
    /// were never published (an incremental snapshot publishes them). Empty
    /// in offsets written before walrelay stored it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known_tables: Vec<String>,
    /// The term of the lease its writer held (crate::source::lease,
    /// invariant 5): the reader takes the newest record of the highest
    /// term, so a holder that returns after losing its lease cannot move
    /// the offset backwards. Absent in offsets written before walrelay
    /// kept it (they count as of the term of the record before them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
}

/// An incremental snapshot as stored: its tables and how far each got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncrementalProgress {
    pub id: String,
    pub tables: Vec<IncrementalTableProgress>,
    /// Rows Kafka acknowledged so far.
    #[serde(default)]
    pub rows: u64,
}

/// One table of an incremental snapshot, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncrementalTableProgress {
    /// `schema.table`.
    pub table: String,
    /// The key columns the chunks follow.
    pub key: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    #[serde(default)]
    pub inserts_only: bool,
    /// The last key Kafka holds the chunk of (`None`: none yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<Option<String>>>,
    #[serde(default)]
    pub done: bool,
    /// Why the table was given up (done without all of its rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandoned: Option<String>,
}

impl IncrementalProgress {
    /// Whether every table is done.
    pub fn done(&self) -> bool {
        self.tables.iter().all(|t| t.done)
    }
}

impl std::fmt::Display for IncrementalProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let done = self.tables.iter().filter(|t| t.done).count();
        write!(
            f,
            "{} {}: {done} of {} tables done, {} rows",
            self.id,
            if self.done() { "completed" } else { "running" },
            self.tables.len(),
            self.rows
        )?;
        if let Some(t) = self.tables.iter().find(|t| !t.done) {
            let at = t.after.as_ref().map_or_else(
                || "its start".to_owned(),
                |k| {
                    format!(
                        "({})",
                        k.iter()
                            .map(|v| v.as_deref().unwrap_or("NULL"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            );
            write!(f, "; reading {} after {at}", t.table)?;
        }
        for t in &self.tables {
            if let Some(why) = &t.abandoned {
                write!(f, "; {} given up: {why}", t.table)?;
            }
        }
        Ok(())
    }
}

/// Changes committed after `from` and before `to` were never streamed: the
/// slot was dropped, lost or moved, and the operator started walrelay at
/// `to` anyway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedGap {
    /// The stored offset before the acceptance (`X/Y`).
    pub from: String,
    /// Where streaming went on (`X/Y`).
    pub to: String,
    /// Unix milliseconds of the acceptance.
    pub accepted_at_ms: i64,
    /// `committed_at_ms` of the stored offset at `from`: the range's
    /// transactions committed at or after it, so the rows to reconcile are
    /// those committed since (absent when that offset did not carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_committed_at_ms: Option<i64>,
}

/// Where the initial snapshot stands, as stored with the offset.
///
/// `running` is written (and acknowledged) *before* the slot is created, so
/// whatever happens next, a restart knows a snapshot was under way: its
/// exported snapshot died with its connection, so the restart drops the
/// slot this connector created for it and takes the snapshot again
/// (re-sending, never skipping). `completed` is written only after Kafka
/// acknowledged every snapshot record; only then does streaming start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotProgress {
    pub state: SnapshotState,
    /// Tables (`schema.table`) whose every row Kafka acknowledged.
    #[serde(default)]
    pub tables_done: Vec<String>,
    /// Snapshot records Kafka acknowledged so far.
    #[serde(default)]
    pub rows: u64,
    /// The consistent point of the slot this snapshot was taken with, once
    /// it exists: the position the hand-over to streaming expects the slot
    /// at (`crate::source`'s check after START_REPLICATION), and what
    /// `status` shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_point: Option<String>,
}

/// `running` or `completed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotState {
    Running,
    Completed,
}

impl StoredOffset {
    /// Whether this offset says a snapshot was started and never completed.
    pub fn snapshot_interrupted(&self) -> bool {
        self.snapshot
            .as_ref()
            .is_some_and(|s| s.state == SnapshotState::Running)
    }

    pub fn lsn(&self) -> Option<Lsn> {
        self.lsn.parse().ok()
    }

    /// The Kafka record that stores this offset.
    pub fn to_record(&self, topic: &str) -> Record {
        Record::new(
            topic.into(),
            Some(self.connector.clone().into_bytes().into()),
            Some(serde_json::to_vec(self).unwrap_or_default().into()),
            Vec::new(),
            None,
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OffsetStoreError {
    #[error("cannot read offset topic {topic:?}: {message}")]
    Read { topic: String, message: String },
    #[error("cannot create offset topic {topic:?}: {message}")]
    Create { topic: String, message: String },
    #[error(
        "the brokers refuse walrelay {operation} on offset topic {topic:?} ({code}). What to do: grant the connector's principal the ACLs the offset store needs: kafka-acls.sh --bootstrap-server <brokers> --add --allow-principal User:<walrelay's user> --operation Create --operation DescribeConfigs --operation Describe --operation Read --operation Write --topic {topic} (docs/security.md)"
    )]
    Denied {
        topic: String,
        /// The ACL operation refused (`Create`, `DescribeConfigs`).
        operation: &'static str,
        /// The broker's error code name (`TOPIC_AUTHORIZATION_FAILED`).
        code: &'static str,
    },
    #[error(
        "offset topic {topic:?} has cleanup.policy={policy}, but the offset store needs a compacted topic (cleanup.policy=compact): {why}. What to do: {fix}"
    )]
    NotCompacted {
        topic: String,
        policy: String,
        why: &'static str,
        fix: String,
    },
    #[error(
        "reading offset topic {topic:?} made no progress for {stall:?} (partition {partition} at offset {reached} of {end}, {records} records read in {elapsed:?}); Kafka is slow or unreachable, walrelay retries. If it repeats, the topic is too big to read: check that it is compacted, see docs/operations.md, \"Offset store\""
    )]
    Stalled {
        topic: String,
        stall: Duration,
        partition: i32,
        reached: i64,
        end: i64,
        records: u64,
        elapsed: Duration,
    },
    #[error(
        "the newest offset of connector {connector:?} in topic {topic:?} (partition {partition}, offset {offset}) is not valid: {message}. What to do: delete it with a tombstone (see docs/operations.md, \"Offset store\"), then start once with --accept-slot-position"
    )]
    BadRecord {
        topic: String,
        connector: String,
        partition: i32,
        offset: i64,
        message: String,
    },
}

impl OffsetStoreError {
    /// Whether retrying may help (Kafka unreachable or slow), as opposed to
    /// a problem only an operator can fix.
    pub fn is_transient(&self) -> bool {
        match self {
            OffsetStoreError::Read { .. }
            | OffsetStoreError::Create { .. }
            | OffsetStoreError::Stalled { .. } => true,
            OffsetStoreError::NotCompacted { .. }
            | OffsetStoreError::BadRecord { .. }
            | OffsetStoreError::Denied { .. } => false,
        }
    }
}

/// The slot's state as read from `pg_replication_slots`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotPosition {
    pub confirmed_flush: Lsn,
    /// `reserved`, `extended`, `unreserved`, `lost` (PostgreSQL 13+).
    pub wal_status: Option<String>,
}

/// The server walrelay is connected to, as far as the start decision cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server<'a> {
    /// `IDENTIFY_SYSTEM`'s system identifier.
    pub system_id: &'a str,
    /// The server's current timeline (`IDENTIFY_SYSTEM`, in `run` and
    /// `check` alike).
    pub timeline: u32,
    /// The history file of the server's timeline (`TIMELINE_HISTORY`), when
    /// it is past timeline 1 and could be read: where it left the stored
    /// offset's timeline ([`switch_point`]) decides a timeline change.
    /// `None` makes any timeline change a refusal.
    pub history: Option<&'a str>,
}

/// Where a timeline history file says `timeline` ended: the switch point on
/// its line `timeline<TAB>X/Y<TAB>reason`. `None` when `timeline` is not an
/// ancestor in it (or the file cannot be read as one).
pub fn switch_point(history: &str, timeline: u32) -> Option<Lsn> {
    history.lines().find_map(|line| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let mut fields = line.split_whitespace();
        let tli: u32 = fields.next()?.parse().ok()?;
        let lsn: Lsn = fields.next()?.parse().ok()?;
        (tli == timeline).then_some(lsn)
    })
}

/// How the slot relates to the stored offset at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartDecision {
    /// Resume streaming at `from`: the stored offset, or the slot's position
    /// when nothing is stored.
    Resume { from: Lsn },
    /// Refuse to start, with the reason and what to do.
    Refuse { reason: String, hint: String },
}

/// Compares the slot with the stored offset (see the module doc).
///
/// The rules, in order:
/// 1. a lost slot is refused (WAL is gone; overriding does not help);
/// 2. no stored offset: resume from the slot;
/// 3. another system identifier is refused (another cluster);
/// 4. another slot name is refused: the stored offset describes a different
///    slot, so comparing positions means nothing;
/// 5. another timeline is refused — a point-in-time restore or a promotion
///    re-uses LSNs after the switch point for different changes, so events
///    could be skipped or wrongly taken for duplicates (LSN-derived ids) —
///    unless the stored LSN is at or before the point where the server's
///    history left the stored timeline: then every LSN up to the stored one
///    means the same on both timelines (a failover to a standby whose
///    synced slot is behind the stored offset), and the slot is compared as
///    usual;
/// 6. a slot ahead of the stored LSN is refused (recreated or advanced);
/// 7. otherwise resume at the stored LSN. Everything below it is in Kafka,
///    and `START_REPLICATION` at a position past the slot's makes the
///    walsender skip transactions that committed before it (it starts at
///    "the given location or the slot's confirmed_flush_lsn, whichever is
///    greater"). A slot behind the stored offset is normal after a
///    PostgreSQL restart: a logical slot's confirmed position reaches disk
///    only when the slot is saved for other reasons (16 and older: not even
///    at a clean shutdown), so resuming from the slot would re-send
///    thousands of events.
pub fn compare(
    stored: Option<&StoredOffset>,
    slot: &SlotPosition,
    server: &Server<'_>,
    slot_name: &str,
) -> StartDecision {
    let recovery = "see docs/operations.md, \"Slot ahead of the stored offset\"";
    let system_id = server.system_id;
    if slot.wal_status.as_deref() == Some("lost") {
        return StartDecision::Refuse {
            reason: format!(
                "replication slot {slot_name:?} is lost (wal_status = 'lost'): PostgreSQL removed WAL it still needed, so changes after {} can no longer be streamed",
                slot.confirmed_flush
            ),
            hint: format!(
                "events committed after the stored offset are missing from Kafka. In this order: drop the slot (SELECT pg_drop_replication_slot('{slot_name}');), start once with --accept-slot-position (walrelay creates a new slot and names the range it never streamed), then reconcile that range with walrelay republish; see docs/operations.md, \"Lost slot\""
            ),
        };
    }
    let Some(stored) = stored else {
        return StartDecision::Resume {
            from: slot.confirmed_flush,
        };
    };
    if stored.system_id != system_id {
        return StartDecision::Refuse {
            reason: format!(
                "the offset store belongs to PostgreSQL system {} but this server is system {system_id} (a different cluster, or a restored/rebuilt one)",
                stored.system_id
            ),
            hint: format!(
                "point the connector at the right database, or if the move is intended start once with --accept-slot-position; {recovery}"
            ),
        };
    }
    if stored.slot != slot_name {
        return StartDecision::Refuse {
            reason: format!(
                "the stored offset of this connector describes replication slot {:?}, but postgres.slot is {slot_name:?}: the two positions cannot be compared",
                stored.slot
            ),
            hint: format!(
                "set postgres.slot back to {:?}; or, if the switch to {slot_name:?} is intended, make sure events committed after {} are in Kafka (reconcile from the outbox table) and start once with --accept-slot-position; {recovery}",
                stored.slot, stored.lsn
            ),
        };
    }
    let Some(stored_lsn) = stored.lsn() else {
        return StartDecision::Refuse {
            reason: format!("the stored offset has an unreadable LSN {:?}", stored.lsn),
            hint: format!("start once with --accept-slot-position to overwrite it; {recovery}"),
        };
    };
    if stored.timeline != server.timeline {
        let left_at = server
            .history
            .and_then(|h| switch_point(h, stored.timeline));
        let continuous =
            stored.timeline < server.timeline && left_at.is_some_and(|switch| stored_lsn <= switch);
        if !continuous {
            return StartDecision::Refuse {
                reason: format!(
                    "the stored offset {stored_lsn} is on timeline {} but PostgreSQL is on timeline {}: the server was restored to a point in time or a standby was promoted, and LSNs after the switch point now name different changes, so resuming could skip events or make consumers drop new events as duplicates",
                    stored.timeline, server.timeline
                ),
                hint: format!(
                    "find the switch point in the timeline history (SELECT pg_read_file('pg_wal/{:08X}.history') as a superuser); after a failover whose switch point is at or after {stored_lsn}, nothing is lost: start once with --accept-slot-position. After a point-in-time restore to before {stored_lsn}, events after the restore point are in Kafka but no longer in the database: tell consumers, reconcile, then start once with --accept-slot-position; see docs/operations.md, \"Timeline change (restore or failover)\"",
                    server.timeline
                ),
            };
        }
    }
    if slot.confirmed_flush > stored_lsn {
        return StartDecision::Refuse {
            reason: format!(
                "replication slot {slot_name:?} is at {} but Kafka holds events only up to {stored_lsn}: the slot was dropped and recreated, or advanced by hand, and the WAL in between will never be streamed",
                slot.confirmed_flush
            ),
            hint: format!(
                "events committed between {stored_lsn} and {} may be missing from Kafka. In this order: start once with --accept-slot-position, then reconcile that range with walrelay republish (reconciling first loses what commits in between); {recovery}",
                slot.confirmed_flush
            ),
        };
    }
    StartDecision::Resume { from: stored_lsn }
}

/// A deadline that moves while there is progress: expired only after
/// `stall` without any.
#[derive(Debug, Clone, Copy)]
struct StallDeadline {
    stall: Duration,
    last_progress: Instant,
}

impl StallDeadline {
    fn new(stall: Duration, now: Instant) -> Self {
        StallDeadline {
            stall,
            last_progress: now,
        }
    }

    fn progressed(&mut self, now: Instant) {
        self.last_progress = now;
    }

    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_progress) > self.stall
    }
}

/// The offset reader's client context: librdkafka's errors go to the log,
/// except the end of a partition, which a `read_committed` reader also
/// reports as a client error when a partition ends in a transaction marker
/// (the read loop handles the end itself; it is not an error).
struct ReaderContext;

impl ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            return;
        }
        tracing::error!("librdkafka: {error}: {reason}");
    }
}

impl ConsumerContext for ReaderContext {}

/// Reads and prepares the offset topic.
#[derive(Debug, Clone)]
pub struct OffsetStore {
    brokers_props: Vec<(String, String)>,
    pub topic: String,
    pub connector: String,
}

impl OffsetStore {
    /// `client_properties` are the connection-level librdkafka properties
    /// (bootstrap servers, security); producer-only keys are filtered out.
    pub fn new(client_properties: &[(String, String)], topic: &str, connector: &str) -> Self {
        let brokers_props = client_properties
            .iter()
            .filter(|(k, _)| is_client_property(k))
            .cloned()
            .collect();
        OffsetStore {
            brokers_props,
            topic: topic.into(),
            connector: connector.to_owned(),
        }
    }

    fn config(&self) -> ClientConfig {
        let mut cfg = ClientConfig::new();
        for (k, v) in &self.brokers_props {
            cfg.set(k, v);
        }
        cfg
    }

    fn brokers(&self) -> &str {
        self.brokers_props
            .iter()
            .find(|(k, _)| k == "bootstrap.servers")
            .map_or("<brokers>", |(_, v)| v.as_str())
    }

    /// Creates the compacted topic ([`TOPIC_CONFIG`]) if it does not exist;
    /// refuses an existing one that is not compacted.
    pub async fn ensure_topic(&self, timeout: Duration) -> Result<(), OffsetStoreError> {
        let err = |message: String| OffsetStoreError::Create {
            topic: self.topic.clone(),
            message,
        };
        let admin: AdminClient<DefaultClientContext> =
            self.config().create().map_err(|e| err(e.to_string()))?;
        let mut topic = NewTopic::new(&self.topic, 1, TopicReplication::Fixed(-1));
        for (k, v) in TOPIC_CONFIG {
            topic = topic.set(k, v);
        }
        let opts = AdminOptions::new()
            .operation_timeout(Some(timeout))
            .request_timeout(Some(timeout));
        let results = admin
            .create_topics(&[topic], &opts)
            .await
            .map_err(|e| err(e.to_string()))?;
        for r in results {
            match r {
                Ok(_) => {
                    tracing::info!(topic = %self.topic, "created the offset topic");
                    return Ok(());
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(match denied(code) {
                        Some(name) => OffsetStoreError::Denied {
                            topic: self.topic.clone(),
                            operation: "Create",
                            code: name,
                        },
                        None => err(code.to_string()),
                    });
                }
            }
        }
        // It existed already: it may have been made by hand, or by another tool.
        self.verify_topic(timeout).await.map(|_| ())
    }

    /// Checks the existing topic's `cleanup.policy`. `Ok(false)` when the
    /// topic does not exist (yet).
    pub async fn verify_topic(&self, timeout: Duration) -> Result<bool, OffsetStoreError> {
        let err = |message: String| OffsetStoreError::Read {
            topic: self.topic.clone(),
            message,
        };
        let admin: AdminClient<DefaultClientContext> =
            self.config().create().map_err(|e| err(e.to_string()))?;
        let opts = AdminOptions::new().request_timeout(Some(timeout));
        // A topic created a moment ago (by another connector, or by
        // auto-creation) can describe without its configuration for a short
        // while: ask again until the deadline instead of judging "".
        let deadline = Instant::now() + timeout;
        loop {
            let results = admin
                .describe_configs(&[ResourceSpecifier::Topic(&self.topic)], &opts)
                .await
                .map_err(|e| err(format!("describing its configuration: {e}")))?;
            let Some(result) = results.into_iter().next() else {
                return Err(err("describing its configuration returned nothing".into()));
            };
            let resource = match result {
                Ok(r) => r,
                Err(RDKafkaErrorCode::UnknownTopicOrPartition) => return Ok(false),
                Err(code) => {
                    return Err(match denied(code) {
                        Some(name) => OffsetStoreError::Denied {
                            topic: self.topic.clone(),
                            operation: "DescribeConfigs",
                            code: name,
                        },
                        None => err(format!("describing its configuration: {code}")),
                    });
                }
            };
            // A broker may answer for a topic it does not have with no
            // configuration at all instead of UNKNOWN_TOPIC_OR_PARTITION.
            if resource.entries.is_empty() {
                tracing::debug!(entries = 0, topic = %self.topic, "the offset topic has no configuration: it does not exist");
                return Ok(false);
            }
            let policy = resource
                .get("cleanup.policy")
                .and_then(|e| e.value.clone())
                .unwrap_or_default();
            if policy.trim().is_empty() {
                if Instant::now() >= deadline {
                    return Err(err(
                        "the broker does not report its cleanup.policy (yet)".into()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            return match not_compacted_because(&policy) {
                None => Ok(true),
                Some(why) => Err(OffsetStoreError::NotCompacted {
                    topic: self.topic.clone(),
                    policy,
                    why,
                    fix: self.fix_command(),
                }),
            };
        }
    }

    /// The command that gives an existing topic walrelay's settings.
    fn fix_command(&self) -> String {
        let settings = TOPIC_CONFIG
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        format!(
            "kafka-configs.sh --bootstrap-server {} --alter --entity-type topics --entity-name {} --add-config {settings}",
            self.brokers(),
            self.topic
        )
    }

    /// Reads the newest stored offset for this connector. Blocking.
    ///
    /// Reads every partition up to the end it had at the start. `stall`
    /// limits the time *without progress* (no record and no end of partition
    /// arriving), not the whole read, so a big topic loads as long as Kafka
    /// keeps delivering.
    pub fn load(&self, stall: Duration) -> Result<Option<StoredOffset>, OffsetStoreError> {
        let err = |message: String| OffsetStoreError::Read {
            topic: self.topic.clone(),
            message,
        };
        let started = Instant::now();
        let mut cfg = self.config();
        cfg.set(
            "group.id",
            format!("walrelay-offsets-reader-{}", self.connector),
        )
        .set("enable.auto.commit", "false")
        // Only what committed Kafka transactions hold (`exactly_once` writes
        // each position inside the transaction of the records it covers; an
        // aborted one must never be a start position). Records written
        // outside transactions (`at_least_once`) are read all the same.
        .set("isolation.level", "read_committed")
        // Tells us when a partition is read to its end.
        .set("enable.partition.eof", "true")
        // Large fetches: the default 1 MiB per partition makes a big topic a
        // long series of round trips.
        .set("max.partition.fetch.bytes", "16777216")
        .set("fetch.max.bytes", "67108864")
        .set("queued.max.messages.kbytes", "262144")
        // At the end, do not wait the default 500 ms for more data.
        .set("fetch.wait.max.ms", "100");
        let consumer: BaseConsumer<ReaderContext> = cfg
            .create_with_context(ReaderContext)
            .map_err(|e| err(e.to_string()))?;
        let md = consumer
            .fetch_metadata(Some(&self.topic), stall)
            .map_err(|e| err(format!("metadata: {e}")))?;
        let partitions: Vec<i32> = md
            .topics()
            .iter()
            .filter(|t| t.name() == self.topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        // The high watermarks, as a read_uncommitted client sees them: a
        // read_committed one is told the last stable offset instead, which
        // stops short of any record behind another producer's open
        // transaction (this connector's newest offset among them).
        let marks: BaseConsumer<ReaderContext> = self
            .config()
            .set("isolation.level", "read_uncommitted")
            .create_with_context(ReaderContext)
            .map_err(|e| err(e.to_string()))?;
        let mut tpl = TopicPartitionList::new();
        // (partition, end offset, offset reached, done)
        let mut parts: Vec<(i32, i64, i64, bool)> = Vec::new();
        for p in partitions {
            let (low, high) = marks
                .fetch_watermarks(&self.topic, p, stall)
                .map_err(|e| err(format!("watermarks of partition {p}: {e}")))?;
            if high > low {
                tpl.add_partition_offset(&self.topic, p, Offset::Offset(low))
                    .map_err(|e| err(e.to_string()))?;
                parts.push((p, high, low, false));
            }
        }
        if parts.is_empty() {
            return Ok(None);
        }
        consumer.assign(&tpl).map_err(|e| err(e.to_string()))?;
        let mut deadline = StallDeadline::new(stall, Instant::now());
        // The newest record of our key: (partition, offset, payload).
        let mut latest: Option<(i32, i64, Option<Vec<u8>>)> = None;
        // Its lease term (see [`StoredOffset::term`]).
        let mut latest_term: Option<u64> = None;
        let mut records: u64 = 0;
        while parts.iter().any(|(_, _, _, done)| !done) {
            let now = Instant::now();
            if deadline.expired(now) {
                let (partition, end, reached, _) = parts
                    .iter()
                    .find(|(_, _, _, done)| !done)
                    .copied()
                    .unwrap_or_default();
                return Err(OffsetStoreError::Stalled {
                    topic: self.topic.clone(),
                    stall,
                    partition,
                    reached,
                    end,
                    records,
                    elapsed: started.elapsed(),
                });
            }
            let msg = match consumer.poll(Duration::from_millis(100)) {
                None => continue,
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    // The end a read_committed reader sees is the last
                    // stable offset: below the high watermark while any
                    // producer's transaction on the partition is open (an
                    // exactly_once connector sharing the topic). Records
                    // behind it (this connector's newest offset among them)
                    // come only once that transaction ends: done only at
                    // the high watermark taken at the start.
                    let position = consumer
                        .position()
                        .ok()
                        .and_then(|tpl| {
                            tpl.find_partition(&self.topic, p)
                                .and_then(|e| e.offset().to_raw())
                        })
                        .unwrap_or(-1);
                    if let Some(part) = parts.iter_mut().find(|x| x.0 == p) {
                        part.2 = part.2.max(position);
                        if part.2 >= part.1 {
                            part.3 = true;
                            deadline.progressed(Instant::now());
                        }
                    }
                    continue;
                }
                Some(Err(e)) => return Err(err(e.to_string())),
                Some(Ok(msg)) => msg,
            };
            deadline.progressed(Instant::now());
            records += 1;
            if msg.key() == Some(self.connector.as_bytes()) {
                let term = msg.payload().map(record_term);
                // A record of an older lease term than the newest so far
                // was written by a holder that had lost its lease: ignored.
                let older = matches!((term, latest_term), (Some(Some(t)), Some(best)) if t < best);
                if older {
                    tracing::warn!(
                        topic = %self.topic, partition = msg.partition(), offset = msg.offset(),
                        "ignoring an offset record written by an earlier lease holder after a \
                         newer one took over (lease term {} < {})",
                        term.flatten().unwrap_or_default(),
                        latest_term.unwrap_or_default()
                    );
                } else {
                    latest_term = match term {
                        // A tombstone starts over; a record without a term
                        // (an older walrelay) keeps the term before it.
                        None => None,
                        Some(t) => t.or(latest_term),
                    };
                    latest = Some((
                        msg.partition(),
                        msg.offset(),
                        msg.payload().map(<[u8]>::to_vec),
                    ));
                }
            }
            if let Some(part) = parts.iter_mut().find(|x| x.0 == msg.partition()) {
                part.2 = msg.offset() + 1;
                if part.2 >= part.1 {
                    part.3 = true;
                }
            }
        }
        let elapsed = started.elapsed();
        if records > BIG_TOPIC_RECORDS {
            tracing::warn!(
                topic = %self.topic, records, ?elapsed,
                "the offset topic is big; check that it is compacted (docs/operations.md, \"Offset store\")"
            );
        } else {
            tracing::debug!(topic = %self.topic, records, ?elapsed, "read the offset topic");
        }
        let Some((partition, offset, payload)) = latest else {
            return Ok(None);
        };
        let Some(payload) = payload else {
            return Ok(None); // a tombstone: the offset was deleted
        };
        serde_json::from_slice(&payload)
            .map(Some)
            .map_err(|e| OffsetStoreError::BadRecord {
                topic: self.topic.clone(),
                connector: self.connector.clone(),
                partition,
                offset,
                message: e.to_string(),
            })
    }
}

/// The lease term an offset record's JSON carries, if any.
fn record_term(payload: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Term {
        #[serde(default)]
        term: Option<u64>,
    }
    serde_json::from_slice::<Term>(payload).ok()?.term
}

/// Why a topic with this `cleanup.policy` cannot hold offsets, if it cannot.
fn not_compacted_because(policy: &str) -> Option<&'static str> {
    let mut compact = false;
    let mut delete = false;
    for p in policy.split(',').map(str::trim) {
        match p {
            "compact" => compact = true,
            "delete" => delete = true,
            _ => {}
        }
    }
    match (compact, delete) {
        (true, false) => None,
        (true, true) => Some(
            "with `delete` as well, the broker removes a stopped connector's only offset after retention.ms, and the start-up check can then no longer notice a recreated slot",
        ),
        (false, _) => Some(
            "without compaction the topic grows by every offset ever written (about one a second per connector) and each start reads all of it",
        ),
    }
}

/// The broker's name for an authorization failure, if `code` is one.
fn denied(code: RDKafkaErrorCode) -> Option<&'static str> {
    match code {
        RDKafkaErrorCode::TopicAuthorizationFailed => Some("TOPIC_AUTHORIZATION_FAILED"),
        RDKafkaErrorCode::ClusterAuthorizationFailed => Some("CLUSTER_AUTHORIZATION_FAILED"),
        _ => None,
    }
}

/// Properties that apply to any client (not producer-only ones).
fn is_client_property(key: &str) -> bool {
    key == "bootstrap.servers"
        || key == "client.id"
        || key.starts_with("security.")
        || key.starts_with("ssl.")
        || key.starts_with("sasl.")
        || key == "socket.timeout.ms"
        || key == "broker.address.family"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(lsn: &str) -> StoredOffset {
        StoredOffset {
            connector: "c".into(),
            system_id: "7".into(),
            timeline: 1,
            slot: "s".into(),
            lsn: lsn.into(),
            written_at_ms: 0,
            committed_at_ms: None,
            snapshot: None,
            accepted_gap: None,
            incremental: None,
            known_tables: Vec::new(),
            term: None,
        }
    }

    const SERVER: Server<'static> = Server {
        system_id: "7",
        timeline: 1,
        history: None,
    };

    fn slot(lsn: u64, status: &str) -> SlotPosition {
        SlotPosition {
            confirmed_flush: Lsn(lsn),
            wal_status: Some(status.into()),
        }
    }

    #[test]
    fn no_stored_offset_resumes_from_slot() {
        assert_eq!(
            compare(None, &slot(5, "reserved"), &SERVER, "s"),
            StartDecision::Resume { from: Lsn(5) }
        );
    }

    /// A slot behind the stored offset (PostgreSQL forgot its progress)
    /// resumes at the stored offset: nothing below it is sent again.
    #[test]
    fn slot_behind_or_equal_resumes_at_the_stored_offset() {
        let s = stored("0/A");
        assert_eq!(
            compare(Some(&s), &slot(5, "reserved"), &SERVER, "s"),
            StartDecision::Resume { from: Lsn(10) }
        );
        assert_eq!(
            compare(Some(&s), &slot(10, "reserved"), &SERVER, "s"),
            StartDecision::Resume { from: Lsn(10) }
        );
    }

    #[test]
    fn slot_ahead_refuses_with_hint() {
        match compare(Some(&stored("0/A")), &slot(11, "reserved"), &SERVER, "s") {
            StartDecision::Refuse { reason, hint } => {
                assert!(
                    reason.contains("0/0000000B") && reason.contains("0/0000000A"),
                    "{reason}"
                );
                assert!(hint.contains("--accept-slot-position"), "{hint}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lost_slot_refuses_even_without_offset() {
        assert!(matches!(
            compare(None, &slot(1, "lost"), &SERVER, "s"),
            StartDecision::Refuse { .. }
        ));
    }

    #[test]
    fn other_cluster_refuses() {
        assert!(matches!(
            compare(
                Some(&stored("0/1")),
                &slot(1, "reserved"),
                &Server {
                    system_id: "8",
                    ..SERVER
                },
                "s"
            ),
            StartDecision::Refuse { .. }
        ));
    }

    fn refused(d: StartDecision) -> (String, String) {
        match d {
            StartDecision::Refuse { reason, hint } => (reason, hint),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn offset_of_another_slot_refuses_with_hint() {
        let (reason, hint) = refused(compare(
            Some(&stored("0/A")),
            &slot(5, "reserved"),
            &SERVER,
            "other_slot",
        ));
        assert!(
            reason.contains("\"s\"") && reason.contains("\"other_slot\""),
            "{reason}"
        );
        assert!(
            hint.contains("postgres.slot") && hint.contains("--accept-slot-position"),
            "{hint}"
        );
    }

    /// A point-in-time restore: same system, new timeline, the slot (from the
    /// backup) behind the stored offset — which the old rule resumed from.
    #[test]
    fn other_timeline_refuses_when_the_switch_point_is_unknown() {
        let on_tl2 = Server {
            timeline: 2,
            ..SERVER
        };
        let (reason, hint) = refused(compare(
            Some(&stored("0/A")),
            &slot(5, "reserved"),
            &on_tl2,
            "s",
        ));
        assert!(
            reason.contains("timeline 1") && reason.contains("timeline 2"),
            "{reason}"
        );
        assert!(
            hint.contains("00000002.history") && hint.contains("--accept-slot-position"),
            "{hint}"
        );
    }

    #[test]
    fn stored_offset_after_the_switch_point_refuses() {
        // Restored (or failed over) to 0/8, the stored offset is 0/A: LSNs
        // 0/8..0/A name different changes on the two timelines.
        let server = Server {
            timeline: 2,
            history: Some("1\t0/8\tno recovery target specified\n"),
            ..SERVER
        };
        refused(compare(
            Some(&stored("0/A")),
            &slot(5, "reserved"),
            &server,
            "s",
        ));
    }

    #[test]
    fn stored_offset_from_a_later_timeline_refuses() {
        let mut s = stored("0/A");
        s.timeline = 3;
        let server = Server {
            timeline: 2,
            history: Some("1\t0/100\tno recovery target specified\n"),
            ..SERVER
        };
        refused(compare(Some(&s), &slot(5, "reserved"), &server, "s"));
    }

    #[test]
    fn the_switch_point_of_each_ancestor_timeline_is_read_from_the_history() {
        // PostgreSQL's format: blank lines between entries, a tab after each
        // field, the reason free text.
        let history = "1\t0/3000158\tno recovery target specified\n\n\
                       2\t0/5000108\tbefore 2026-11-30 12:00:00+00\n";
        assert_eq!(switch_point(history, 1), Some("0/3000158".parse().unwrap()));
        assert_eq!(switch_point(history, 2), Some("0/5000108".parse().unwrap()));
        assert_eq!(switch_point(history, 3), None, "not an ancestor");
        assert_eq!(switch_point("", 1), None);
        assert_eq!(switch_point("# comment\nnonsense\n1 zz\n", 1), None);
        // A stored offset on timeline 1 after the switch to 2 is refused on
        // timeline 3 too; at the switch point it resumes.
        let server = Server {
            timeline: 3,
            history: Some(history),
            ..SERVER
        };
        refused(compare(
            Some(&stored("0/3000160")),
            &slot(5, "reserved"),
            &server,
            "s",
        ));
        assert_eq!(
            compare(
                Some(&stored("0/3000158")),
                &slot(5, "reserved"),
                &server,
                "s"
            ),
            StartDecision::Resume {
                from: "0/3000158".parse().unwrap()
            }
        );
    }

    /// A failover to a standby with a synced slot: the history is continuous
    /// up to the switch point, which is at or after the stored offset.
    #[test]
    fn failover_with_continuous_history_resumes_and_still_checks_the_slot() {
        let server = Server {
            timeline: 2,
            history: Some("1\t0/A\tno recovery target specified\n"),
            ..SERVER
        };
        let s = stored("0/A");
        assert_eq!(
            compare(Some(&s), &slot(5, "reserved"), &server, "s"),
            StartDecision::Resume { from: Lsn(10) }
        );
        assert_eq!(
            compare(Some(&s), &slot(10, "reserved"), &server, "s"),
            StartDecision::Resume { from: Lsn(10) }
        );
        refused(compare(Some(&s), &slot(11, "reserved"), &server, "s"));
    }

    #[test]
    fn stall_deadline_moves_with_progress() {
        let t0 = Instant::now();
        let stall = Duration::from_secs(10);
        let mut d = StallDeadline::new(stall, t0);
        // 30 s of reading with progress every 6 s never expires.
        for i in 1..=5 {
            let now = t0 + Duration::from_secs(6 * i);
            assert!(!d.expired(now), "expired at {i}");
            d.progressed(now);
        }
        let last = t0 + Duration::from_secs(30);
        assert!(!d.expired(last + stall));
        assert!(d.expired(last + stall + Duration::from_millis(1)));
    }

    /// A refused ACL is definite (no retry loop) and names the operation
    /// and the kafka-acls command.
    #[test]
    fn a_refused_acl_is_definite_and_names_the_grant() {
        assert_eq!(
            denied(RDKafkaErrorCode::TopicAuthorizationFailed),
            Some("TOPIC_AUTHORIZATION_FAILED")
        );
        assert_eq!(denied(RDKafkaErrorCode::BrokerTransportFailure), None);
        let e = OffsetStoreError::Denied {
            topic: "walrelay.offsets".into(),
            operation: "Create",
            code: "TOPIC_AUTHORIZATION_FAILED",
        };
        assert!(!e.is_transient());
        let text = e.to_string();
        assert!(
            text.contains("refuse walrelay Create on offset topic \"walrelay.offsets\""),
            "{text}"
        );
        assert!(
            text.contains("--operation Create --operation DescribeConfigs"),
            "{text}"
        );
        assert!(text.contains("--topic walrelay.offsets"), "{text}");
    }

    #[test]
    fn only_a_purely_compacted_topic_is_accepted() {
        assert_eq!(not_compacted_because("compact"), None);
        assert!(not_compacted_because("delete").is_some());
        assert!(not_compacted_because("compact,delete").is_some());
        assert!(not_compacted_because("delete, compact").is_some());
        assert!(not_compacted_because("").is_some());
    }

    #[test]
    fn the_fix_gives_the_topic_our_settings() {
        let store = OffsetStore::new(
            &[("bootstrap.servers".into(), "k1:9092".into())],
            "walrelay.offsets",
            "c",
        );
        let fix = store.fix_command();
        assert!(
            fix.starts_with(
                "kafka-configs.sh --bootstrap-server k1:9092 --alter --entity-type topics --entity-name walrelay.offsets --add-config cleanup.policy=compact,segment.ms=3600000,"
            ),
            "{fix}"
        );
        assert!(
            !OffsetStoreError::NotCompacted {
                topic: "t".into(),
                policy: "delete".into(),
                why: "",
                fix,
            }
            .is_transient()
        );
    }

    #[test]
    fn record_round_trip() {
        let s = stored("1/2");
        let r = s.to_record("t");
        let back: StoredOffset = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        assert_eq!(back, s);
        assert_eq!(r.key.as_deref(), Some(&b"c"[..]));
    }
}
