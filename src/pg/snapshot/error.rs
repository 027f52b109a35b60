//! The snapshot reader's errors: [`SnapshotError`], each naming the table,
//! classified as transient (the connection or server went away) or
//! definite; and how tables are named in them.

use crate::pg::catalog::{CatalogError, describe};
use crate::pgoutput::Relation;

/// Why a snapshot read failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The reader's connection could not be made.
    #[error("snapshot reader: {0}")]
    Connect(#[source] CatalogError),
    /// `SET TRANSACTION SNAPSHOT` failed.
    #[error(
        "cannot import the exported snapshot {snapshot:?}: {}; the snapshot lives only while the \
         replication connection that created the slot stays idle, so it ran another command or \
         closed before this reader imported it: drop the slot and start the snapshot over",
        describe(.source)
    )]
    Import {
        snapshot: String,
        source: tokio_postgres::Error,
    },
    /// A query of the snapshot failed.
    #[error("snapshot of table {table} failed while {context}: {}", describe(.source))]
    Query {
        table: String,
        context: &'static str,
        source: tokio_postgres::Error,
    },
    /// DDL changed a table after the snapshot's consistent point, before
    /// the readers locked it: the snapshot cannot read it as of its point.
    #[error(
        "{changes} after the snapshot's consistent point, before the snapshot locked it: \
         PostgreSQL cannot show a table rewritten or truncated after a snapshot as of that \
         snapshot, so this snapshot would miss its rows; nothing of this snapshot was published, \
         it is taken again from a new consistent point"
    )]
    ChangedSinceSnapshot { changes: String },
    /// The table is not in the snapshot.
    #[error(
        "table {table} does not exist in the snapshot; create it, or fix the table name in the \
         configuration"
    )]
    NoSuchTable { table: String },
    /// The relation cannot be read as a table.
    #[error(
        "{table} is {kind}, not a table: walrelay snapshots ordinary and partitioned tables only; \
         fix the table name in the configuration"
    )]
    NotATable { table: String, kind: &'static str },
    /// The table has no column pgoutput would publish.
    #[error("table {table} has no columns to read; add columns or remove the table")]
    NoColumns { table: String },
    /// No order was given and the table has no primary key.
    #[error(
        "table {table} has no primary key, so the snapshot has no order to read it in; add a \
         primary key or set snapshot_order_by for the table"
    )]
    NoOrder { table: String },
    /// An order or split column is not a published column of the table.
    #[error(
        "{what} column {column:?} is not a column of table {table} (or is generated); fix \
         {what}, the table's columns are: {columns}"
    )]
    UnknownColumn {
        table: String,
        column: String,
        what: &'static str,
        columns: String,
    },
    /// No unique, non-NULL key to read the table in chunks by (an
    /// incremental snapshot's keyset paging skips rows of a key value that
    /// crosses a chunk boundary, and a NULL ends the table).
    #[error(
        "table {table} cannot be read in chunks: {why}; give it a primary key, or a unique index \
         on NOT NULL columns that its replica identity includes, and set key_columns to those \
         columns"
    )]
    NoChunkKey { table: String, why: String },
    /// An operator's row condition that could leave its parentheses
    /// (`pg::filter`).
    #[error("the row condition for table {table} is refused: {why}")]
    BadFilter { table: String, why: String },
    /// A hash split with no parts or an index outside them.
    #[error(
        "hash split part {index} of {parts} is not valid: parts must be 1 or more and index below parts"
    )]
    InvalidSplit { parts: u32, index: u32 },
    /// The COPY stream did not have the expected shape.
    #[error(
        "snapshot of table {table}: row {row} of the COPY stream is malformed: {reason}; this is a \
         bug or a broken connection: start the snapshot over and report it"
    )]
    Malformed {
        table: String,
        row: u64,
        reason: String,
    },
}

impl SnapshotError {
    /// Whether starting the snapshot over may succeed without anyone
    /// changing anything (the connection or the server went away).
    pub fn is_transient(&self) -> bool {
        match self {
            SnapshotError::Connect(e) => e.is_transient(),
            SnapshotError::Query { source, .. } | SnapshotError::Import { source, .. } => {
                is_transient_pg(source)
            }
            SnapshotError::ChangedSinceSnapshot { .. } => true,
            SnapshotError::NoSuchTable { .. }
            | SnapshotError::NotATable { .. }
            | SnapshotError::NoColumns { .. }
            | SnapshotError::NoOrder { .. }
            | SnapshotError::UnknownColumn { .. }
            | SnapshotError::NoChunkKey { .. }
            | SnapshotError::InvalidSplit { .. }
            | SnapshotError::BadFilter { .. }
            | SnapshotError::Malformed { .. } => false,
        }
    }
}

impl SnapshotError {
    /// Whether an incremental snapshot gives its table up (saying why)
    /// rather than ending the session: the error is about the table as it
    /// is now — gone, changed, its key or condition no longer valid, not
    /// readable by this role — so reading it again would meet it again, at
    /// every start.
    pub fn gives_up_table(&self) -> bool {
        match self {
            SnapshotError::NoSuchTable { .. }
            | SnapshotError::NotATable { .. }
            | SnapshotError::NoColumns { .. }
            | SnapshotError::NoOrder { .. }
            | SnapshotError::UnknownColumn { .. }
            | SnapshotError::NoChunkKey { .. }
            | SnapshotError::BadFilter { .. } => true,
            // Syntax or access (42: an undefined column in a condition, a
            // privilege revoked), data (22: a stored key value that no
            // longer fits the column's type), not supported (0A).
            SnapshotError::Query { source, .. } => source.code().is_some_and(|c| {
                let c = c.code();
                c.starts_with("42") || c.starts_with("22") || c.starts_with("0A")
            }),
            SnapshotError::Connect(_)
            | SnapshotError::Import { .. }
            | SnapshotError::ChangedSinceSnapshot { .. }
            | SnapshotError::InvalidSplit { .. }
            | SnapshotError::Malformed { .. } => false,
        }
    }
}

/// Connection closed, no server error code, or a server code of the
/// connection-exception / shutdown kind.
pub(super) fn is_transient_pg(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        None => true,
        Some(code) => {
            let code = code.code();
            // Connection exceptions, shutdowns, too many connections, and a
            // deadlock or serialization failure (the snapshot's locks met an
            // application's DDL: taking it again succeeds).
            code.starts_with("08")
                || code.starts_with("57P")
                || code == "53300"
                || code == "40P01"
                || code == "40001"
        }
    }
}

/// `context` → (a server error → [`SnapshotError::Query`] about `table`).
pub(super) fn query_error(
    table: String,
) -> impl Fn(&'static str) -> Box<dyn FnOnce(tokio_postgres::Error) -> SnapshotError> {
    move |context| {
        let table = table.clone();
        Box::new(move |source| SnapshotError::Query {
            table,
            context,
            source,
        })
    }
}

pub(super) fn relkind_name(relkind: &str) -> &'static str {
    match relkind {
        "v" => "a view",
        "m" => "a materialized view",
        "f" => "a foreign table",
        "i" | "I" => "an index",
        "S" => "a sequence",
        "c" => "a composite type",
        "t" => "a TOAST table",
        _ => "not a table",
    }
}

pub(super) fn qualified_display(schema: &str, name: &str) -> String {
    format!("{schema}.{name}")
}

pub(super) fn relation_display(relation: &Relation) -> String {
    let schema = if relation.namespace.is_empty() {
        "pg_catalog"
    } else {
        &relation.namespace
    };
    qualified_display(schema, &relation.name)
}

#[cfg(test)]
mod tests;
