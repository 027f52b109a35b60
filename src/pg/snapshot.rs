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
//!   identity key flags, and [`SnapshotRows`] yields one [`TupleData`] per row
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

use std::pin::Pin;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use postgres_protocol::escape::{escape_identifier, escape_literal};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, CopyOutStream};

use crate::pg::catalog::{self, CatalogError, describe};
use crate::pg::wire::ConnectParams;
use crate::pgoutput::{Cell, Column, Relation, TupleData};

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
fn is_transient_pg(e: &tokio_postgres::Error) -> bool {
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

/// A connection inside the exported snapshot.
pub struct SnapshotReader {
    client: Client,
    snapshot_name: String,
}

impl std::fmt::Debug for SnapshotReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotReader")
            .field("snapshot_name", &self.snapshot_name)
            .finish_non_exhaustive()
    }
}

/// The statements that begin the snapshot transaction.
fn import_sql(snapshot_name: &str) -> String {
    format!(
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
        escape_literal(snapshot_name)
    )
}

impl SnapshotReader {
    /// Connects (as `pg::catalog::connect` does: same session settings, TLS
    /// and keepalives) and imports `snapshot_name`.
    pub async fn open(
        params: &ConnectParams,
        snapshot_name: &str,
    ) -> Result<SnapshotReader, SnapshotError> {
        let client = catalog::connect(params)
            .await
            .map_err(SnapshotError::Connect)?;
        client
            .batch_execute(&import_sql(snapshot_name))
            .await
            .map_err(|source| SnapshotError::Import {
                snapshot: snapshot_name.to_owned(),
                source,
            })?;
        Ok(SnapshotReader {
            client,
            snapshot_name: snapshot_name.to_owned(),
        })
    }

    /// Connects and begins a repeatable-read, read-only transaction of its
    /// own (no exported snapshot): one consistent view of the tables now.
    pub async fn open_now(params: &ConnectParams) -> Result<SnapshotReader, SnapshotError> {
        let client = catalog::connect(params)
            .await
            .map_err(SnapshotError::Connect)?;
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(|source| SnapshotError::Query {
                table: String::from("(none)"),
                context: "beginning a read-only transaction",
                source,
            })?;
        Ok(SnapshotReader {
            client,
            snapshot_name: String::new(),
        })
    }

    /// Cancels any one statement of this reader's transaction that runs
    /// longer than `timeout` (an operator's condition that scans far more
    /// than meant, or hangs on a lock).
    pub async fn limit_statements(&self, timeout: Duration) -> Result<(), SnapshotError> {
        self.client
            .batch_execute(&format!(
                "SET LOCAL statement_timeout = {}",
                timeout.as_millis().max(1)
            ))
            .await
            .map_err(|source| SnapshotError::Query {
                table: String::from("(none)"),
                context: "setting statement_timeout",
                source,
            })
    }

    /// The imported snapshot's name.
    pub fn snapshot_name(&self) -> &str {
        &self.snapshot_name
    }

    /// The table `schema.name` as pgoutput describes it in a Relation
    /// message: oid, namespace, name, replica identity and the published
    /// columns (attnum > 0, not dropped, not generated) in attnum order,
    /// with the replica identity key flag (all columns under `REPLICA
    /// IDENTITY FULL`).
    ///
    /// With `publication` (PostgreSQL 15+), the columns are those the
    /// publication publishes for the table (`pg_publication_tables.attnames`:
    /// its column list, and on 18 the generated columns
    /// `publish_generated_columns` adds), so snapshot rows carry exactly the
    /// columns streamed rows do. A table the publication does not list keeps
    /// the rule above.
    pub async fn table_relation(
        &self,
        schema: &str,
        name: &str,
        publication: Option<&str>,
    ) -> Result<Relation, SnapshotError> {
        let table = qualified_display(schema, name);
        let query = query_error(table.clone());
        let row = self
            .client
            .query_opt(
                "SELECT c.oid, c.relkind::text, c.relreplident::text, \
                        (n.oid = 'pg_catalog'::regnamespace) \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&schema, &name],
            )
            .await
            .map_err(query("looking the table up in pg_class"))?
            .ok_or_else(|| SnapshotError::NoSuchTable {
                table: table.clone(),
            })?;
        let oid: u32 = row.get(0);
        let relkind: String = row.get(1);
        if relkind != "r" && relkind != "p" {
            return Err(SnapshotError::NotATable {
                table,
                kind: relkind_name(&relkind),
            });
        }
        let replica_identity = row.get::<_, String>(2).bytes().next().unwrap_or(b'd');
        let in_pg_catalog: bool = row.get(3);
        let key_attnums: Vec<i16> = self
            .client
            .query(
                "SELECT k.attnum FROM pg_index i, unnest(i.indkey::int2[]) AS k(attnum) \
                 WHERE i.indrelid = $1::oid AND CASE $2::text \
                       WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END",
                &[&oid, &(replica_identity as char).to_string()],
            )
            .await
            .map_err(query("reading the replica identity index"))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        // PostgreSQL 14 has no column lists (and no attnames column: asking
        // would abort the snapshot's transaction).
        let column_lists = self
            .client
            .query_one(
                "SELECT current_setting('server_version_num')::int >= 150000",
                &[],
            )
            .await
            .map_err(query("reading the server version"))?
            .get::<_, bool>(0);
        let published: Option<Vec<String>> = match publication {
            Some(publication) if column_lists => self
                .client
                .query_opt(
                    "SELECT attnames::text[] FROM pg_publication_tables \
                     WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
                    &[&publication, &schema, &name],
                )
                .await
                .map_err(query("reading the publication's column list"))?
                .map(|r| r.get(0)),
            _ => None,
        };
        let columns: Vec<Column> = self
            .client
            .query(
                "SELECT a.attname::text, a.atttypid, a.atttypmod, a.attnum FROM pg_attribute a \
                 WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped \
                   AND CASE WHEN $2::text[] IS NULL THEN a.attgenerated = '' \
                            ELSE a.attname = ANY ($2::text[]) END \
                 ORDER BY a.attnum",
                &[&oid, &published],
            )
            .await
            .map_err(query("reading pg_attribute"))?
            .iter()
            .map(|r| {
                let attnum: i16 = r.get(3);
                let key = replica_identity == b'f' || key_attnums.contains(&attnum);
                Column {
                    flags: if key { Column::FLAG_KEY } else { 0 },
                    name: r.get(0),
                    type_oid: r.get(1),
                    type_modifier: r.get(2),
                }
            })
            .collect();
        if columns.is_empty() {
            return Err(SnapshotError::NoColumns { table });
        }
        Ok(Relation {
            oid,
            // pgoutput writes pg_catalog as the empty string.
            namespace: if in_pg_catalog {
                String::new()
            } else {
                schema.to_owned()
            },
            name: name.to_owned(),
            replica_identity,
            columns,
        })
    }

