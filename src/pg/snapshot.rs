//! The snapshot reader: reads captured tables inside a snapshot exported by
//! `CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT`
//! ([`crate::pg::replication::ReplicationClient::create_slot_exporting_snapshot`]),
//! over an ordinary `tokio-postgres` connection, as `COPY … TO STDOUT` in text
//! format, yielding rows in the form pgoutput sends them.
//!
//! Invariants:
//! - **One snapshot.** [`SnapshotReader::open`] begins `REPEATABLE READ READ
//!   ONLY` and imports the exported snapshot before anything else, so every
//!   query of the reader (catalog reads included) sees exactly the
//!   transactions committed before the slot's consistent point — no later
//!   one. Several readers importing the same name see the same data. The
//!   import must happen while the exporting replication connection is idle;
//!   afterwards the reader's own transaction keeps the snapshot alive.
//! - **Rows as pgoutput sends them.** [`SnapshotReader::table_relation`]
//!   lists the columns pgoutput publishes (attnum > 0, not dropped, not
//!   generated) in attnum order with their type oids, typmods and replica
//!   identity key flags, and [`SnapshotRows`] yields one [`TupleData`](crate::pgoutput::TupleData) per row
//!   with one cell per such column: `Cell::Null` for NULL, otherwise
//!   `Cell::Text` holding the type's text output — byte for byte what the
//!   walsender sends, because both come from the same output functions under
//!   the same session settings (`pg::wire::SESSION_PARAMETERS`, applied by
//!   `pg::catalog::connect`).
//! - **Bounded memory.** Rows are parsed as the COPY stream delivers them; a
//!   batch holds at most `max_rows` rows (and stops early past `max_bytes`),
//!   plus at most one partial row carried between chunks. Nothing holds a
//!   table. A caller that stops polling stops reading the socket, and TCP
//!   backpressure reaches the server.
//! - **Order.** Rows of one read come in the `ORDER BY` given (by default the
//!   primary key), so the snapshot events of one aggregate keep that order.
//!   A [`HashSplit`] puts every row — NULL split values included — in exactly
//!   one of its parts, so parallel readers split by the aggregate id column
//!   never share an aggregate.
//! - **Never panics on server input**: a malformed COPY line or a row whose
//!   cell count differs from the relation is a [`SnapshotError::Malformed`]
//!   naming the table and row.
//! - Identifiers and literals in SQL are quoted with
//!   `postgres_protocol::escape`, never pasted.
//!
//! Errors classify as transient ([`SnapshotError::is_transient`]: the
//! connection or server went away) or definite. Either way an exported
//! snapshot cannot be imported again once its replication connection has
//! moved on: a retry starts the snapshot over with a new slot.

//!
//! Files by responsibility: `reader` the transaction and its reads,
//! `rows` COPY text-format parsing, `sql` the statements, `split` the hash
//! split, `chunk` incremental chunks and their keys, `shapes` the tables'
//! shapes for DDL detection, `error` the errors.

mod chunk;
mod error;
mod reader;
mod rows;
mod shapes;
mod split;
mod sql;

pub use chunk::{Chunk, chunk_key_problem};
pub use error::SnapshotError;
pub use reader::{ResumeKey, SnapshotReader, full_xids};
pub use rows::SnapshotRows;
pub use shapes::{changed_since, same_columns, shape_changes, table_shapes};
pub use split::HashSplit;
pub use sql::{After, EXISTED_IN, chunk_sql, copy_sql};
