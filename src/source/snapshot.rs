//! The initial snapshot as part of the source: several readers inside one
//! exported snapshot, merged into one ordered feed of rows — or, resuming
//! an interrupted snapshot on its slot, inside a snapshot of their own that
//! keeps only the rows the interrupted one saw.
//!
//! Invariants:
//! - **One consistent cut.** Every reader imports the snapshot the slot
//!   exported before the replication connection runs another command
//!   ([`Snapshot::open`] is the only place that opens readers), so all of
//!   them see exactly the transactions committed before the slot's
//!   consistent point, and streaming from that point sees every later one.
//! - **The same cut when resumed** ([`Origin::Resumed`]). The exported
//!   snapshot died with its connection, but its `pg_current_snapshot()`
//!   ([`Snapshot::taken`]) was stored: the readers see the tables now and
//!   keep only the row versions whose inserting transaction that snapshot
//!   saw (`pg::snapshot::EXISTED_IN`). A row as of the consistent point
//!   that still exists unchanged is read; one inserted, updated or deleted
//!   since is the stream's, which starts at the same consistent point. That
//!   holds only if no table was rewritten (a rewrite gives every row a new
//!   `xmin`) or changed: the tables' shapes as the readers see them must
//!   equal those the interrupted snapshot stored
//!   ([`SnapshotError::ChangedSinceSnapshot`] otherwise), and only while
//!   the cluster's transaction ids fit in 32 bits
//!   (`pg::snapshot::full_xids`). When the caller finds either broken, it
//!   resumes **unfiltered** (`filtered: false`): the tables are read as
//!   they are now, on the same slot — rows written since the point come
//!   twice (snapshot and stream), none is lost.
//! - **Resumable part by part.** When a table's read key is NOT NULL
//!   (`SnapshotReader::resumable_key`), each batch carries its last row's
//!   key ([`crate::source::SnapshotChunk`]); a resumed reader reads its
//!   part (the same hash split: as many readers as then) from the key the
//!   caller stored ([`PartFrom`]): after it when the key is unique, at it
//!   when not (the rows sharing that value are read again, none skipped).
//!   So only the rows after the last one Kafka held (and its ties) are
//!   read again. Unfiltered, a stored key places a part only in a table
//!   whose columns — types and collations, which order the key — are as
//!   they were (`pg::snapshot::same_columns`: a `VACUUM FULL` keeps them,
//!   an `ALTER … TYPE` may not); such a table is read whole.
//! - **Per-aggregate order.** Each table is split among the readers by a
//!   hash of its aggregate-id column ([`HashSplit`]), so one aggregate's rows
//!   are all read by one reader, in the table's snapshot order (`order_by`,
//!   default the primary key); the readers' batches are merged without
//!   reordering any one reader's rows.
//! - **Bounded memory.** Each reader hands over batches of at most
//!   `[snapshot] fetch_rows` rows (and about 1 MiB) through a channel of
//!   [`QUEUED_BATCHES`] per reader, and all readers together hold at most
//!   [`READ_AHEAD_BYTES`] of row text read ahead of the caller (each batch
//!   holds its bytes of that budget until its last row was handed out),
//!   plus the batch each reader is filling. A caller that stops pulling
//!   stops the readers (and TCP stops the server).
//! - **No DDL between the cut and the read.** Before any row is read,
//!   every reader locks every table (`ACCESS SHARE`, held until it ends),
//!   and the tables' storage and columns as the snapshot sees them must
//!   equal the catalog now; otherwise a `TRUNCATE` or rewrite committed
//!   after the consistent point would make the snapshot see the table empty
//!   ([`SnapshotError::ChangedSinceSnapshot`]: taken again from a new point,
//!   nothing published).
//! - **Complete or an error.** A table is reported done only when every
//!   reader finished its part; a reader that fails ends the feed with its
//!   error (the snapshot is then taken again from the start).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::pg::catalog;
use crate::pg::snapshot::{
    After, HashSplit, SnapshotError, SnapshotReader, changed_since, same_columns, shape_changes,
    table_shapes,
};
use crate::pg::wire::ConnectParams;
use crate::pgoutput::{Relation, TupleData};

/// Bytes of row text after which a reader hands over a batch early.
const BATCH_BYTES: usize = 1 << 20;
/// Batches each reader may have queued ahead of the consumer.
pub const QUEUED_BATCHES: usize = 2;
/// Row bytes all readers together may have read ahead of the consumer
/// (queued batches and the one being handed out): the read-ahead does not
/// grow with `parallelism`.
pub const READ_AHEAD_BYTES: usize = 4 << 20;

