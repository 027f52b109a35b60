//! Chunks of an incremental snapshot: what one chunk read returns
//! ([`Chunk`]), and which keys may page a table ([`chunk_key_problem`]):
//! unique, NOT NULL, and — unless the table's rows are only inserted — in
//! the replica identity, so keyset paging neither skips rows nor loses the
//! stream's deletes.

use crate::Lsn;
use crate::pgoutput::{Column, Relation, TupleData};

use super::error::relation_display;

/// Why `key` cannot page `relation` in chunks, or `None` when it can: every
/// column published and NOT NULL (a NULL compares as nothing, so it would
/// end the table), a unique index covering no other column (keyset paging
/// on a non-unique key skips the rest of a value that crosses a chunk
/// boundary), and — unless the table's rows are only inserted — every
/// column in the replica identity, so that the stream's deletes and key
/// updates carry it and the chunk's stale rows can be found.
pub fn chunk_key_problem(
    relation: &Relation,
    key: &[String],
    inserts_only: bool,
    unique_indexes: &[Vec<String>],
    not_null: &[String],
) -> Option<String> {
    let shown = key.join(", ");
    for column in key {
        let Some(c) = relation.columns.iter().find(|c| &c.name == column) else {
            return Some(format!(
                "the key column {column:?} is not a published column of {}",
                relation_display(relation)
            ));
        };
        if !not_null.contains(column) {
            return Some(format!("the key column {column:?} allows NULL"));
        }
        if !inserts_only && c.flags & Column::FLAG_KEY == 0 {
            return Some(format!(
                "the key column {column:?} is not in the replica identity, so deletes do not \
                 carry it"
            ));
        }
    }
    if !unique_indexes
        .iter()
        .any(|index| !index.is_empty() && index.iter().all(|c| key.contains(c)))
    {
        return Some(format!("no unique index makes ({shown}) unique"));
    }
    None
}

/// What [`SnapshotReader::read_chunk`](super::SnapshotReader::read_chunk) read.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub relation: Relation,
    pub rows: Vec<TupleData>,
    /// Transactions running (so not seen) when the chunk's snapshot was
    /// taken, as pgoutput's 32-bit xids.
    pub invisible: Vec<u32>,
    /// The snapshot's `xmax` as a 32-bit xid: transactions from it on
    /// started after the snapshot was taken, so it did not see them either.
    pub xmax: u32,
    /// A WAL position read after the snapshot was taken: the commit record
    /// of every transaction the snapshot sees ends at or before it
    /// (`pg_current_wal_insert_lsn()`, or on a standby
    /// `pg_last_wal_replay_lsn()`), so a transaction the stream shows
    /// committing at or after it is one the snapshot did not see.
    pub horizon: Lsn,
    /// The key the chunk was read by.
    pub key: Vec<String>,
    /// Why it is not the key asked for, when it is not.
    pub key_note: Option<String>,
}

#[cfg(test)]
mod tests;