    /// The primary key's columns in key order; empty without a primary key.
    pub async fn primary_key(&self, relation: &Relation) -> Result<Vec<String>, SnapshotError> {
        let rows = self
            .client
            .query(
                "SELECT a.attname::text FROM pg_index i \
                 CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                 WHERE i.indrelid = $1::oid AND i.indisprimary ORDER BY k.ord",
                &[&relation.oid],
            )
            .await
            .map_err(|source| SnapshotError::Query {
                table: relation_display(relation),
                context: "reading the primary key",
                source,
            })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The planner's row estimate of `relation` (see
    /// [`catalog::row_estimate`]); `None` when unknown. For progress reports.
    pub async fn estimate_rows(&self, relation: &Relation) -> Result<Option<u64>, SnapshotError> {
        let estimate = catalog::row_estimate(&self.client, relation.oid)
            .await
            .map_err(|source| SnapshotError::Query {
                table: relation_display(relation),
                context: "reading pg_class.reltuples",
                source,
            })?;
        Ok(estimate.known())
    }

    /// Starts reading `relation` (from [`SnapshotReader::table_relation`]) in
    /// `order_by` order (empty: the primary key), only the rows of `split`
    /// when given. Drain the returned rows before the next read on this
    /// reader.
    pub async fn read(
        &mut self,
        relation: &Relation,
        order_by: &[String],
        split: Option<&HashSplit>,
    ) -> Result<SnapshotRows<'_>, SnapshotError> {
        self.read_where(relation, order_by, split, None).await
    }

