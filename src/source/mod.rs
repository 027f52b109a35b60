//! The source: PostgreSQL's side of the pipeline, as one ordered stream of
//! [`SourceEvent`]s.
//!
//! It owns the replication stream, the relation cache and transaction
//! assembly (and, with the snapshot, the snapshot readers): everything that
//! knows what pgoutput messages mean. Downstream (`relay` → `router` →
//! `sink`) sees only events with a [`Position`]; upstream it reports the
//! position the checkpoint lets it confirm ([`Source::confirm`]) and nothing
//! else.
//!
//! Invariants:
//! - **Order is the server's.** Events come out in the order the walsender
//!   sent them; a change is always inside `Begin … Commit` of its
//!   transaction and carries that transaction's commit LSN and its index in
//!   the transaction (0, 1, 2, … over every change, published or not; each
//!   table of a TRUNCATE counts as one, and so does each transactional
//!   logical decoding message, routed or not), so a
//!   position names one change for good: re-sending the same WAL yields the
//!   same positions.
//! - **Every change names a known relation of the right width.** A row of a
//!   relation never described by a Relation message, or with a different
//!   number of cells than its description, is an error naming the LSN — it
//!   is never passed on half-understood.
//! - **Positions never go back.** The received position only grows, and
//!   PostgreSQL's `0/0` placeholders (it sends them as `wal_start` for
//!   messages that are not the last of a write) never replace a real one.
//! - **Only the caller confirms.** The source sends a status update only
//!   with the position handed to [`Source::confirm`] (the checkpoint's
//!   acknowledged frontier); [`ReplicationStream::send_status`] never lets
//!   it go backwards.
//! - Knows nothing of Kafka, the router or the checkpoint.

mod assemble;
mod incremental;
pub mod lease;
pub mod slot;
mod snapshot;
mod streamed;

use std::sync::Arc;

use bytes::Bytes;

use crate::Lsn;
use crate::pg::catalog::CatalogError;
use crate::pg::replication::{
    ReplicationClient, ReplicationMessage, ReplicationStream, StreamEvent,
};
use crate::pg::snapshot::SnapshotError;
use crate::pg::wire::{ConnectParams, WireError};
use crate::pgoutput::{DecodeError, Relation, TupleData};

pub use incremental::{ChunkTable, IncrementalPlan, WATERMARK_PREFIX};
pub use snapshot::{Origin, PartFrom, SNAPSHOT_ATTEMPT_SHIFT, SnapshotTable, TableProgress};
pub use streamed::{SpillDirError, requested as in_progress_requested, taken_whole};

/// The batch a snapshot row came in: consecutive rows of one table read by
/// one reader (its part of the table), handed out whole before the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotChunk {
    /// Numbered in the order batches are handed out, from 0.
    pub id: u32,
    /// The reader: its part of the table.
    pub part: u32,
    /// The read key of the batch's last row: the part resumes after it
    /// once Kafka holds every row up to it (`None`: not resumable by key).
    pub last_key: Option<Vec<Option<String>>>,
}

/// Where a change sits in the WAL: its transaction's commit LSN and its
/// index among that transaction's changes. Stable across re-sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub commit_lsn: Lsn,
    pub index: u64,
}

/// What a change did to its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Insert,
    Update,
    Delete,
}

/// The transaction a change belongs to, as its Begin said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Txn {
    pub xid: u32,
    /// Commit time, microseconds since 2000-01-01 (PostgreSQL's epoch).
    pub commit_time: i64,
}

/// One row change of a committed transaction.
#[derive(Debug, Clone)]
pub struct Change {
    pub pos: Position,
    pub txn: Txn,
    /// Where the change itself is in the WAL (its message's `wal_start`);
    /// Debezium's `source.lsn`.
    pub lsn: Lsn,
    pub op: Op,
    pub relation: Arc<Relation>,
    /// The old row (key or whole row, per the replica identity) of an update
    /// or delete, when PostgreSQL sent one.
    pub old: Option<TupleData>,
    /// The new row of an insert or update.
    pub new: Option<TupleData>,
}