/// Where the readers' snapshot comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The slot's exported snapshot, by name: a new snapshot.
    Exported(String),
    /// An interrupted snapshot, resumed on its slot: its readers' snapshot
    /// as `pg_current_snapshot()` printed it, the tables' shapes it saw, and
    /// which resumption this is (1 the first): its rows are numbered from
    /// `attempt << SNAPSHOT_ATTEMPT_SHIFT`.
    Resumed {
        taken: String,
        shapes: Vec<(u32, String)>,
        attempt: u32,
        /// Where each reader's part of a table not done goes on from.
        parts: Vec<PartFrom>,
        /// Whether reads keep only the rows `taken` saw; `false` when the
        /// `xmin`s cannot tell (a table rewritten since, or transaction ids
        /// past 2^32): the tables are then read as they are now.
        filtered: bool,
    },
}

/// Where a resumed snapshot's reader `part` (of `of`) reads `table` from:
/// after `after`, the values of the table's read key at the last row up to
/// which Kafka held every row of that part. Used only with as many readers
/// as then and the same key columns, still NOT NULL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartFrom {
    /// `schema.table`.
    pub table: String,
    pub part: u32,
    pub of: u32,
    /// The read key's columns the part was stored under: it is used only
    /// while the table resumes by the same columns.
    pub key: Vec<String>,
    pub after: Vec<Option<String>>,
}

/// Snapshot rows of attempt `a` of one snapshot (one consistent point) are
/// numbered from `a << SNAPSHOT_ATTEMPT_SHIFT` ([`crate::source::Position`]'s
/// `index`): attempts never share a number, so a `[[table]]` snapshot
/// event id (`<consistent point>:snapshot:…`) names one row for good even
/// when a resumed attempt reads other rows than the interrupted one did.
/// 2^40 rows per attempt.
pub const SNAPSHOT_ATTEMPT_SHIFT: u32 = 40;

impl Origin {
    /// The position index of this attempt's first row.
    pub fn first_index(&self) -> u64 {
        match self {
            Origin::Exported(_) => 0,
            Origin::Resumed { attempt, .. } => u64::from(*attempt) << SNAPSHOT_ATTEMPT_SHIFT,
        }
    }
}

/// One table to snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotTable {
    pub schema: String,
    pub name: String,
    /// Columns to read in (empty: the primary key).
    pub order_by: Vec<String>,
    /// The column that splits the table among readers (the aggregate id).
    pub split_by: String,
}

impl SnapshotTable {
    /// An outbox table: read in `order_by` (empty: the primary key), split
    /// among readers by its aggregate id column, so that each aggregate's
    /// rows are read by one reader, in order.
    pub fn outbox(schema: &str, name: &str, order_by: &[String], aggregate_id: &str) -> Self {
        SnapshotTable {
            schema: schema.to_owned(),
            name: name.to_owned(),
            order_by: order_by.to_vec(),
            split_by: aggregate_id.to_owned(),
        }
    }

    /// A `[[table]]` capture: read in `key` order (its primary key or the
    /// configured key columns), split among readers by the key's first
    /// column, so that the rows of one key are read by one reader.
    pub fn captured(schema: &str, name: &str, key: &[String]) -> Self {
        SnapshotTable {
            schema: schema.to_owned(),
            name: name.to_owned(),
            split_by: key.first().cloned().unwrap_or_default(),
            order_by: key.to_vec(),
        }
    }