    /// [`SnapshotReader::read`], only the rows for which the SQL condition
    /// `filter` holds (the operator's, for `walrelay republish`).
    pub async fn read_where(
        &mut self,
        relation: &Relation,
        order_by: &[String],
        split: Option<&HashSplit>,
        filter: Option<&str>,
    ) -> Result<SnapshotRows<'_>, SnapshotError> {
        let pk;
        let order_by = if order_by.is_empty() {
            pk = self.primary_key(relation).await?;
            &pk[..]
        } else {
            order_by
        };
        // A plain table is read without its inheritance children (`ONLY`):
        // pgoutput streams a child's changes as the child's, never as the
        // parent's, so the snapshot must not publish them as the parent's
        // either. A partitioned table is read whole (its partitions are its
        // rows, and the publication streams them as the root's).
        let partitioned = self.is_partitioned(relation).await?;
        let sql = copy_sql(relation, !partitioned, order_by, split, filter)?;
        self.copy(relation, &sql).await
    }

    async fn is_partitioned(&self, relation: &Relation) -> Result<bool, SnapshotError> {
        Ok(self
            .client
            .query_opt(
                "SELECT relkind = 'p' FROM pg_class WHERE oid = $1::oid",
                &[&relation.oid],
            )
            .await
            .map_err(|source| SnapshotError::Query {
                table: relation_display(relation),
                context: "reading pg_class.relkind",
                source,
            })?
            .is_some_and(|r| r.get::<_, bool>(0)))
    }

    /// Starts `sql` (a `COPY … TO STDOUT` of `relation`'s columns).
    async fn copy(
        &mut self,
        relation: &Relation,
        sql: &str,
    ) -> Result<SnapshotRows<'_>, SnapshotError> {
        let stream = self
            .client
            .copy_out(sql)
            .await
            .map_err(|source| SnapshotError::Query {
                table: relation_display(relation),
                context: "starting COPY … TO STDOUT",
                source,
            })?;
        Ok(SnapshotRows {
            stream: Box::pin(stream),
            table: relation_display(relation),
            columns: relation.columns.len(),
            lines: LineSplitter::default(),
            batch: Vec::new(),
            batch_bytes: 0,
            rows: 0,
            done: false,
            _reader: std::marker::PhantomData,
        })
    }

    /// Locks `relations` (and the partitions of a partitioned one) in
    /// `ACCESS SHARE` mode until this reader's transaction ends: the lock
    /// COPY would take, taken for every table before any is read, so that
    /// no `TRUNCATE`, table-rewriting `ALTER TABLE`, column change or
    /// `DROP` can commit while the snapshot still has to read the table.
    /// (PostgreSQL shows a table rewritten or truncated after a snapshot
    /// as empty to that snapshot.) A change committed before the lock is
    /// found by comparing [`SnapshotReader::table_shapes`] with the catalog
    /// as it is now ([`table_shapes`] on an ordinary session).
    pub async fn lock(&self, relations: &[&Relation]) -> Result<(), SnapshotError> {
        if relations.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = relations
            .iter()
            .map(|r| {
                let schema = if r.namespace.is_empty() {
                    "pg_catalog"
                } else {
                    &r.namespace
                };
                format!(
                    "{}.{}",
                    escape_identifier(schema),
                    escape_identifier(&r.name)
                )
            })
            .collect();
        let sql = format!("LOCK TABLE {} IN ACCESS SHARE MODE", names.join(", "));
        match self.client.batch_execute(&sql).await {
            Ok(()) => Ok(()),
            // Dropped or renamed after the consistent point: the name no
            // longer resolves. Taking the snapshot again says what is wrong.
            Err(source) if source.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                Err(SnapshotError::ChangedSinceSnapshot {
                    changes: format!(
                        "a captured table was dropped or renamed ({})",
                        describe(&source)
                    ),
                })
            }
            Err(source) => Err(SnapshotError::Query {
                table: names.join(", "),
                context: "locking the tables in ACCESS SHARE mode",
                source,
            }),
        }
    }

    /// The identity and shape of `oids` and their partitions as this
    /// reader's snapshot sees them (see [`table_shapes`]).
    pub async fn table_shapes(&self, oids: &[u32]) -> Result<Vec<(u32, String)>, SnapshotError> {
        table_shapes(&self.client, oids).await
    }

    /// Connects for the chunks of an incremental snapshot: no transaction
    /// until [`SnapshotReader::read_chunk`] begins one per chunk.
    pub async fn open_for_chunks(params: &ConnectParams) -> Result<SnapshotReader, SnapshotError> {
        let client = catalog::connect(params)
            .await
            .map_err(SnapshotError::Connect)?;
        Ok(SnapshotReader {
            client,
            snapshot_name: String::new(),
        })
    }

    /// The session of this reader, for the watermarks between chunks.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// One chunk of an incremental snapshot: in a repeatable-read
    /// transaction of its own, at most `limit` rows of `schema.name` (the
    /// publication's columns, as [`SnapshotReader::table_relation`]) whose
    /// chunk key comes after `after`, in key order, that satisfy `filter`.
    ///
    /// The table is locked (`ACCESS SHARE`, as COPY would) *before* the
    /// transaction's snapshot is taken: PostgreSQL shows a table rewritten
    /// or truncated after a snapshot as empty to that snapshot, so a
    /// snapshot taken before a rewrite's commit and used after it would
    /// read a short chunk and end the table early. With the lock first, a
    /// rewrite has either committed before the snapshot (which then sees
    /// its rows) or waits until the chunk is read.
    ///
    /// The chunk key is `key` when it is unique and NULL-free (and, unless
    /// `inserts_only`, within the replica identity, so that the stream's
    /// deletes carry it); otherwise the table's primary key or another such
    /// unique index ([`Chunk::key`] says which, [`Chunk::key_note`] why).
    /// `after` is a position in `key`: under another key the chunk starts
    /// at the first row.
    ///
    /// Also returns the transactions the chunk's snapshot does not see
    /// although they were running when it was taken (top-level xids, low
    /// 32 bits as pgoutput sends them): a change of theirs that the stream
    /// carries before the chunk's low watermark is newer than the chunk's
    /// row.
    #[allow(clippy::too_many_arguments)]
    pub async fn read_chunk(
        &mut self,
        schema: &str,
        name: &str,
        publication: &str,
        key: &[String],
        inserts_only: bool,
        filter: Option<&str>,
        after: Option<&[Option<String>]>,
        limit: usize,
    ) -> Result<Chunk, SnapshotError> {
        let table = qualified_display(schema, name);
        let query = query_error(table.clone());
        self.client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(query("beginning a chunk's transaction"))?;
        let result = async {
            // LOCK takes no snapshot: the transaction's is taken by the
            // first query after it.
            let lock = format!(
                "LOCK TABLE {}.{} IN ACCESS SHARE MODE",
                escape_identifier(schema),
                escape_identifier(name)
            );
            match self.client.batch_execute(&lock).await {
                Ok(()) => {}
                Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                    return Err(SnapshotError::NoSuchTable {
                        table: table.clone(),
                    });
                }
                Err(e) => return Err(query("locking the table in ACCESS SHARE mode")(e)),
            }
            let invisible: Vec<u32> = self
                .client
                .query(
                    "SELECT (x::text::int8 % 4294967296)::int8 \
                     FROM pg_snapshot_xip(pg_current_snapshot()) AS x",
                    &[],
                )
                .await
                .map_err(query("reading the chunk's snapshot"))?
                .iter()
                .map(|r| r.get::<_, i64>(0) as u32)
                .collect();
            let relation = self.table_relation(schema, name, Some(publication)).await?;
            let (used, key_note) = self.chunk_key(&relation, key, inserts_only).await?;
            let after = if used.as_slice() == key { after } else { None };
            let rows = {
                let mut read = self
                    .read_chunk_rows(&relation, &used, filter, after, limit)
                    .await?;
                let mut rows = Vec::new();
                while let Some(batch) = read.next_batch(limit, usize::MAX).await? {
                    rows.extend(batch);
                }
                rows
            };
            Ok::<_, SnapshotError>(Chunk {
                relation,
                rows,
                invisible,
                key: used,
                key_note,
            })
        }
        .await;
        // Read-only: ending it cannot lose anything; a failed chunk is read
        // again.
        let end = self
            .client
            .batch_execute(if result.is_ok() { "COMMIT" } else { "ROLLBACK" })
            .await
            .map_err(query("ending a chunk's transaction"));
        let chunk = result?;
        end?;
        Ok(chunk)
    }

    /// The key to read `relation` in chunks by: `wanted` if it is a chunk
    /// key (see [`chunk_key_problem`]), else the primary key, else another
    /// unique index that is one (the replica identity's first, then the
    /// narrowest), with why `wanted` is not; an error when none is.
    pub async fn chunk_key(
        &self,
        relation: &Relation,
        wanted: &[String],
        inserts_only: bool,
    ) -> Result<(Vec<String>, Option<String>), SnapshotError> {
        let table = relation_display(relation);
        let rows = self
            .client
            .query(
                "SELECT i.indisprimary, i.indisreplident, \
                        array_agg(a.attname::text ORDER BY k.ord) \
                 FROM pg_index i \
                 CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                 WHERE i.indrelid = $1::oid AND i.indisunique AND i.indisvalid \
                   AND i.indpred IS NULL AND i.indexprs IS NULL AND k.ord <= i.indnkeyatts \
                 GROUP BY i.indexrelid, i.indisprimary, i.indisreplident",
                &[&relation.oid],
            )
            .await
            .map_err(query_error(table.clone())(
                "reading the table's unique indexes",
            ))?;
        let mut unique: Vec<(bool, bool, Vec<String>)> = rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let not_null: Vec<String> = self
            .client
            .query(
                "SELECT attname::text FROM pg_attribute \
                 WHERE attrelid = $1::oid AND attnum > 0 AND attnotnull AND NOT attisdropped",
                &[&relation.oid],
            )
            .await
            .map_err(query_error(table.clone())("reading the NOT NULL columns"))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let indexes: Vec<Vec<String>> = unique.iter().map(|(_, _, c)| c.clone()).collect();
        let problem =
            |key: &[String]| chunk_key_problem(relation, key, inserts_only, &indexes, &not_null);
        let why = if wanted.is_empty() {
            String::from("no key columns were given")
        } else {
            match problem(wanted) {
                None => return Ok((wanted.to_vec(), None)),
                Some(why) => why,
            }
        };
        // Primary key first, then the replica identity's, then the narrowest.
        unique.sort_by_key(|(primary, identity, columns)| (!primary, !identity, columns.len()));
        for (primary, _, columns) in &unique {
            if problem(columns).is_none() {
                let what = if *primary {
                    "its primary key"
                } else {
                    "a unique index"
                };
                let note = format!("chunked by {what} ({}) instead: {why}", columns.join(", "));
                return Ok((columns.clone(), Some(note)));
            }
        }
        Err(SnapshotError::NoChunkKey {
            table,
            why: if unique.is_empty() {
                format!("{why}, and it has no primary key or unique index")
            } else {
                format!("{why}, and no primary key or unique index of it is one")
            },
        })
    }

    async fn read_chunk_rows(
        &mut self,
        relation: &Relation,
        key: &[String],
        filter: Option<&str>,
        after: Option<&[Option<String>]>,
        limit: usize,
    ) -> Result<SnapshotRows<'_>, SnapshotError> {
        if let Some(after) = after
            && after.len() != key.len()
        {
            return Err(SnapshotError::Malformed {
                table: relation_display(relation),
                row: 0,
                reason: format!(
                    "the stored position has {} key values, the key has {} columns",
                    after.len(),
                    key.len()
                ),
            });
        }
        let partitioned = self.is_partitioned(relation).await?;
        let sql = chunk_sql(
            relation,
            !partitioned,
            key,
            None,
            filter,
            after,
            Some(limit),
        )?;
        self.copy(relation, &sql).await
    }

    /// Ends the snapshot transaction (`COMMIT`) and closes the connection.
    pub async fn finish(self) -> Result<(), SnapshotError> {
        self.client
            .batch_execute("COMMIT")
            .await
            .map_err(|source| SnapshotError::Query {
                table: String::from("(none)"),
                context: "ending the snapshot transaction",
                source,
            })
    }
}

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

