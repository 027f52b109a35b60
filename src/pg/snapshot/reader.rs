//! [`SnapshotReader`]: one `REPEATABLE READ READ ONLY` transaction that
//! imported an exported snapshot before anything else (or, for incremental
//! chunks, its own snapshot per chunk), and the reads inside it: a table's
//! relation as pgoutput publishes it, its key and row estimate, whole
//! tables (optionally one part of a hash split) and chunks as
//! [`SnapshotRows`], the locks every reader takes first.

use std::time::Duration;

use postgres_protocol::escape::{escape_identifier, escape_literal};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use crate::Lsn;
use crate::pg::catalog::{self, describe};
use crate::pg::wire::ConnectParams;
use crate::pgoutput::{Column, Relation};

use super::chunk::{Chunk, chunk_key_problem};
use super::error::{SnapshotError, qualified_display, query_error, relation_display, relkind_name};
use super::rows::SnapshotRows;
use super::shapes::table_shapes;
use super::split::HashSplit;
use super::sql::{After, chunk_sql, copy_sql};

/// A table's read key as a place a resumed read goes on from
/// ([`SnapshotReader::resumable_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeKey {
    pub columns: Vec<String>,
    /// A unique index makes the key unique: go on *after* the last row's
    /// values. Otherwise go on *at* them ([`After::inclusive`]).
    pub unique: bool,
}

/// A connection inside the exported snapshot.
pub struct SnapshotReader {
    client: Client,
    snapshot_name: String,
    /// A resumed snapshot's reader: only the row versions this snapshot
    /// (the interrupted one's, as `pg_current_snapshot()` printed it) saw.
    existed_in: Option<String>,
}

