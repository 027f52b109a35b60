//! Table change events in the relay: hands `[[table]]` changes and
//! snapshot rows to [`crate::router::table::TableRouter`] and sends the
//! records it makes, each counted by the checkpoint like any other record,
//! so a change (with its tombstone) is confirmed only when Kafka holds all
//! of its records. With `provide_transaction_metadata` the router also
//! makes a transaction's BEGIN record (with its first event) and END record
//! (at its Commit, sent before the transaction closes in the checkpoint):
//! they count for their transaction like its events, and under
//! `exactly_once` are in its Kafka transaction.
//!
//! [`TableEvents`] is the phase's state (the table router, the snapshot
//! rows held for their `source.snapshot` marker); it publishes through the
//! session's [`Publisher`], like every phase.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::RelayError;
use super::dead_letter::{self, Failure, Reason};
use super::publish::{Counted, Publisher};
use crate::Lsn;
use crate::checkpoint::TxnId;
use crate::config::Config;
use crate::pgoutput::{Relation, TupleData};
use crate::router::Record;
use crate::router::table::{SnapshotMarker, TableRouter, TxnInfo};
use crate::source::{Change, Position, Txn};
use crate::startup::TableEventTable;

/// Table change events (`[[table]]`): the phase's state.
pub(super) struct TableEvents {
    router: TableRouter,
    /// The records of one table change, reused.
    records: Vec<Record>,
    /// Where the `[[table]]` snapshot rows stand (`source.snapshot`).
    marks: SnapshotMarks,
    /// When the initial snapshot started, ms since 1970 (`source.ts_ms` of
    /// its rows).
    snapshot_ms: i64,
}

/// A snapshot row of a `[[table]]` table waiting to learn whether it is
/// its table's last, or the snapshot's.
#[derive(Debug)]
struct HeldRow {
    txn: TxnId,
    pos: Position,
    relation: Arc<Relation>,
    row: TupleData,
    /// The snapshot batch it came in: what its acknowledgement counts for.
    chunk: u32,
    first_in_snapshot: bool,
    first_in_table: bool,
}

/// The `[[table]]` snapshot rows not sent yet, so that each can be given
/// its `source.snapshot` marker ([`SnapshotMarker`]) from where it stands:
/// a row is sent once the next row of its table arrives (it was not the
/// table's last) or its table is read (it was). A table's last row waits
/// once more, until another table's last row or the end of the snapshot
/// shows whether it was the snapshot's last. At most one row per table
/// being read, plus one, is held.
#[derive(Debug, Default)]
struct SnapshotMarks {
    /// Per table (its index in the snapshot's tables): its latest row.
    held: BTreeMap<u32, HeldRow>,
    /// The last row of the table read most recently.
    table_last: Option<HeldRow>,
    /// Whether a `[[table]]` row was read in this snapshot already.
    any_read: bool,
}

/// The relation's `REPLICA IDENTITY`, for log lines.
fn identity_name(rel: &Relation) -> &'static str {
    match rel.replica_identity {
        b'd' => "DEFAULT",
        b'f' => "FULL",
        b'i' if rel.key_columns().next().is_none() => {
            "USING INDEX of a dropped index (PostgreSQL treats it as NOTHING)"
        }
        b'i' => "USING INDEX",
        b'n' => "NOTHING",
        _ => "unknown",
    }
}

impl TableEvents {
    pub(super) fn new(config: &Config) -> TableEvents {
        TableEvents {
            router: TableRouter::new(config),
            records: Vec::new(),
            marks: SnapshotMarks::default(),
            snapshot_ms: 0,
        }
    }

    /// Whether `oid` is a `[[table]]` table's relation.
    pub(super) fn claims(&self, oid: u32) -> bool {
        self.router.claims(oid)
    }

    /// The initial snapshot's time, ms since 1970: its rows' `source.ts_ms`.
    pub(super) fn set_snapshot_ms(&mut self, snapshot_ms: i64) {
        self.snapshot_ms = snapshot_ms;
    }

    /// The initial snapshot starts: no row held.
    pub(super) fn snapshot_begins(&mut self) {
        self.marks = SnapshotMarks::default();
    }

