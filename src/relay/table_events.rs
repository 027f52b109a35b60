//! Table change events in the relay: hands `[[table]]` changes and
//! snapshot rows to [`crate::router::table::TableRouter`] and sends the
//! records it makes, each counted by the checkpoint like any other record,
//! so a change (with its tombstone) is confirmed only when Kafka holds all
//! of its records.

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

impl Streaming {
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
