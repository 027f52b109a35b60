//! Table change events in the relay: hands `[[table]]` changes and
//! snapshot rows to [`crate::router::table::TableRouter`] and sends the
//! records it makes, each counted by the checkpoint like any other record,
//! so a change (with its tombstone) is confirmed only when Kafka holds all
//! of its records. With `provide_transaction_metadata` the router also
//! makes a transaction's BEGIN record (with its first event) and END record
//! (at its Commit, sent before the transaction closes in the checkpoint):
//! they count for their transaction like its events, and under
//! `exactly_once` are in its Kafka transaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::RelayError;
use super::dead_letter::{self, Failure, Reason};
use super::streaming::{Counted, Streaming};
use crate::Lsn;
use crate::checkpoint::TxnId;
use crate::pgoutput::{Relation, TupleData};
use crate::router::table::{SnapshotMarker, TxnInfo};
use crate::source::{Change, Position, Txn};
use crate::startup::TableEventTable;

/// A snapshot row of a `[[table]]` table waiting to learn whether it is
/// its table's last, or the snapshot's.
#[derive(Debug)]
pub(super) struct HeldRow {
    txn: TxnId,
    pos: Position,
    relation: Arc<Relation>,
    row: TupleData,
    table_index: Option<u32>,
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
pub(super) struct SnapshotMarks {
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

impl Streaming {
    /// A streamed Relation message: (re)binds a `[[table]]` relation. Its
    /// key follows the relation from here on — a replica identity changed
    /// by `ALTER TABLE … REPLICA IDENTITY` moves the key of a table keyed by
    /// its identity (USING INDEX) — and a moved key is said once, naming the
    /// table, the position and both keys: a row's events before and after
    /// it have different keys (partitions, compaction). A new identity that
    /// leaves a configured key outside it stops the connector at `lsn`,
    /// before any change decoded with it.
    pub(super) fn on_table_relation(&mut self, rel: &Relation, lsn: Lsn) -> Result<(), RelayError> {
        let before: Option<Vec<String>> = self
            .tables
            .key_names(rel.oid)
            .map(|k| k.into_iter().map(str::to_owned).collect());
        let warning = self.tables.on_relation(rel, lsn).map_err(|mut e| {
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
        let after = self.tables.key_names(rel.oid);
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

    /// Tells the table router the primary keys and user-defined types the
    /// catalog knows.
    pub(super) fn set_primary_keys(&mut self, tables: &[TableEventTable]) {
        for t in tables {
            tracing::debug!(
                table = %format!("{}.{}", t.table.schema, t.table.name),
                primary_key = ?t.primary_key,
                type_aliases = ?t.type_aliases,
                "captured table"
            );
            self.tables
                .set_primary_key(&t.table.schema, &t.table.name, t.primary_key.clone());
            for &(oid, as_oid, typmod) in &t.type_aliases {
                self.tables.set_type_alias(oid, as_oid, typmod);
            }
        }
    }

    /// A transaction begins (its Begin message at `begin_lsn`): the table
    /// router counts its events for the transaction metadata.
    pub(super) fn table_transaction_begins(
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
        self.tables.on_begin(txn, begin_lsn);
    }

    /// The open transaction `open`, committed at `commit_lsn`, ends at
    /// `end_lsn`: publishes its END record, if it has one, as a record of
    /// that transaction.
    pub(super) async fn table_transaction_ends(
        &mut self,
        open: TxnId,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_ms: i64,
    ) -> Result<(), RelayError> {
        if !self.tables.provides_transaction_metadata() {
            return Ok(());
        }
        let mut records = std::mem::take(&mut self.table_records);
        records.clear();
        self.tables.on_commit(commit_lsn, end_lsn, &mut records);
        let pos = Position {
            commit_lsn,
            index: u64::MAX,
        };
        let sent = self
            .send_table_records(&mut records, open, pos, Counted::Streamed { commit_ms })
            .await;
        self.table_records = records;
        sent
    }

    /// Whether `change` is a table event (of a `[[table]]` table).
    pub(super) fn is_table_change(&self, change: &Change) -> bool {
        self.tables.claims(change.relation.oid)
    }

    /// Publishes the records of one `[[table]]` change.
    pub(super) async fn on_table_change(
        &mut self,
        change: &Change,
        open: TxnId,
    ) -> Result<(), RelayError> {
        let txn = txn_info(change.pos, change.txn);
        let mut records = std::mem::take(&mut self.table_records);
        records.clear();
        let made = self.tables.on_change(change, txn, &mut records);
        if self.dead_letter.is_some() {
            self.publishing = Some(change.relation.clone());
        }
        let sent = match made {
            Err(e) if self.dead_letter.is_some() => {
                let row = change.new.as_ref().or(change.old.as_ref());
                let failure = Failure {
                    reason: Reason::Unencodable,
                    error: e.to_string(),
                    table: e.table,
                    pos: change.pos,
                    id: None,
                    topic: self
                        .tables
                        .topic_of(change.relation.oid)
                        .map(|t| t.to_string()),
                    key: None,
                    value: row.map(|row| dead_letter::row_json(&change.relation, row)),
                    refused_bytes: None,
                };
                self.publish_dead_letter(
                    open,
                    failure,
                    Counted::Streamed {
                        commit_ms: txn.commit_ms,
                    },
                )
                .await
            }
            Ok(()) => {
                self.send_table_records(
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
        self.publishing = None;
        self.table_records = records;
        sent
    }

    /// Publishes the `op: "t"` records of a TRUNCATE: one per truncated
    /// `[[table]]` table whose `skipped_operations` do not skip truncates,
    /// each at its own position (`pos.index + k` for the k-th relation).
    /// Outbox tables and other tables publish nothing.
    pub(super) async fn on_truncate(
        &mut self,
        pos: Position,
        txn: Txn,
        lsn: Lsn,
        relations: &[Arc<Relation>],
    ) -> Result<(), RelayError> {
        let open = self.open_txn(pos.commit_lsn)?;
        let txn = txn_info(pos, txn);
        for (k, relation) in relations.iter().enumerate() {
            let index = pos.index.saturating_add(k as u64);
            let mut records = std::mem::take(&mut self.table_records);
            records.clear();
            let made = self
                .tables
                .on_truncate(relation.oid, txn, lsn, index, &mut records);
            let sent = match made {
                Ok(()) => {
                    let pos = Position {
                        commit_lsn: pos.commit_lsn,
                        index,
                    };
                    let counted = Counted::Streamed {
                        commit_ms: txn.commit_ms,
                    };
                    self.send_table_records(&mut records, open, pos, counted)
                        .await
                }
                Err(e) => Err(e.into()),
            };
            self.table_records = records;
            sent?;
        }
        Ok(())
    }

    /// Publishes a snapshot row of a `[[table]]` table (`op: "r"`), one
    /// row late (see [`SnapshotMarks`]). It counts as sent for its table at
    /// once, so the table is not reported done before it is acknowledged.
    pub(super) async fn publish_table_snapshot_row(
        &mut self,
        txn: TxnId,
        pos: Position,
        relation: &Arc<Relation>,
        row: &TupleData,
        table_index: Option<u32>,
    ) -> Result<(), RelayError> {
        if let Some(t) = table_index.and_then(|i| self.snapshot_tables.get_mut(i as usize)) {
            t.sent += 1;
        }
        let marks = &mut self.snapshot_marks;
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
                table_index,
                first_in_snapshot,
                first_in_table,
            },
        );
        match previous {
            Some(held) => self.send_held_row(held, false, false).await,
            None => Ok(()),
        }
    }

    /// Table `table_index` of the snapshot was read: its held row was its
    /// last; the previous table's last row was not the snapshot's.
    pub(super) async fn table_snapshot_read(&mut self, table_index: u32) -> Result<(), RelayError> {
        let Some(last) = self.snapshot_marks.held.remove(&table_index) else {
            return Ok(());
        };
        match self.snapshot_marks.table_last.replace(last) {
            Some(previous) => self.send_held_row(previous, true, false).await,
            None => Ok(()),
        }
    }

    /// At the end of the snapshot: sends the rows still held, the last one
    /// read as the snapshot's last.
    pub(super) async fn finish_table_snapshot(&mut self) -> Result<(), RelayError> {
        // Every table reports being read before the snapshot ends; rows of
        // one that did not are still its last.
        let unread: Vec<u32> = self.snapshot_marks.held.keys().copied().collect();
        for table_index in unread {
            self.table_snapshot_read(table_index).await?;
        }
        match self.snapshot_marks.table_last.take() {
            Some(last) => self.send_held_row(last, true, true).await,
            None => Ok(()),
        }
    }

    async fn send_held_row(
        &mut self,
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
        let mut records = std::mem::take(&mut self.table_records);
        records.clear();
        let made = self.tables.on_snapshot_row(
            held.relation.oid,
            &held.row,
            held.pos.commit_lsn,
            held.pos.index,
            self.snapshot_ms,
            marker,
            &mut records,
        );
        let sent = match made {
            Ok(()) => {
                let counted = held
                    .table_index
                    .map_or(Counted::Other, Counted::SnapshotTable);
                self.send_table_records(&mut records, held.txn, held.pos, counted)
                    .await
            }
            Err(e) => Err(e.into()),
        };
        self.table_records = records;
        sent
    }

    /// Publishes the records of one change (or snapshot row) through the
    /// one send sequence every record takes ([`Streaming::publish`]).
    async fn send_table_records(
        &mut self,
        records: &mut Vec<crate::router::Record>,
        txn: TxnId,
        pos: Position,
        counted: Counted,
    ) -> Result<(), RelayError> {
        for record in records.drain(..) {
            self.publish(txn, pos, &record, counted).await?;
        }
        Ok(())
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