/// What the source yields, in the server's order.
#[derive(Debug, Clone)]
pub enum SourceEvent {
    /// A transaction begins; its changes follow, then its [`SourceEvent::Commit`].
    Begin {
        commit_lsn: Lsn,
        xid: u32,
        /// Commit time, microseconds since 2000-01-01 (PostgreSQL's epoch).
        commit_time: i64,
        /// Where the Begin message is in the stream (its `wal_start`; the
        /// newest position known when PostgreSQL sends 0/0): from
        /// PostgreSQL 15 on the transaction's first published change, before
        /// that its first WAL record. Debezium names the transaction by it
        /// in its BEGIN record.
        lsn: Lsn,
        /// When the walsender sent the Begin, microseconds since 2000-01-01
        /// by the server's clock (as `commit_time`). Read against walrelay's
        /// clock when the Begin arrives, it bounds the two clocks' difference
        /// (`relay::pace` estimates how far behind its commits the stream is
        /// read from it).
        sent_time: i64,
    },
    /// A relation's shape, before the first change that uses it (and again
    /// when it changes).
    Relation(Arc<Relation>),
    Change(Change),
    /// `TRUNCATE` of `relations` (one statement; pgoutput's Truncate
    /// message). Each relation is a change of its own: relation `k` has
    /// index `pos.index + k` in the transaction. `lsn` is the message's
    /// position (Debezium's `source.lsn`).
    Truncate {
        pos: Position,
        txn: Txn,
        lsn: Lsn,
        relations: Vec<Arc<Relation>>,
    },
    /// The transaction committed at `commit_lsn` is complete; `end_lsn` is
    /// the position to confirm once all of it is delivered.
    Commit {
        commit_lsn: Lsn,
        end_lsn: Lsn,
        /// The transaction's commit time, microseconds since 2000-01-01.
        commit_time: i64,
    },
    /// A transactional logical decoding message
    /// (`pg_logical_emit_message(true, prefix, content)`): a change of its
    /// transaction, inside its `Begin … Commit`, with an index of its own
    /// (whether anything routes it or not, so that configuration never
    /// shifts the positions of other changes). `lsn` is the message's own
    /// position in the WAL.
    TxnMessage {
        pos: Position,
        txn: Txn,
        lsn: Lsn,
        prefix: String,
        content: Bytes,
    },
    /// A non-transactional logical decoding message
    /// (`pg_logical_emit_message(false, …)`), outside any transaction: a WAL
    /// record of its own that ends at `lsn`.
    Message {
        lsn: Lsn,
        prefix: String,
        content: Bytes,
    },
    /// The server has nothing for us below `wal_end` (a keepalive); `reply`
    /// asks for a status update now.
    Idle {
        wal_end: Lsn,
        reply: bool,
    },
    /// A row that existed at the snapshot's consistent point. `pos` is the
    /// consistent point and the row's number in the snapshot. Its table's
    /// [`SourceEvent::Relation`] came first.
    SnapshotRow {
        pos: Position,
        /// The row's table: its index in [`Source::snapshot_progress`].
        table: usize,
        relation: Arc<Relation>,
        row: TupleData,
        /// The batch it came in (the same for each of the batch's rows).
        chunk: Arc<SnapshotChunk>,
    },
    /// Every row of `table` (its index in [`Source::snapshot_progress`])
    /// was read (`rows` of them).
    SnapshotTableDone {
        table: usize,
        rows: u64,
    },
    /// One chunk of an incremental snapshot (see
    /// [`Source::start_incremental`]): rows of table `plan.tables[table]`
    /// that existed when the chunk was read and that the stream has carried
    /// no newer version of, at `lsn` (its high watermark's position: every
    /// streamed event before it came first). `read` rows were read (before
    /// leaving the stale ones out); `plan` is the snapshot's progress with
    /// this chunk done. No `relation` (and no rows): the table was given up
    /// (`plan` says why).
    SnapshotChunk {
        lsn: Lsn,
        table: usize,
        relation: Option<Arc<Relation>>,
        rows: Vec<TupleData>,
        read: usize,
        plan: IncrementalPlan,
    },
    /// Every table was read. Nothing follows until the caller calls
    /// [`Source::start_streaming`]: the snapshot's records must be safe in
    /// Kafka (and the snapshot marked completed) before streaming starts.
    SnapshotDone {
        consistent_point: Lsn,
    },
}

