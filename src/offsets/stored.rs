//! The stored schema: what one offset record holds, and its JSON.
//!
//! A [`StoredOffset`] is the value of a record in the offset topic, keyed by
//! connector name. Its JSON is read back by every later walrelay, and by
//! older ones after a downgrade, so it only grows: a field added later is
//! optional (`#[serde(default)]`) and left out when empty, and no field
//! changes its written form. The LSN is a typed [`Lsn`] in memory and
//! `X/YYYYYYYY` text in the record, exactly what walrelay always wrote.

use serde::{Deserialize, Serialize};

use crate::Lsn;
use crate::router::Record;

/// What is stored per connector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredOffset {
    pub connector: String,
    pub system_id: String,
    pub timeline: u32,
    pub slot: String,
    /// Confirmed position, stored as `X/YYYYYYYY` text (what operators
    /// compare by eye; `lsn_text`).
    #[serde(with = "lsn_text")]
    pub lsn: Lsn,
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
/// whatever happens next, a restart knows a snapshot was under way. Its
/// exported snapshot died with its connection; a restart that finds the
/// slot still at `consistent_point` and the snapshot's `taken` and
/// `shapes` stored *resumes* it: the tables not in `tables_done` are read
/// again, only their rows `taken` saw, and streaming goes on from the same
/// slot. Otherwise it drops the slot this connector created and takes the
/// snapshot again (re-sending, never skipping). `completed` is written only
/// after Kafka acknowledged every snapshot record; only then does
/// streaming start.
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
    /// The exported snapshot the readers read in, as
    /// `pg_current_snapshot()` printed it (`xmin:xmax:xip,…`): what a
    /// resumed snapshot's reads select by (`pg::snapshot::EXISTED_IN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken: Option<String>,
    /// The tables' shapes in that snapshot (oid, name, storage, columns):
    /// after a table was rewritten or changed since, a resumed snapshot
    /// reads without the `xmin` filter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<(u32, String)>,
    /// How many times this snapshot was resumed (0: its first attempt).
    /// Each attempt numbers its rows apart (`source::SNAPSHOT_ATTEMPT_SHIFT`),
    /// so that a `[[table]]` snapshot event id names one row for good.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempt: u32,
    /// Per part of a table not done (one per reader: `part` of `of`), the
    /// key of the last row up to which Kafka holds every row of the part: a
    /// resumed snapshot reads the part from after it, with as many readers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<SnapshotPart>,
}

/// How far one reader's part of a table got (see [`SnapshotProgress::parts`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPart {
    /// `schema.table`.
    pub table: String,
    pub part: u32,
    pub of: u32,
    /// The part's read key's values (text) of its last row Kafka holds,
    /// with every row before it.
    pub after: Vec<Option<String>>,
    /// The read key's columns `after` is in. Empty (stored by an older
    /// version): never used, the table is read again whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// `running` or `completed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotState {
    Running,
    Completed,
}

impl StoredOffset {
    /// An offset of connector `connector` on slot `s` of system
    /// `system_id`, timeline 1, at `lsn`; every optional part absent.
    #[cfg(test)]
    pub(crate) fn for_tests(connector: &str, system_id: &str, lsn: Lsn) -> StoredOffset {
        StoredOffset {
            connector: connector.into(),
            system_id: system_id.into(),
            timeline: 1,
            slot: "s".into(),
            lsn,
            written_at_ms: 0,
            committed_at_ms: None,
            snapshot: None,
            accepted_gap: None,
            incremental: None,
            known_tables: Vec::new(),
            term: None,
        }
    }

    /// Whether this offset says a snapshot was started and never completed.
    pub fn snapshot_interrupted(&self) -> bool {
        self.snapshot
            .as_ref()
            .is_some_and(|s| s.state == SnapshotState::Running)
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

/// The stored LSN's form: [`Lsn`]'s `Display` (`X/YYYYYYYY`) when written,
/// its `FromStr` when read. A record whose LSN is not of that form does not
/// read (the offset store reports it as a bad record).
mod lsn_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::Lsn;

    pub(super) fn serialize<S: Serializer>(lsn: &Lsn, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(lsn)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Lsn, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