    /// A streamed Relation message: (re)binds a `[[table]]` relation. Its
    /// key follows the relation from here on — a replica identity changed
    /// by `ALTER TABLE … REPLICA IDENTITY` moves the key of a table keyed by
    /// its identity (USING INDEX) — and a moved key is said once, naming the
    /// table, the position and both keys: a row's events before and after
    /// it have different keys (partitions, compaction). A new identity that
    /// leaves a configured key outside it stops the connector at `lsn`,
    /// before any change decoded with it.
    pub(super) fn on_relation(&mut self, rel: &Relation, lsn: Lsn) -> Result<(), RelayError> {
        let before: Option<Vec<String>> = self
            .router
            .key_names(rel.oid)
            .map(|k| k.into_iter().map(str::to_owned).collect());
        let warning = self.router.on_relation(rel, lsn).map_err(|mut e| {
            if before.is_some() {
                e.fix = format!(
                    "the table's shape changed in the stream at {lsn} (REPLICA IDENTITY {} now) \
                     and every change after it is decoded with that shape, so altering the table \
                     back does not help them: set key_columns of this [[table]] section to \
                     columns of the new identity (the key of its events changes), or skip \
                     deletes (skipped_operations), then start again",
                    identity_name(rel)
                );
            }
            e
        })?;
        if let Some(warning) = warning {
            tracing::warn!("{warning}");
        }
        let after = self.router.key_names(rel.oid);
        let table = format!("{}.{}", rel.namespace, rel.name);
        let shown = |k: &[&str]| {
            if k.is_empty() {
                "a null key".to_owned()
            } else {
                format!("({})", k.join(", "))
            }
        };
        match (before, after) {
            (None, Some(after)) => tracing::info!(
                %table, %lsn, key = %shown(&after),
                replica_identity = identity_name(rel),
                "table events of {table} are keyed by {}", shown(&after)
            ),
            (Some(before), Some(after)) if before != after => {
                let before: Vec<&str> = before.iter().map(String::as_str).collect();
                tracing::warn!(
                    %table, %lsn, before = %shown(&before), after = %shown(&after),
                    replica_identity = identity_name(rel),
                    "the key of {table}'s events changes at {lsn} from {} to {}: the table's \
                     replica identity is REPLICA IDENTITY {} from here on (ALTER TABLE … \
                     REPLICA IDENTITY, or its identity index dropped), and events without \
                     key_columns are keyed by the identity index's columns, else the primary \
                     key. A row's events before and after this point have different keys \
                     (possibly partitions) and compaction keeps the records of the old key; set \
                     key_columns to keep one key",
                    shown(&before),
                    shown(&after),
                    identity_name(rel)
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// Tells the table router the primary keys, `NOT NULL` columns, enum
    /// labels and user-defined types the catalog knows.
    pub(super) fn set_primary_keys(&mut self, tables: &[TableEventTable]) {
        for t in tables {
            tracing::debug!(
                table = %format!("{}.{}", t.table.schema, t.table.name),
                primary_key = ?t.primary_key,
                type_aliases = ?t.type_aliases,
                not_null = ?t.not_null,
                "captured table"
            );
            self.router
                .set_primary_key(&t.table.schema, &t.table.name, t.primary_key.clone());
            self.router
                .set_not_null(&t.table.schema, &t.table.name, t.not_null.clone());
            for (oid, labels) in &t.enum_labels {
                self.router.set_enum_labels(*oid, labels.clone());
            }
            for &(oid, as_oid, typmod) in &t.type_aliases {
                self.router.set_type_alias(oid, as_oid, typmod);
            }
        }
    }

    /// Logs what the router says once (a schema widened by the stream).
    fn log_notices(&mut self) {
        for notice in self.router.take_notices() {
            tracing::warn!("{notice}");
        }
    }

    /// A transaction begins (its Begin message at `begin_lsn`): the table
    /// router counts its events for the transaction metadata.
    pub(super) fn transaction_begins(
        &mut self,
        commit_lsn: Lsn,
        xid: u32,
        commit_time: i64,
        begin_lsn: Lsn,
    ) {
        let txn = TxnInfo {
            commit_lsn,
            xid,
            commit_ms: crate::pg::replication::pg_us_to_unix_ms(commit_time),
        };
        self.router.on_begin(txn, begin_lsn);
    }

    /// The open transaction `open`, committed at `commit_lsn`, ends at
    /// `end_lsn`: publishes its END record, if it has one, as a record of
    /// that transaction.
    pub(super) async fn transaction_ends(
        &mut self,
        publisher: &mut Publisher,
        open: TxnId,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_ms: i64,
    ) -> Result<(), RelayError> {
        if !self.router.provides_transaction_metadata() {
            return Ok(());
        }
        let mut records = std::mem::take(&mut self.records);
        records.clear();
        if let Err(e) = self.router.on_commit(commit_lsn, end_lsn, &mut records) {
            self.records = records;
            return Err(e.into());
        }
        let pos = Position {
            commit_lsn,
            index: u64::MAX,
        };
        let sent = publisher
            .publish_all(
                None,
                &mut records,
                open,
                pos,
                Counted::Streamed { commit_ms },
            )
            .await;
        self.records = records;
        sent
    }

    /// Publishes the records of one `[[table]]` change.
    pub(super) async fn on_change(
        &mut self,
        publisher: &mut Publisher,
        change: &Change,
        open: TxnId,
    ) -> Result<(), RelayError> {
        let txn = txn_info(change.pos, change.txn);
        let mut records = std::mem::take(&mut self.records);
        records.clear();
        let made = self.router.on_change(change, txn, &mut records);
        self.log_notices();
        let sent = match made {
            Err(e) if publisher.has_dead_letter() => {
                let row = change.new.as_ref().or(change.old.as_ref());
                let failure = Failure {
                    reason: Reason::Unencodable,
                    error: e.to_string(),
                    table: e.table,
                    pos: change.pos,
                    id: None,
                    topic: self
                        .router
                        .topic_of(change.relation.oid)
                        .map(|t| t.to_string()),
                    key: None,
                    value: row.map(|row| dead_letter::row_json(&change.relation, row)),
                    refused_bytes: None,
                };
                publisher
                    .publish_dead_letter(
                        open,
                        failure,
                        Counted::Streamed {
                            commit_ms: txn.commit_ms,
                        },
                    )
                    .await
            }
            Ok(()) => {
                publisher
                    .publish_all(
                        Some(&change.relation),
                        &mut records,
                        open,
                        change.pos,
                        Counted::Streamed {
                            commit_ms: txn.commit_ms,
                        },
                    )
                    .await
            }
            Err(e) => Err(e.into()),
        };
        self.records = records;
        sent
    }

    /// Publishes the `op: "t"` records of a TRUNCATE: one per truncated
    /// `[[table]]` table whose `skipped_operations` do not skip truncates,
    /// each at its own position (`pos.index + k` for the k-th relation).
    /// Outbox tables and other tables publish nothing.
    pub(super) async fn on_truncate(
        &mut self,
        publisher: &mut Publisher,
        pos: Position,
        txn: Txn,
        lsn: Lsn,
        relations: &[Arc<Relation>],
    ) -> Result<(), RelayError> {
        let open = publisher.open_txn(pos.commit_lsn)?;
        let txn = txn_info(pos, txn);
        for (k, relation) in relations.iter().enumerate() {
            let index = pos.index.saturating_add(k as u64);
            let mut records = std::mem::take(&mut self.records);
            records.clear();
            let made = self
                .router
                .on_truncate(relation.oid, txn, lsn, index, &mut records);
            self.log_notices();
            let sent = match made {
                Ok(()) => {
                    let pos = Position {
                        commit_lsn: pos.commit_lsn,
                        index,
                    };
                    let counted = Counted::Streamed {
                        commit_ms: txn.commit_ms,
                    };
                    publisher
                        .publish_all(Some(relation), &mut records, open, pos, counted)
                        .await
                }
                Err(e) => Err(e.into()),
            };
            self.records = records;
            sent?;
        }
        Ok(())
    }

    /// Publishes a snapshot row of a `[[table]]` table (`op: "r"`), one
    /// row late (see [`SnapshotMarks`]). The caller counts it as sent for
    /// its table at once, so the table is not reported done before it is
    /// acknowledged.
    pub(super) async fn publish_snapshot_row(
        &mut self,
        publisher: &mut Publisher,
        txn: TxnId,
        pos: Position,
        relation: &Arc<Relation>,
        row: &TupleData,
        (table_index, chunk): (Option<u32>, u32),
    ) -> Result<(), RelayError> {
        let marks = &mut self.marks;
        let slot = table_index.unwrap_or(u32::MAX);
        let first_in_table = !marks.held.contains_key(&slot);
        let first_in_snapshot = !std::mem::replace(&mut marks.any_read, true);
        let previous = marks.held.insert(
            slot,
            HeldRow {
                txn,
                pos,
                relation: relation.clone(),
                row: row.clone(),
                chunk,
                first_in_snapshot,
                first_in_table,
            },
        );
        match previous {
            Some(held) => self.send_held_row(publisher, held, false, false).await,
            None => Ok(()),
        }
    }

    /// Table `table_index` of the snapshot was read: its held row was its
    /// last; the previous table's last row was not the snapshot's.
    pub(super) async fn snapshot_table_read(
        &mut self,
        publisher: &mut Publisher,
        table_index: u32,
    ) -> Result<(), RelayError> {
        let Some(last) = self.marks.held.remove(&table_index) else {
            return Ok(());
        };
        match self.marks.table_last.replace(last) {
            Some(previous) => self.send_held_row(publisher, previous, true, false).await,
            None => Ok(()),
        }
    }

    /// At the end of the snapshot: sends the rows still held, the last one
    /// read as the snapshot's last.
    pub(super) async fn snapshot_read(
        &mut self,
        publisher: &mut Publisher,
    ) -> Result<(), RelayError> {
        // Every table reports being read before the snapshot ends; rows of
        // one that did not are still its last.
        let unread: Vec<u32> = self.marks.held.keys().copied().collect();
        for table_index in unread {
            self.snapshot_table_read(publisher, table_index).await?;
        }
        match self.marks.table_last.take() {
            Some(last) => self.send_held_row(publisher, last, true, true).await,
            None => Ok(()),
        }
    }

    async fn send_held_row(
        &mut self,
        publisher: &mut Publisher,
        held: HeldRow,
        last_in_table: bool,
        last_in_snapshot: bool,
    ) -> Result<(), RelayError> {
        let marker = SnapshotMarker::of(
            held.first_in_snapshot,
            last_in_snapshot,
            held.first_in_table,
            last_in_table,
        );
        let mut records = std::mem::take(&mut self.records);
        records.clear();
        let made = self.router.on_snapshot_row(
            held.relation.oid,
            &held.row,
            held.pos.commit_lsn,
            held.pos.index,
            self.snapshot_ms,
            marker,
            &mut records,
        );
        self.log_notices();
        let sent = match made {
            Ok(()) => {
                let counted = Counted::SnapshotTable(held.chunk);
                publisher
                    .publish_all(
                        Some(&held.relation),
                        &mut records,
                        held.txn,
                        held.pos,
                        counted,
                    )
                    .await
            }
            Err(e) => Err(e.into()),
        };
        self.records = records;
        sent
    }

    /// An incremental snapshot's chunk is read with `relation`'s shape
    /// (maybe not the stream's): the router takes it until
    /// [`TableEvents::rebind`] puts the stream's back.
    pub(super) fn rebind(&mut self, relation: &Relation, lsn: Lsn) -> Result<(), RelayError> {
        if let Some(warning) = self.router.on_relation(relation, lsn)? {
            tracing::warn!("{warning}");
        }
        Ok(())
    }

    /// Publishes one row of an incremental snapshot chunk at `pos` (the
    /// chunk's high watermark), `op: "r"`, as a record of transaction `txn`.
    pub(super) async fn publish_chunk_row(
        &mut self,
        publisher: &mut Publisher,
        txn: TxnId,
        pos: Position,
        relation: &Relation,
        row: &TupleData,
        now_ms: i64,
    ) -> Result<(), RelayError> {
        let mut records = std::mem::take(&mut self.records);
        records.clear();
        let made = self.router.on_snapshot_row(
            relation.oid,
            row,
            pos.commit_lsn,
            pos.index,
            now_ms,
            SnapshotMarker::Incremental,
            &mut records,
        );
        self.log_notices();
        let sent = match made {
            Ok(()) => {
                publisher
                    .publish_all(None, &mut records, txn, pos, Counted::Other)
                    .await
            }
            Err(e) => Err(e.into()),
        };
        self.records = records;
        sent
    }
}

/// The router's view of the transaction at `pos`.
fn txn_info(pos: Position, txn: Txn) -> TxnInfo {
    TxnInfo {
        commit_lsn: pos.commit_lsn,
        xid: txn.xid,
        commit_ms: crate::pg::replication::pg_us_to_unix_ms(txn.commit_time),
    }
}