/// Name, kind, storage (`relfilenode`: a rewrite or `TRUNCATE` gives a new
/// one) and columns of each table of `$1` and of the partitions of the
/// partitioned ones, one line per table, by oid. Plain SQL, so it sees the
/// catalog as the session's snapshot does.
const SHAPES_SQL: &str = "WITH RECURSIVE tree(oid) AS ( \
       SELECT unnest($1::oid[]) \
       UNION \
       SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid \
       JOIN pg_class p ON p.oid = t.oid WHERE p.relkind = 'p') \
     SELECT c.oid, format('%s.%s (kind %s, filenode %s, columns: %s)', n.nspname, c.relname, \
            c.relkind, c.relfilenode, coalesce((SELECT string_agg(format('%s %s %s %s', \
            a.attnum, a.attname, a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum) \
            FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 \
              AND NOT a.attisdropped), '')) \
     FROM tree JOIN pg_class c ON c.oid = tree.oid \
     JOIN pg_namespace n ON n.oid = c.relnamespace ORDER BY c.oid";

/// The identity and shape of `oids` and their partitions as `client`'s
/// session sees them: on an ordinary session, the catalog as it is now.
pub async fn table_shapes(
    client: &Client,
    oids: &[u32],
) -> Result<Vec<(u32, String)>, SnapshotError> {
    Ok(client
        .query(SHAPES_SQL, &[&oids])
        .await
        .map_err(|source| SnapshotError::Query {
            table: String::from("(the captured tables)"),
            context: "reading the tables' shapes",
            source,
        })?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// What changed between the snapshot's view of the tables and the catalog
/// now, said for an operator; `None` when nothing did.
pub fn shape_changes(in_snapshot: &[(u32, String)], now: &[(u32, String)]) -> Option<String> {
    let mut changes = Vec::new();
    for (oid, then) in in_snapshot {
        match now.iter().find(|(o, _)| o == oid) {
            None => changes.push(format!("{then} was dropped")),
            Some((_, now)) if now != then => changes.push(format!("{then} became {now}")),
            Some(_) => {}
        }
    }
    for (oid, now) in now {
        if !in_snapshot.iter().any(|(o, _)| o == oid) {
            changes.push(format!("{now} was added"));
        }
    }
    (!changes.is_empty())
        .then(|| format!("DDL changed the captured tables: {}", changes.join("; ")))
}

/// `context` → (a server error → [`SnapshotError::Query`] about `table`).
fn query_error(
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

fn relkind_name(relkind: &str) -> &'static str {
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

fn qualified_display(schema: &str, name: &str) -> String {
    format!("{schema}.{name}")
}

fn relation_display(relation: &Relation) -> String {
    let schema = if relation.namespace.is_empty() {
        "pg_catalog"
    } else {
        &relation.namespace
    };
    qualified_display(schema, &relation.name)
}

/// Part `index` of `parts` of a table, by a hash of one column's text (the
/// aggregate id): every row falls in exactly one part, rows with a NULL in
/// the column in part 0. The hash is the server's `hashtext`, so readers on
/// one server agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashSplit {
    column: String,
    parts: u32,
    index: u32,
}

impl HashSplit {
    /// Part `index` (0-based) of `parts`, split by `column`.
    pub fn new(column: &str, parts: u32, index: u32) -> Result<HashSplit, SnapshotError> {
        if parts == 0 || index >= parts || parts > i32::MAX as u32 {
            return Err(SnapshotError::InvalidSplit { parts, index });
        }
        Ok(HashSplit {
            column: column.to_owned(),
            parts,
            index,
        })
    }

    /// All `parts` parts split by `column`.
    pub fn all(column: &str, parts: u32) -> Result<Vec<HashSplit>, SnapshotError> {
        (0..parts.max(1))
            .map(|index| HashSplit::new(column, parts, index))
            .collect()
    }

    /// The split column.
    pub fn column(&self) -> &str {
        &self.column
    }

    /// The SQL condition selecting this part's rows.
    pub fn filter_sql(&self) -> String {
        format!(
            "(coalesce(hashtext({}::text), 0) & 2147483647) % {} = {}",
            escape_identifier(&self.column),
            self.parts,
            self.index
        )
    }
}

/// `COPY (SELECT <columns> FROM [ONLY] <table> [WHERE (<filter>) AND <split>] ORDER BY <order_by>) TO STDOUT`
/// for `relation`; every order and split column must be one of its columns.
/// `only` leaves inheritance children out.
pub fn copy_sql(
    relation: &Relation,
    only: bool,
    order_by: &[String],
    split: Option<&HashSplit>,
    filter: Option<&str>,
) -> Result<String, SnapshotError> {
    chunk_sql(relation, only, order_by, split, filter, None, None)
}

/// [`copy_sql`] for one chunk of an incremental snapshot: only rows whose
/// `order_by` columns come after `after` (a row comparison, so the key must
/// be unique and not NULL), at most `limit` of them.
pub fn chunk_sql(
    relation: &Relation,
    only: bool,
    order_by: &[String],
    split: Option<&HashSplit>,
    filter: Option<&str>,
    after: Option<&[Option<String>]>,
    limit: Option<usize>,
) -> Result<String, SnapshotError> {
    let table = relation_display(relation);
    let known = |column: &str, what: &'static str| {
        if relation.column_index(column).is_some() {
            Ok(())
        } else {
            Err(SnapshotError::UnknownColumn {
                table: table.clone(),
                column: column.to_owned(),
                what,
                columns: relation
                    .columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    };
    if relation.columns.is_empty() {
        return Err(SnapshotError::NoColumns { table });
    }
    if order_by.is_empty() {
        return Err(SnapshotError::NoOrder { table });
    }
    for column in order_by {
        known(column, "snapshot_order_by")?;
    }
    if let Some(split) = split {
        known(&split.column, "hash split")?;
    }
    let list = |names: &mut dyn Iterator<Item = &str>| {
        names.map(escape_identifier).collect::<Vec<_>>().join(", ")
    };
    let schema = if relation.namespace.is_empty() {
        "pg_catalog"
    } else {
        &relation.namespace
    };
    let mut sql = format!(
        "COPY (SELECT {} FROM {}{}.{}",
        list(&mut relation.columns.iter().map(|c| c.name.as_str())),
        if only { "ONLY " } else { "" },
        escape_identifier(schema),
        escape_identifier(&relation.name)
    );
    let mut conditions = Vec::new();
    if let Some(filter) = filter {
        super::filter::check(filter).map_err(|why| SnapshotError::BadFilter {
            table: table.clone(),
            why,
        })?;
        conditions.push(format!("({filter})"));
    }
    if let Some(split) = split {
        conditions.push(split.filter_sql());
    }
    if let Some(after) = after {
        // Untyped literals take the key columns' types; NULL sorts nowhere.
        let values: Vec<String> = after
            .iter()
            .map(|v| {
                v.as_deref()
                    .map_or_else(|| "NULL".to_owned(), escape_literal)
            })
            .collect();
        conditions.push(format!(
            "({}) > ({})",
            list(&mut order_by.iter().map(String::as_str)),
            values.join(", ")
        ));
    }
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    sql.push_str(" ORDER BY ");
    sql.push_str(&list(&mut order_by.iter().map(String::as_str)));
    if let Some(limit) = limit {
        sql.push_str(&format!(" LIMIT {}", limit.max(1)));
    }
    sql.push_str(") TO STDOUT");
    Ok(sql)
}

/// What [`SnapshotReader::read_chunk`] read.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub relation: Relation,
    pub rows: Vec<TupleData>,
    /// Transactions running (so not seen) when the chunk's snapshot was
    /// taken, as pgoutput's 32-bit xids.
    pub invisible: Vec<u32>,
    /// The key the chunk was read by.
    pub key: Vec<String>,
    /// Why it is not the key asked for, when it is not.
    pub key_note: Option<String>,
}

/// The rows of one [`SnapshotReader::read`], pulled in batches.
pub struct SnapshotRows<'r> {
    stream: Pin<Box<CopyOutStream>>,
    table: String,
    columns: usize,
    lines: LineSplitter,
    /// The batch being filled; kept here so `next_batch` is cancel-safe.
    batch: Vec<TupleData>,
    batch_bytes: usize,
    rows: u64,
    done: bool,
    /// Ties the rows to the reader: one COPY at a time per connection.
    _reader: std::marker::PhantomData<&'r mut SnapshotReader>,
}

impl std::fmt::Debug for SnapshotRows<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotRows")
            .field("table", &self.table)
            .field("rows", &self.rows)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl SnapshotRows<'_> {
    /// Rows yielded so far.
    pub fn rows_read(&self) -> u64 {
        self.rows
    }

    /// The next rows: at least one and at most `max_rows` (treated as 1 if
    /// 0), fewer when the row text read for this batch passes `max_bytes`;
    /// `None` once the table is read. Cancel-safe: rows parsed before the
    /// future is dropped are returned by the next call.
    pub async fn next_batch(
        &mut self,
        max_rows: usize,
        max_bytes: usize,
    ) -> Result<Option<Vec<TupleData>>, SnapshotError> {
        let max_rows = max_rows.max(1);
        loop {
            while self.batch.len() < max_rows
                && (self.batch.is_empty() || self.batch_bytes < max_bytes)
            {
                let Some(line) = self.lines.next_line() else {
                    break;
                };
                self.rows += 1;
                self.batch_bytes += line.len();
                let cells = parse_copy_line(&line).map_err(|reason| self.malformed(reason))?;
                if cells.len() != self.columns {
                    return Err(self.malformed(format!(
                        "it has {} columns, the table has {}",
                        cells.len(),
                        self.columns
                    )));
                }
                self.batch.push(TupleData(cells));
            }
            let full = self.batch.len() >= max_rows
                || (!self.batch.is_empty() && self.batch_bytes >= max_bytes);
            if full || self.done {
                if self.done && self.lines.has_partial() {
                    self.rows += 1;
                    return Err(self.malformed("the stream ended inside a row".to_owned()));
                }
                self.batch_bytes = 0;
                let batch = std::mem::take(&mut self.batch);
                return Ok(if batch.is_empty() { None } else { Some(batch) });
            }
            match self.stream.next().await {
                Some(Ok(chunk)) => self.lines.push(chunk),
                Some(Err(source)) => {
                    return Err(SnapshotError::Query {
                        table: self.table.clone(),
                        context: "reading COPY data",
                        source,
                    });
                }
                None => self.done = true,
            }
        }
    }

    fn malformed(&self, reason: String) -> SnapshotError {
        SnapshotError::Malformed {
            table: self.table.clone(),
            row: self.rows,
            reason,
        }
    }
}

/// Cuts the COPY stream's chunks into lines. The server sends one row per
/// chunk, but the protocol does not promise it: a row may span chunks and a
/// chunk may hold several rows. Lines within one chunk are zero-copy slices
/// of it; only a row split across chunks is copied.
#[derive(Debug, Default)]
struct LineSplitter {
    /// Unsplit rest of the newest chunk.
    chunk: Bytes,
    /// The start of a line whose end has not arrived yet.
    partial: BytesMut,
}

impl LineSplitter {
    /// Adds the next chunk; call once [`LineSplitter::next_line`] returned
    /// `None` (before that, the rest of the previous chunk could still hold
    /// whole lines).
    fn push(&mut self, chunk: Bytes) {
        if !self.chunk.is_empty() {
            self.partial.extend_from_slice(&self.chunk);
        }
        self.chunk = chunk;
    }

    /// The next complete line, without its newline.
    fn next_line(&mut self) -> Option<Bytes> {
        match self.chunk.iter().position(|b| *b == b'\n') {
            Some(end) => {
                let mut line = self.chunk.split_to(end + 1);
                line.truncate(end);
                if self.partial.is_empty() {
                    Some(line)
                } else {
                    self.partial.extend_from_slice(&line);
                    Some(self.partial.split().freeze())
                }
            }
            None => {
                if !self.chunk.is_empty() {
                    self.partial.extend_from_slice(&self.chunk);
                    self.chunk = Bytes::new();
                }
                None
            }
        }
    }

    /// Whether bytes of an unfinished line are held.
    fn has_partial(&self) -> bool {
        !self.partial.is_empty() || !self.chunk.is_empty()
    }
}

/// Splits one line of `COPY … TO STDOUT` text format (without its newline)
/// into cells: fields are tab separated, `\N` alone is NULL, and backslash
/// escapes are decoded (`\b \f \n \r \t \v \\`, octal `\o`–`\ooo`, hex
/// `\xh`/`\xhh`; any other escaped character stands for itself, as COPY
/// FROM reads it). A field without escapes is a zero-copy slice of `line`.
/// A backslash at the end of a field is an error.
pub fn parse_copy_line(line: &Bytes) -> Result<Vec<Cell>, String> {
    let mut cells = Vec::new();
    let mut start = 0;
    for (i, field) in line.split(|b| *b == b'\t').enumerate() {
        let end = start + field.len();
        cells.push(if field == b"\\N" {
            Cell::Null
        } else if !field.contains(&b'\\') {
            Cell::Text(line.slice(start..end))
        } else {
            Cell::Text(unescape_field(field).map_err(|why| format!("column {i}: {why}"))?)
        });
        start = end + 1;
    }
    Ok(cells)
}

fn unescape_field(field: &[u8]) -> Result<Bytes, String> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while let Some(&b) = field.get(i) {
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&c) = field.get(i) else {
            return Err("a backslash ends the field".to_owned());
        };
        i += 1;
        let decoded = match c {
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 0x0b,
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                for _ in 0..2 {
                    match field.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                (value & 0xff) as u8
            }
            b'x' => match field.get(i).and_then(|d| hex_digit(*d)) {
                None => b'x',
                Some(high) => {
                    i += 1;
                    match field.get(i).and_then(|d| hex_digit(*d)) {
                        Some(low) => {
                            i += 1;
                            (high << 4) | low
                        }
                        None => high,
                    }
                }
            },
            other => other,
        };
        out.push(decoded);
    }
    Ok(Bytes::from(out))
}