/// Why the source cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("cannot decode the replication stream at {lsn}: {source}")]
    Decode { lsn: Lsn, source: DecodeError },
    #[error("replication stream out of order at {lsn}: {what}")]
    Stream { lsn: Lsn, what: String },
    #[error("the replication stream ended unexpectedly")]
    Ended,
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// After START_REPLICATION the slot was not where this instance left it
    /// (see `slot::start_checked`).
    #[error(
        "replication slot {slot:?} is not where this instance expected it after \
         START_REPLICATION: expected confirmed_flush_lsn {expected}, found {}",
        found.map_or_else(|| "no slot".to_owned(), |l| l.to_string())
    )]
    SlotMoved {
        slot: String,
        expected: Lsn,
        found: Option<Lsn>,
    },
    /// The slot was gone right after this instance created it.
    #[error("replication slot {slot:?} vanished right after it was created")]
    SlotVanished { slot: String },
    /// The slot became lost between reading it and START_REPLICATION.
    #[error("replication slot {slot:?} became lost (wal_status = 'lost')")]
    SlotLost { slot: String },
    /// A transaction streamed while it runs could not be held past the
    /// memory bound, or read back (`[postgres] stream_spill_dir`).
    #[error(
        "cannot {what} a spill file of a transaction PostgreSQL streamed while it ran, in {} \
         ([postgres] stream_spill_dir): {source}",
        dir.display()
    )]
    Spill {
        what: &'static str,
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Misuse(&'static str),
}

/// A replication session's source (see the module doc).
#[derive(Debug)]
pub struct Source {
    state: State,
    assembler: assemble::Assembler,
    /// The incremental snapshot running beside the stream, if any.
    incremental: Option<incremental::Incremental>,
}

#[derive(Debug)]
enum State {
    /// Reading the snapshot; the replication connection idles meanwhile
    /// (its next command would end the exported snapshot's life).
    Snapshot {
        client: ReplicationClient,
        consistent_point: Lsn,
        snapshot: Box<snapshot::Snapshot>,
        /// The batch being handed out, and its table.
        batch: std::vec::IntoIter<TupleData>,
        /// The batch's share of the readers' read-ahead, given back once
        /// its last row is out.
        batch_budget: Option<tokio::sync::OwnedSemaphorePermit>,
        /// The batch's table (index in `snapshot.progress`) and relation.
        relation: Option<(usize, Arc<Relation>)>,
        next_index: u64,
        /// The batch in hand, and the next batch's number.
        chunk: Arc<SnapshotChunk>,
        next_chunk: u32,
    },
    /// The snapshot is read; streaming has not started.
    SnapshotRead {
        client: ReplicationClient,
        consistent_point: Lsn,
    },
    Streaming(ReplicationStream),
    /// Between states (only if starting the stream failed).
    Gone,
}

impl Source {
    /// Wraps a stream that started replication at `start`.
    pub fn new(stream: ReplicationStream, start: Lsn) -> Source {
        Source {
            assembler: assemble::Assembler::new(start, stream.in_progress()),
            state: State::Streaming(stream),
            incremental: None,
        }
    }

    /// Starts streaming `slot` from `from` and checks that the slot is
    /// still at `confirmed`, the confirmed position this instance read
    /// (`slot::start_checked`).
    pub async fn resume(
        client: ReplicationClient,
        catalog: &tokio_postgres::Client,
        slot: &str,
        from: Lsn,
        confirmed: Lsn,
        publication: &str,
    ) -> Result<Source, SourceError> {
        let stream =
            slot::start_checked(client, catalog, slot, from, confirmed, publication).await?;
        Ok(Source::new(stream, from))
    }

    /// A source that first yields the rows of `tables` as of the slot's
    /// consistent point (`consistent_point`, `origin`: the snapshot the slot
    /// exported, or an interrupted one's resumed), read by `parallelism`
    /// connections in batches of at most `batch_rows`, and then (after
    /// [`Source::start_streaming`]) the changes from that point. `client`
    /// is the connection that created the slot, idle since (or, resumed, a
    /// new one).
    pub async fn snapshot(
        client: ReplicationClient,
        (consistent_point, origin): (Lsn, &Origin),
        params: &ConnectParams,
        publication: &str,
        tables: &[SnapshotTable],
        parallelism: u32,
        batch_rows: usize,
    ) -> Result<Source, SourceError> {
        let snapshot =
            snapshot::Snapshot::open(params, origin, publication, tables, parallelism, batch_rows)
                .await?;
        Ok(Source {
            state: State::Snapshot {
                client,
                consistent_point,
                snapshot: Box::new(snapshot),
                batch: Vec::new().into_iter(),
                batch_budget: None,
                relation: None,
                next_index: origin.first_index(),
                chunk: Arc::new(SnapshotChunk {
                    id: 0,
                    part: 0,
                    last_key: None,
                }),
                next_chunk: 0,
            },
            assembler: assemble::Assembler::new(consistent_point, None),
            incremental: None,
        })
    }

    /// The snapshot's readers' snapshot (`pg_current_snapshot()`) and the
    /// tables' shapes in it, while the snapshot is read: what the offset
    /// store keeps so that an interrupted snapshot can be resumed.
    pub fn snapshot_taken(&self) -> Option<(&str, &[(u32, String)])> {
        match &self.state {
            State::Snapshot { snapshot, .. } => Some((&snapshot.taken, &snapshot.shapes)),
            _ => None,
        }
    }

    /// The snapshot's readers (each reads its part of every table); 0 when
    /// there is no snapshot.
    pub fn snapshot_readers(&self) -> u32 {
        match &self.state {
            State::Snapshot { snapshot, .. } => snapshot.readers,
            _ => 0,
        }
    }

    /// Per-table progress of the snapshot (empty when there is none).
    pub fn snapshot_progress(&self) -> &[TableProgress] {
        match &self.state {
            State::Snapshot { snapshot, .. } => &snapshot.progress,
            _ => &[],
        }
    }

    /// After [`SourceEvent::SnapshotDone`]: starts streaming from the
    /// snapshot's consistent point, and checks that the slot is still the
    /// one created with the snapshot, unconfirmed since (`slot::start_checked`).
    pub async fn start_streaming(
        &mut self,
        catalog: &tokio_postgres::Client,
        slot: &str,
        publication: &str,
    ) -> Result<(), SourceError> {
        let State::SnapshotRead {
            client,
            consistent_point,
        } = std::mem::replace(&mut self.state, State::Gone)
        else {
            return Err(SourceError::Misuse(
                "start_streaming called before the snapshot was read",
            ));
        };
        let stream = slot::start_checked(
            client,
            catalog,
            slot,
            consistent_point,
            consistent_point,
            publication,
        )
        .await?;
        self.assembler.stream_in_progress(stream.in_progress());
        self.state = State::Streaming(stream);
        Ok(())
    }

    /// The next event. Cancel-safe: a message is either fully applied and
    /// returned, or not read.
    pub async fn next(&mut self) -> Result<SourceEvent, SourceError> {
        let stream = match &mut self.state {
            State::Streaming(stream) => stream,
            State::Snapshot { .. } => return self.next_snapshot_event().await,
            State::SnapshotRead { .. } | State::Gone => {
                return Err(SourceError::Misuse(
                    "the snapshot is read: start streaming before asking for more",
                ));
            }
        };
        loop {
            if let Some(event) = self.incremental.as_mut().and_then(|i| i.held.take()) {
                return Ok(event);
            }
            if let Some(event) = self.assembler.next_replayed()? {
                return self.observe(event);
            }
            // Beside the stream: the chunk task failing (a chunk that
            // cannot be read ends the session; its progress is stored and
            // the next session goes on from there), a read-only chunk's rows
            // arriving, and a waiting chunk's instant, when the server is
            // asked for its position (see `incremental`).
            let event = match self.incremental.as_mut() {
                Some(i) => {
                    let until = i.waiting()?;
                    tokio::select! {
                        woke = i.wake(until) => Err(woke),
                        event = stream.recv() => Ok(event?),
                    }
                }
                None => Ok(stream.recv().await?),
            };
            let event = match event {
                Ok(event) => event,
                Err(incremental::Wake::Failed(e)) => return Err(SourceError::Snapshot(e)),
                Err(incremental::Wake::Again) => continue,
                Err(incremental::Wake::Timer) => {
                    if let Some(i) = self.incremental.as_mut() {
                        i.on_wait();
                    }
                    stream.send_status(stream.last_reported(), true).await?;
                    continue;
                }
            };
            if let Some(event) = self.assembler.on_stream_event(event)? {
                return self.observe(event);
            }
        }
    }

    /// Lets the incremental snapshot see `event` (see
    /// [`incremental`](self::incremental)).
    fn observe(&mut self, event: SourceEvent) -> Result<SourceEvent, SourceError> {
        match self.incremental.as_mut() {
            Some(i) => Ok(i.observe(event)?),
            None => Ok(event),
        }
    }

    /// Starts an incremental snapshot of `plan` beside the stream (or adds
    /// its tables to the one running): chunk by chunk, each yielded as a
    /// [`SourceEvent::SnapshotChunk`] at its high watermark. `connector`
    /// names this connector's watermarks; `params` connect the watermarks'
    /// writer, and the chunk reader unless `reads` names another server (a
    /// standby: its chunks wait for the low watermark's replay).
    /// `read_only`: no watermark is written; each chunk is placed by its own
    /// snapshot (docs/operations.md, "Read-only watermarks").
    pub fn start_incremental(
        &mut self,
        params: &ConnectParams,
        reads: Option<&ConnectParams>,
        publication: &str,
        connector: &str,
        plan: IncrementalPlan,
        read_only: bool,
    ) {
        let from = self.received().max(self.confirmed());
        match &mut self.incremental {
            Some(running) if !running.plan.done() => {
                if running.plan.id != plan.id {
                    tracing::info!(
                        running = %running.plan.id, added = %plan.id,
                        "an incremental snapshot runs; its tables are added to it"
                    );
                }
                running.add(plan.tables);
            }
            _ => {
                self.incremental = Some(incremental::Incremental::start(
                    params,
                    reads,
                    publication,
                    connector,
                    plan,
                    read_only,
                    from,
                ));
            }
        }
    }

    /// The relation the stream last described for `oid`, if any.
    pub fn streamed_relation(&self, oid: u32) -> Option<Arc<Relation>> {
        self.assembler.relations.get(oid).cloned()
    }

    /// The offset store holds every position up to `up_to`: lets the
    /// incremental snapshot go on with its next chunk once that covers the
    /// last one.
    pub fn incremental_stored(&mut self, up_to: Lsn) {
        if let Some(i) = self.incremental.as_mut() {
            i.stored(up_to);
        }
    }

    /// The high watermark of the incremental snapshot chunk published and
    /// not yet stored, if any: the offset store should hold it soon.
    pub fn incremental_publishing(&self) -> Option<Lsn> {
        self.incremental.as_ref().and_then(|i| i.publishing())
    }

    /// Gives up the tables of the running incremental snapshot that
    /// `tables` names (all when empty), saying `why`; returns their names
    /// and the plan as it now stands.
    pub fn cancel_incremental(
        &mut self,
        tables: &[String],
        why: &str,
    ) -> Option<(Vec<String>, IncrementalPlan)> {
        let i = self.incremental.as_mut()?;
        let given_up = i.cancel(tables, why);
        Some((given_up, i.plan.clone()))
    }

    /// The incremental snapshot's progress, while one runs.
    pub fn incremental_plan(&self) -> Option<&IncrementalPlan> {
        self.incremental.as_ref().map(|i| &i.plan)
    }

    /// The next event if it can be had without waiting (already buffered),
    /// while streaming; `Ok(None)` otherwise. Lets the caller handle a burst
    /// without a trip through its event loop per message.
    pub fn try_next(&mut self) -> Result<Option<SourceEvent>, SourceError> {
        let State::Streaming(stream) = &mut self.state else {
            return Ok(None);
        };
        loop {
            if let Some(event) = self.incremental.as_mut().and_then(|i| i.held.take()) {
                return Ok(Some(event));
            }
            if let Some(event) = self.assembler.next_replayed()? {
                return self.observe(event).map(Some);
            }
            let Some(event) = stream.try_recv()? else {
                break;
            };
            if let Some(event) = self.assembler.on_stream_event(event)? {
                return self.observe(event).map(Some);
            }
        }
        Ok(None)
    }

    /// Bytes of transactions streamed while they ran that were moved to
    /// spill files, and such transactions committed, since the last call.
    pub fn take_stream_counts(&mut self) -> (u64, u64) {
        self.assembler.take_stream_counts()
    }

    /// The newest WAL position the server told us about; never 0/0 once
    /// anything arrived.
    pub fn received(&self) -> Lsn {
        self.assembler.received
    }

    /// Reports `flush` (the acknowledged, stored frontier) to PostgreSQL as
    /// the slot's position; `ping` asks the server to answer at once.
    /// Returns the position sent (never lower than one sent before). Before
    /// streaming there is nothing to report: returns what was reported.
    pub async fn confirm(&mut self, flush: Lsn, ping: bool) -> Result<Lsn, WireError> {
        match &mut self.state {
            State::Streaming(stream) => stream.send_status(flush, ping).await,
            _ => Ok(self.confirmed()),
        }
    }

    /// The highest position reported to PostgreSQL so far (0/0 before
    /// streaming).
    pub fn confirmed(&self) -> Lsn {
        match &self.state {
            State::Streaming(stream) => stream.last_reported(),
            _ => Lsn::ZERO,
        }
    }

    /// While stopping: reads the stream without decoding it (nothing after
    /// the stop is published) and returns the next keepalive that asks for
    /// a reply, as its `wal_end`. `Ok(None)` when the stream ended.
    pub async fn next_reply_request(&mut self) -> Result<Option<Lsn>, WireError> {
        let State::Streaming(stream) = &mut self.state else {
            return Ok(None);
        };
        loop {
            match stream.recv().await? {
                StreamEvent::Message(ReplicationMessage::Keepalive {
                    wal_end,
                    reply: true,
                    ..
                }) => {
                    self.assembler.note_received(wal_end);
                    return Ok(Some(wal_end));
                }
                StreamEvent::Message(_) => {}
                StreamEvent::End => return Ok(None),
            }
        }
    }

    /// Ends replication politely with a final status update of `flush`
    /// (before streaming: just closes the connections).
    pub async fn close(self, flush: Lsn) -> Result<Lsn, WireError> {
        match self.state {
            State::Streaming(stream) => stream.shutdown(flush).await,
            _ => Ok(Lsn::ZERO),
        }
    }

    /// The next snapshot event (see [`SourceEvent::SnapshotRow`]).
    async fn next_snapshot_event(&mut self) -> Result<SourceEvent, SourceError> {
        use snapshot::Feed;
        let State::Snapshot {
            consistent_point,
            snapshot,
            batch,
            batch_budget,
            relation,
            next_index,
            chunk,
            next_chunk,
            ..
        } = &mut self.state
        else {
            return Err(SourceError::Misuse("not snapshotting"));
        };
        loop {
            if let Some((table, rel)) = relation.as_ref()
                && let Some(row) = batch.next()
            {
                let pos = Position {
                    commit_lsn: *consistent_point,
                    index: *next_index,
                };
                *next_index = next_index.saturating_add(1);
                return Ok(SourceEvent::SnapshotRow {
                    pos,
                    table: *table,
                    relation: rel.clone(),
                    row,
                    chunk: chunk.clone(),
                });
            }
            // Every row of the batch is out: its read-ahead is free again
            // (before waiting, or a reader waiting for it would wait forever).
            *batch_budget = None;
            match snapshot.feed.recv().await {
                Some(Feed::Rows {
                    table,
                    relation: rel,
                    rows,
                    budget,
                    part,
                    last_key,
                }) => {
                    *chunk = Arc::new(SnapshotChunk {
                        id: *next_chunk,
                        part,
                        last_key,
                    });
                    *next_chunk = next_chunk.wrapping_add(1);
                    if let Some(p) = snapshot.progress.get_mut(table) {
                        p.rows_read += rows.len() as u64;
                    }
                    *batch = rows.into_iter();
                    *batch_budget = Some(budget);
                    *relation = Some((table, rel.clone()));
                    if let Some(announced) = snapshot.announced.get_mut(table)
                        && !*announced
                    {
                        *announced = true;
                        return Ok(SourceEvent::Relation(rel));
                    }
                }
                Some(Feed::TableRead { table }) => {
                    let left = snapshot
                        .readers_left
                        .get_mut(table)
                        .ok_or(SourceError::Misuse(
                            "a snapshot reader reported an unknown table",
                        ))?;
                    *left = left.saturating_sub(1);
                    if *left == 0
                        && let Some(p) = snapshot.progress.get_mut(table)
                    {
                        p.done = true;
                        return Ok(SourceEvent::SnapshotTableDone {
                            table,
                            rows: p.rows_read,
                        });
                    }
                }
                Some(Feed::Failed(e)) => return Err(SourceError::Snapshot(e)),
                None => {
                    if snapshot.progress.iter().any(|p| !p.done) {
                        return Err(SourceError::Misuse(
                            "the snapshot readers stopped before reading every table",
                        ));
                    }
                    let consistent_point = *consistent_point;
                    let State::Snapshot { client, .. } =
                        std::mem::replace(&mut self.state, State::Gone)
                    else {
                        return Err(SourceError::Misuse("not snapshotting"));
                    };
                    self.state = State::SnapshotRead {
                        client,
                        consistent_point,
                    };
                    return Ok(SourceEvent::SnapshotDone { consistent_point });
                }
            }
        }
    }
}