impl std::fmt::Debug for SnapshotReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotReader")
            .field("snapshot_name", &self.snapshot_name)
            .finish_non_exhaustive()
    }
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
            existed_in: None,
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
            existed_in: None,
        })
    }

    /// A reader of a resumed snapshot: [`SnapshotReader::open_now`], whose
    /// reads return only the row versions the interrupted snapshot `taken`
    /// saw (as its [`SnapshotReader::current_snapshot`] printed it): the
    /// rows as of that snapshot's consistent point that still exist
    /// unchanged. A row inserted or updated since is left to the stream
    /// from that point, which carries it. Only valid while the cluster's
    /// transaction ids fit in 32 bits ([`full_xids`]).
    pub async fn open_resumed(
        params: &ConnectParams,
        taken: &str,
    ) -> Result<SnapshotReader, SnapshotError> {
        let mut reader = SnapshotReader::open_now(params).await?;
        reader.existed_in = Some(taken.to_owned());
        Ok(reader)
    }

    /// This transaction's snapshot as `pg_current_snapshot()` prints it
    /// (`xmin:xmax:xip,…`): inside an imported snapshot, the exported one.
    pub async fn current_snapshot(&self) -> Result<String, SnapshotError> {
        self.client
            .query_one("SELECT pg_current_snapshot()::text", &[])
            .await
            .map(|r| r.get(0))
            .map_err(|source| SnapshotError::Query {
                table: String::from("(none)"),
                context: "reading pg_current_snapshot()",
                source,
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
        self.read_selected(relation, order_by, split, filter, None)
            .await
    }

    /// [`SnapshotReader::read`], only the rows after (or at) `after` in
    /// `order_by` ([`After`]; the key as [`SnapshotReader::resumable_key`]
    /// found it): a resumed snapshot's part.
    pub async fn read_after(
        &mut self,
        relation: &Relation,
        order_by: &[String],
        split: Option<&HashSplit>,
        after: Option<After<'_>>,
    ) -> Result<SnapshotRows<'_>, SnapshotError> {
        self.read_selected(relation, order_by, split, None, after)
            .await
    }

    /// The columns `relation` is read in when `order_by` is (its primary
    /// key when empty), if a read can go on from a row's values of them:
    /// every column published and NOT NULL. [`ResumeKey::unique`] when
    /// keyset paging by them neither skips nor repeats a row (a unique
    /// index: [`chunk_key_problem`] for rows only inserted); otherwise a
    /// resumed read goes on *at* the last value (its ties read again).
    /// `None` when a column may be NULL, or the table has no key.
    pub async fn resumable_key(
        &self,
        relation: &Relation,
        order_by: &[String],
    ) -> Result<Option<ResumeKey>, SnapshotError> {
        let key = if order_by.is_empty() {
            self.primary_key(relation).await?
        } else {
            order_by.to_vec()
        };
        if key.is_empty() {
            return Ok(None);
        }
        if let Ok((used, None)) = self.chunk_key(relation, &key, true).await
            && used == key
        {
            return Ok(Some(ResumeKey {
                columns: key,
                unique: true,
            }));
        }
        let not_null = self.not_null_columns(relation).await?;
        Ok(key
            .iter()
            .all(|c| relation.column_index(c).is_some() && not_null.contains(c))
            .then_some(ResumeKey {
                columns: key,
                unique: false,
            }))
    }

    async fn read_selected(
        &mut self,
        relation: &Relation,
        order_by: &[String],
        split: Option<&HashSplit>,
        filter: Option<&str>,
        after: Option<After<'_>>,
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
        let sql = copy_sql(
            relation,
            !partitioned,
            order_by,
            split,
            filter,
            self.existed_in.as_deref(),
            after,
        )?;
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
        Ok(SnapshotRows::new(
            stream,
            relation_display(relation),
            relation.columns.len(),
        ))
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
            existed_in: None,
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
            // After the snapshot (taken by the query above): every commit
            // it sees is in the WAL below this position (see `Chunk`).
            let row = self
                .client
                .query_one(
                    "SELECT (pg_snapshot_xmax(pg_current_snapshot())::text::int8 % 4294967296)::int8, \
                     (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
                      ELSE pg_current_wal_insert_lsn() END)::text",
                    &[],
                )
                .await
                .map_err(query("reading the chunk's snapshot"))?;
            let xmax = row.get::<_, i64>(0) as u32;
            let horizon = row
                .get::<_, Option<String>>(1)
                .and_then(|text| text.parse::<Lsn>().ok())
                .ok_or_else(|| SnapshotError::Malformed {
                    table: table.clone(),
                    row: 0,
                    reason: "the server gave no WAL position for the chunk's snapshot".into(),
                })?;
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
                xmax,
                horizon,
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

    /// The NOT NULL columns of `relation`.
    async fn not_null_columns(&self, relation: &Relation) -> Result<Vec<String>, SnapshotError> {
        Ok(self
            .client
            .query(
                "SELECT attname::text FROM pg_attribute \
                 WHERE attrelid = $1::oid AND attnum > 0 AND attnotnull AND NOT attisdropped",
                &[&relation.oid],
            )
            .await
            .map_err(query_error(relation_display(relation))(
                "reading the NOT NULL columns",
            ))?
            .iter()
            .map(|r| r.get(0))
            .collect())
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
        let not_null = self.not_null_columns(relation).await?;
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

/// The statements that begin the snapshot transaction.
fn import_sql(snapshot_name: &str) -> String {
    format!(
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
        escape_literal(snapshot_name)
    )
}

#[cfg(test)]
mod tests;

/// Whether a row's 32-bit `xmin` is its full transaction id on `client`'s
/// server: the cluster has used fewer than 2^32 transaction ids (epoch 0,
/// as `pg_snapshot_xmax(pg_current_snapshot())` shows without taking an
/// id). Past that, a frozen row's raw `xmin` can equal a recent
/// transaction's low 32 bits, and a resumed snapshot could not tell the two
/// apart ([`super::sql::EXISTED_IN`]).
pub async fn full_xids(client: &Client) -> Result<bool, SnapshotError> {
    client
        .query_one(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::numeric < 4294967296",
            &[],
        )
        .await
        .map(|r| r.get(0))
        .map_err(|source| SnapshotError::Query {
            table: String::from("(none)"),
            context: "reading the transaction id epoch",
            source,
        })
}