    /// `schema.name`.
    pub fn display(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

/// What a reader task sends.
#[derive(Debug)]
pub(super) enum Feed {
    /// Rows of table `table` (index in the plan), in that reader's order,
    /// holding their bytes of the shared read-ahead until handed out; read
    /// by reader `part`, the last one's read key `last_key` (`None`: the
    /// table cannot be resumed by key).
    Rows {
        table: usize,
        relation: Arc<Relation>,
        rows: Vec<TupleData>,
        budget: OwnedSemaphorePermit,
        part: u32,
        last_key: Option<Vec<Option<String>>>,
    },
    /// This reader has read its whole part of table `table`.
    TableRead {
        table: usize,
    },
    Failed(SnapshotError),
}

/// Progress of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableProgress {
    pub table: String,
    /// The columns a part of it resumes by (its read key, resolved: the
    /// primary key when `snapshot_order_by` is empty); empty when it does
    /// not resume by key. A stored part names the key it was stored under
    /// ([`PartFrom::key`]): another key (`snapshot_order_by` changed, the
    /// primary key replaced) never places a part.
    pub key: Vec<String>,
    /// `pg_class.reltuples` at the start, when known.
    pub estimated_rows: Option<u64>,
    pub rows_read: u64,
    pub done: bool,
}

/// The running snapshot: reader tasks and what they have delivered.
#[derive(Debug)]
pub(super) struct Snapshot {
    pub(super) feed: mpsc::Receiver<Feed>,
    pub(super) progress: Vec<TableProgress>,
    /// Readers still working on each table.
    pub(super) readers_left: Vec<usize>,
    /// Tables whose relation was announced downstream.
    pub(super) announced: Vec<bool>,
    pub(super) tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The readers' snapshot as `pg_current_snapshot()` prints it (resumed:
    /// the interrupted one's): what a resume selects rows by.
    pub(super) taken: String,
    /// The tables' shapes (and their partitions') in that snapshot.
    pub(super) shapes: Vec<(u32, String)>,
    /// How many readers read it (each its part of every table).
    pub(super) readers: u32,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Snapshot {
    /// Opens `parallelism` readers on `origin` (an exported snapshot: all
    /// import it before this returns), reads the tables' shapes and row
    /// estimates, and starts the reader tasks.
    pub(super) async fn open(
        params: &ConnectParams,
        origin: &Origin,
        publication: &str,
        tables: &[SnapshotTable],
        parallelism: u32,
        batch_rows: usize,
    ) -> Result<Snapshot, SnapshotError> {
        let parallelism = parallelism.max(1);
        let mut readers = Vec::with_capacity(parallelism as usize);
        for _ in 0..parallelism {
            readers.push(match origin {
                Origin::Exported(name) => SnapshotReader::open(params, name).await?,
                Origin::Resumed {
                    taken,
                    filtered: true,
                    ..
                } => SnapshotReader::open_resumed(params, taken).await?,
                Origin::Resumed {
                    filtered: false, ..
                } => SnapshotReader::open_now(params).await?,
            });
        }
        let mut relations = Vec::with_capacity(tables.len());
        let mut progress = Vec::with_capacity(tables.len());
        let mut keys = Vec::with_capacity(tables.len());
        for t in tables {
            let relation = readers[0]
                .table_relation(&t.schema, &t.name, Some(publication))
                .await?;
            // The read key's columns, when it is NOT NULL: each batch's last
            // row is then a place to resume from (at it, if not unique).
            let resumable = readers[0].resumable_key(&relation, &t.order_by).await?;
            let key_names = resumable
                .as_ref()
                .map(|k| k.columns.clone())
                .unwrap_or_default();
            keys.push(resumable.and_then(|key| {
                let columns = key
                    .columns
                    .iter()
                    .map(|c| relation.column_index(c))
                    .collect::<Option<Vec<usize>>>()?;
                Some((columns, key.unique))
            }));
            progress.push(TableProgress {
                table: t.display(),
                key: key_names,
                estimated_rows: readers[0].estimate_rows(&relation).await?,
                rows_read: 0,
                done: false,
            });
            relations.push(Arc::new(relation));
        }
        // Every reader locks every table before any is read (a reader that
        // finishes early ends its transaction and its locks), then the
        // tables as the snapshot sees them must be the tables as they are:
        // DDL committed between the consistent point and the locks would
        // make the snapshot miss rows.
        let locked: Vec<&Relation> = relations.iter().map(|r| r.as_ref()).collect();
        for reader in &readers {
            reader.lock(&locked).await?;
        }
        let oids: Vec<u32> = relations.iter().map(|r| r.oid).collect();
        let in_snapshot = readers[0].table_shapes(&oids).await?;
        let now = catalog::connect(params)
            .await
            .map_err(SnapshotError::Connect)?;
        if let Some(changes) = shape_changes(&in_snapshot, &table_shapes(&now, &oids).await?) {
            return Err(SnapshotError::ChangedSinceSnapshot { changes });
        }
        drop(now);
        // Unfiltered, a stored key still places a part only where the
        // table's columns sort as they did.
        let goes_on: Vec<bool> = relations
            .iter()
            .map(|r| match origin {
                Origin::Resumed {
                    filtered: false,
                    shapes,
                    ..
                } => same_columns(shapes, &in_snapshot, r.oid),
                _ => true,
            })
            .collect();
        let (taken, shapes) = match origin {
            Origin::Exported(_) => (readers[0].current_snapshot().await?, in_snapshot),
            Origin::Resumed {
                taken,
                shapes,
                filtered,
                ..
            } => {
                // A table rewritten since the interrupted snapshot has new
                // `xmin`s everywhere: its rows would all look too new to the
                // filter (the caller, told by the catalog, reads unfiltered).
                if *filtered && let Some(changes) = changed_since(shapes, &in_snapshot) {
                    return Err(SnapshotError::ChangedSinceSnapshot { changes });
                }
                (taken.clone(), shapes.clone())
            }
        };
        let (tx, feed) = mpsc::channel(QUEUED_BATCHES * parallelism as usize);
        let read_ahead = Arc::new(Semaphore::new(READ_AHEAD_BYTES));
        let mut tasks = Vec::with_capacity(readers.len());
        for (index, reader) in readers.into_iter().enumerate() {
            let plan: Vec<PartPlan> = tables
                .iter()
                .zip(&relations)
                .zip(&keys)
                .zip(&goes_on)
                .zip(&progress)
                .map(|((((t, rel), key), &goes_on), p)| {
                    let key_names = &p.key;
                    let split = (parallelism > 1)
                        .then(|| HashSplit::new(&t.split_by, parallelism, index as u32))
                        .transpose()?;
                    let after = match (origin, key) {
                        (Origin::Resumed { parts, .. }, Some(_)) if goes_on => parts
                            .iter()
                            .find(|p| {
                                p.table == t.display()
                                    && p.part == index as u32
                                    && p.of == parallelism
                                    && p.key == *key_names
                            })
                            .map(|p| p.after.clone()),
                        _ => None,
                    };
                    Ok(PartPlan {
                        relation: rel.clone(),
                        order_by: t.order_by.clone(),
                        split,
                        key: key.as_ref().map(|(columns, _)| columns.clone()),
                        after: after.map(|key_values| (key_values, !unique(key))),
                    })
                })
                .collect::<Result<_, SnapshotError>>()?;
            tasks.push(tokio::spawn(read_all(
                reader,
                index as u32,
                plan,
                batch_rows,
                read_ahead.clone(),
                tx.clone(),
            )));
        }
        Ok(Snapshot {
            feed,
            readers_left: vec![parallelism as usize; tables.len()],
            announced: vec![false; tables.len()],
            progress,
            tasks,
            taken,
            shapes,
            readers: parallelism,
        })
    }
}

/// One reader's part of one table.
struct PartPlan {
    relation: Arc<Relation>,
    order_by: Vec<String>,
    split: Option<HashSplit>,
    /// The read key's column indexes, when it is NOT NULL.
    key: Option<Vec<usize>>,
    /// Resumed: the part goes on after this key (at it: `true`).
    after: Option<(Vec<Option<String>>, bool)>,
}

/// Whether a table's read key (from `resumable_key`) is unique.
fn unique(key: &Option<(Vec<usize>, bool)>) -> bool {
    key.as_ref().is_some_and(|(_, unique)| *unique)
}

/// The read key's values of `row` (text), `None` if one is not text (never
/// for COPY's text format) or not valid UTF-8.
fn key_of(row: &TupleData, key: &[usize]) -> Option<Vec<Option<String>>> {
    key.iter()
        .map(|&i| match row.0.get(i)? {
            crate::pgoutput::Cell::Null => Some(None),
            cell => cell
                .bytes()
                .and_then(|b| std::str::from_utf8(b).ok())
                .map(|t| Some(t.to_owned())),
        })
        .collect()
}

/// One reader's whole job: its part (`part`) of every table, in plan order.
async fn read_all(
    mut reader: SnapshotReader,
    part: u32,
    plan: Vec<PartPlan>,
    batch_rows: usize,
    read_ahead: Arc<Semaphore>,
    tx: mpsc::Sender<Feed>,
) {
    for (table, p) in plan.into_iter().enumerate() {
        let PartPlan {
            relation,
            order_by,
            split,
            key,
            after,
        } = p;
        let result = async {
            let mut rows = reader
                .read_after(
                    &relation,
                    &order_by,
                    split.as_ref(),
                    after.as_ref().map(|(key, inclusive)| After {
                        key,
                        inclusive: *inclusive,
                    }),
                )
                .await?;
            while let Some(batch) = rows.next_batch(batch_rows, BATCH_BYTES).await? {
                let last_key = key
                    .as_deref()
                    .and_then(|k| batch.last().and_then(|row| key_of(row, k)));
                let bytes = batch
                    .iter()
                    .flat_map(|row| row.0.iter())
                    .map(|cell| cell.bytes().map_or(0, |b| b.len()))
                    .sum::<usize>()
                    .clamp(1, READ_AHEAD_BYTES);
                let Ok(budget) = read_ahead
                    .clone()
                    .acquire_many_owned(u32::try_from(bytes).unwrap_or(u32::MAX))
                    .await
                else {
                    return Ok(false); // closed: the snapshot is gone
                };
                let rows = Feed::Rows {
                    table,
                    relation: relation.clone(),
                    rows: batch,
                    budget,
                    part,
                    last_key,
                };
                if tx.send(rows).await.is_err() {
                    return Ok(false); // the consumer is gone
                }
            }
            Ok::<bool, SnapshotError>(true)
        }
        .await;
        match result {
            Ok(true) => {
                if tx.send(Feed::TableRead { table }).await.is_err() {
                    return;
                }
            }
            Ok(false) => return,
            Err(e) => {
                let _ = tx.send(Feed::Failed(e)).await;
                return;
            }
        }
    }
    // Ends the read-only transaction; nothing depends on its outcome.
    let _ = reader.finish().await;
}