fn hex_digit(d: u8) -> Option<u8> {
    match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        b'A'..=b'F' => Some(d - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(s: &[u8]) -> Cell {
        Cell::Text(Bytes::copy_from_slice(s))
    }

    fn parse(s: &[u8]) -> Result<Vec<Cell>, String> {
        parse_copy_line(&Bytes::copy_from_slice(s))
    }

    /// COPY text format as the server writes it, with `style` choosing for
    /// each byte how to write it when several spellings decode the same.
    fn encode(cells: &[Cell], style: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut k = 0usize;
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                out.push(b'\t');
            }
            let Some(bytes) = cell.bytes() else {
                out.extend_from_slice(b"\\N");
                continue;
            };
            for &b in bytes.iter() {
                let s = style.get(k % style.len().max(1)).copied().unwrap_or(0) % 4;
                k += 1;
                match (b, s) {
                    (b'\\', _) => out.extend_from_slice(b"\\\\"),
                    (b'\t', _) => out.extend_from_slice(b"\\t"),
                    (b'\n', _) => out.extend_from_slice(b"\\n"),
                    (b'\r', _) => out.extend_from_slice(b"\\r"),
                    (0x08, _) => out.extend_from_slice(b"\\b"),
                    (0x0c, _) => out.extend_from_slice(b"\\f"),
                    (0x0b, _) => out.extend_from_slice(b"\\v"),
                    (_, 1) => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
                    (_, 2) => out.extend_from_slice(format!("\\x{b:02X}").as_bytes()),
                    _ => out.push(b),
                }
            }
        }
        out
    }

    #[test]
    fn splits_fields_and_nulls() {
        assert_eq!(
            parse(b"1\t\\N\tabc\t").unwrap(),
            vec![text(b"1"), Cell::Null, text(b"abc"), text(b"")]
        );
        assert_eq!(parse(b"").unwrap(), vec![text(b"")]);
        // `\\N` is a backslash and an N, not NULL.
        assert_eq!(parse(b"\\\\N").unwrap(), vec![text(b"\\N")]);
    }

    #[test]
    fn decodes_every_escape() {
        assert_eq!(
            parse(b"a\\tb\\nc\\rd\\\\e\\bf\\fg\\vh").unwrap(),
            vec![text(b"a\tb\nc\rd\\e\x08f\x0cg\x0bh")]
        );
        assert_eq!(parse(b"\\101\\7\\0101").unwrap(), vec![text(b"A\x07\x081")]);
        assert_eq!(
            parse(b"\\x41\\x4a\\xfZ\\xZ").unwrap(),
            vec![text(b"AJ\x0fZxZ")]
        );
        // Octal values above 0o377 keep the low byte, as COPY FROM does.
        assert_eq!(parse(b"\\777").unwrap(), vec![text(b"\xff")]);
        assert_eq!(parse(b"\\q\\.").unwrap(), vec![text(b"q.")]);
    }

    #[test]
    fn backslash_at_field_end_is_an_error_not_a_panic() {
        assert!(parse(b"abc\\").is_err());
        assert!(parse(b"a\\\tb").is_err());
        assert!(parse(b"\\").is_err());
    }

    #[test]
    fn unescaped_fields_are_slices_of_the_line() {
        let line = Bytes::from_static(b"abc\tdef");
        let cells = parse_copy_line(&line).unwrap();
        let Cell::Text(b) = &cells[1] else {
            panic!("{cells:?}")
        };
        assert_eq!(b.as_ptr(), line[4..].as_ptr());
    }

    #[test]
    fn lines_split_across_and_within_chunks() {
        let mut lines = LineSplitter::default();
        assert_eq!(lines.next_line(), None);
        lines.push(Bytes::from_static(b"a\tb\nc"));
        assert_eq!(lines.next_line().as_deref(), Some(&b"a\tb"[..]));
        assert_eq!(lines.next_line(), None);
        assert!(lines.has_partial());
        lines.push(Bytes::from_static(b"d"));
        assert_eq!(lines.next_line(), None);
        lines.push(Bytes::from_static(b"e\n\nf\n"));
        assert_eq!(lines.next_line().as_deref(), Some(&b"cde"[..]));
        assert_eq!(lines.next_line().as_deref(), Some(&b""[..]));
        assert_eq!(lines.next_line().as_deref(), Some(&b"f"[..]));
        assert_eq!(lines.next_line(), None);
        assert!(!lines.has_partial());
    }

    proptest! {
        #[test]
        fn any_chunking_yields_the_same_lines(
            lines in prop::collection::vec(prop::collection::vec(
                any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..30), 0..20),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
        ) {
            let mut stream = Vec::new();
            for line in &lines {
                stream.extend_from_slice(line);
                stream.push(b'\n');
            }
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
            cuts.push(0);
            cuts.push(stream.len());
            cuts.sort_unstable();
            let mut splitter = LineSplitter::default();
            let mut got = Vec::new();
            for w in cuts.windows(2) {
                splitter.push(Bytes::copy_from_slice(&stream[w[0]..w[1]]));
                while let Some(line) = splitter.next_line() {
                    got.push(line.to_vec());
                }
            }
            prop_assert!(!splitter.has_partial());
            prop_assert_eq!(got, lines);
        }

        #[test]
        fn round_trips_through_the_encoder(
            cells in prop::collection::vec(
                prop::option::of(prop::collection::vec(any::<u8>(), 0..40)), 1..8),
            style in prop::collection::vec(any::<u8>(), 1..16),
        ) {
            let cells: Vec<Cell> = cells
                .into_iter()
                .map(|c| c.map_or(Cell::Null, |b| Cell::Text(Bytes::from(b))))
                .collect();
            let line = encode(&cells, &style);
            prop_assert!(!line.contains(&b'\n'));
            prop_assert_eq!(parse(&line).unwrap(), cells);
        }

        #[test]
        fn never_panics(line in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&line);
        }
    }

    fn relation(columns: &[&str]) -> Relation {
        Relation {
            oid: 1,
            namespace: "app".into(),
            name: "out\"box".into(),
            replica_identity: b'd',
            columns: columns
                .iter()
                .map(|c| Column {
                    flags: 0,
                    name: (*c).to_owned(),
                    type_oid: 25,
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    #[test]
    fn copy_sql_quotes_names_and_adds_the_split() {
        let r = relation(&["id", "Aggregate Id", "payload"]);
        let split = HashSplit::new("Aggregate Id", 3, 2).unwrap();
        assert_eq!(
            copy_sql(&r, false, &["id".to_owned()], Some(&split), None).unwrap(),
            "COPY (SELECT \"id\", \"Aggregate Id\", \"payload\" FROM \"app\".\"out\"\"box\" \
             WHERE (coalesce(hashtext(\"Aggregate Id\"::text), 0) & 2147483647) % 3 = 2 \
             ORDER BY \"id\") TO STDOUT"
        );
        assert_eq!(
            copy_sql(
                &r,
                false,
                &["payload".to_owned(), "id".to_owned()],
                None,
                None
            )
            .unwrap(),
            "COPY (SELECT \"id\", \"Aggregate Id\", \"payload\" FROM \"app\".\"out\"\"box\" \
             ORDER BY \"payload\", \"id\") TO STDOUT"
        );
        // An operator's condition (walrelay republish) is parenthesised, so
        // an OR in it cannot escape the split.
        assert_eq!(
            copy_sql(
                &r,
                false,
                &["id".to_owned()],
                Some(&split),
                Some("id = 'a' OR true")
            )
            .unwrap(),
            "COPY (SELECT \"id\", \"Aggregate Id\", \"payload\" FROM \"app\".\"out\"\"box\" \
             WHERE (id = 'a' OR true) AND (coalesce(hashtext(\"Aggregate Id\"::text), 0) & 2147483647) % 3 = 2 \
             ORDER BY \"id\") TO STDOUT"
        );
    }

    #[test]
    fn copy_sql_refuses_unknown_columns_and_no_order() {
        let r = relation(&["id", "aggregateid"]);
        let e = copy_sql(&r, false, &["created".to_owned()], None, None).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("snapshot_order_by column \"created\""),
            "{text}"
        );
        assert!(text.contains("app.out\"box"), "{text}");
        assert!(text.contains("id, aggregateid"), "{text}");
        let split = HashSplit::new("tenant", 2, 0).unwrap();
        let text = copy_sql(&r, false, &["id".to_owned()], Some(&split), None)
            .unwrap_err()
            .to_string();
        assert!(text.contains("hash split column \"tenant\""), "{text}");
        let text = copy_sql(&r, false, &[], None, None)
            .unwrap_err()
            .to_string();
        assert!(text.contains("no primary key"), "{text}");
        assert!(text.contains("snapshot_order_by"), "{text}");
    }

    #[test]
    fn a_chunk_key_must_be_unique_not_null_and_in_the_replica_identity() {
        let mut r = relation(&["id", "customer_id", "note"]);
        r.columns[0].flags = Column::FLAG_KEY; // REPLICA IDENTITY DEFAULT: the primary key
        let s = |v: &[&str]| v.iter().map(|c| (*c).to_owned()).collect::<Vec<String>>();
        let pk = vec![s(&["id"])];
        let not_null = s(&["id", "customer_id"]);
        assert_eq!(
            chunk_key_problem(&r, &s(&["id"]), false, &pk, &not_null),
            None
        );
        // Not unique (issue 38: 100 rows per customer_id, 7,199 never sent).
        let why = chunk_key_problem(&r, &s(&["customer_id"]), true, &pk, &not_null).unwrap();
        assert!(
            why.contains("no unique index makes (customer_id) unique"),
            "{why}"
        );
        // A unique index on a subset makes a wider key unique.
        assert_eq!(
            chunk_key_problem(&r, &s(&["id", "customer_id"]), true, &pk, &not_null),
            None
        );
        // NULL ends the table; not in the identity, deletes do not carry it.
        let unique_note = vec![s(&["note"])];
        let why = chunk_key_problem(&r, &s(&["note"]), true, &unique_note, &not_null).unwrap();
        assert!(why.contains("allows NULL"), "{why}");
        let unique_customer = vec![s(&["customer_id"])];
        let why = chunk_key_problem(&r, &s(&["customer_id"]), false, &unique_customer, &not_null)
            .unwrap();
        assert!(why.contains("not in the replica identity"), "{why}");
        // …which only matters when rows change: an outbox's inserts carry all.
        assert_eq!(
            chunk_key_problem(&r, &s(&["customer_id"]), true, &unique_customer, &not_null),
            None
        );
        // A renamed key column is not a column.
        let why = chunk_key_problem(&r, &s(&["order_id"]), false, &pk, &not_null).unwrap();
        assert!(
            why.contains("\"order_id\" is not a published column"),
            "{why}"
        );
    }

    #[test]
    fn hash_split_parts_must_be_valid() {
        assert!(HashSplit::new("a", 0, 0).is_err());
        assert!(HashSplit::new("a", 2, 2).is_err());
        assert_eq!(HashSplit::all("a", 4).unwrap().len(), 4);
        assert!(HashSplit::new("a", 1, 0).is_ok());
    }

    #[test]
    fn configuration_and_data_errors_are_definite_and_name_the_table() {
        let errors = [
            SnapshotError::NoSuchTable {
                table: "app.t".into(),
            },
            SnapshotError::NotATable {
                table: "app.t".into(),
                kind: "a view",
            },
            SnapshotError::NoColumns {
                table: "app.t".into(),
            },
            SnapshotError::NoOrder {
                table: "app.t".into(),
            },
            SnapshotError::Malformed {
                table: "app.t".into(),
                row: 7,
                reason: "x".into(),
            },
        ];
        for e in errors {
            assert!(!e.is_transient(), "{e}");
            assert!(e.to_string().contains("app.t"), "{e}");
        }
        assert!(!SnapshotError::InvalidSplit { parts: 0, index: 0 }.is_transient());
    }

    #[test]
    fn import_quotes_the_snapshot_name() {
        assert_eq!(
            import_sql("00000003-00000002-1"),
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; \
             SET TRANSACTION SNAPSHOT '00000003-00000002-1'"
        );
        assert!(import_sql("x'; DROP TABLE t; --").ends_with("'x''; DROP TABLE t; --'"));
    }
}
