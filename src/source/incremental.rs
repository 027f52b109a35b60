//! Incremental snapshots: the rows of chosen tables read in chunks *while
//! streaming continues*, reconciled with the stream by watermarks (the
//! DBLog method), resumable chunk by chunk.
//!
//! For each chunk a task of its own, on an ordinary connection:
//! 1. writes a **low watermark** (`pg_logical_emit_message`, prefix
//!    [`WATERMARK_PREFIX`], flushed) naming this run and chunk;
//! 2. reads the chunk — at most `chunk_rows` rows after the last key, in key
//!    order — in a repeatable-read transaction of its own, and notes which
//!    transactions were running (invisible) when its snapshot was taken;
//! 3. hands the rows over, then writes the **high watermark**.
//!
//! Capturing from a hot standby, the watermarks are written on the primary
//! (the only server that can write; they reach the standby's slot through
//! the WAL like any change) and the chunk is read on the standby, but only
//! once the standby has replayed the low watermark's commit: its snapshot
//! then sees every transaction that commits before the low watermark in
//! the stream, as a snapshot on the primary would. (Step 2's note of the
//! running transactions serves the same on either server.)
//!
//! The source meanwhile watches the stream for changes of the chunk's table.
//! When the high watermark arrives, the chunk's rows are yielded as one
//! [`crate::source::SourceEvent::SnapshotChunk`] at the watermark's position,
//! without the rows the stream has carried a newer version of.
//!
//! **Read-only watermarks** (`[snapshot] watermarks = "read_only"`, or
//! `"auto"` for a role that may not call `pg_logical_emit_message`) write
//! nothing. The chunk's own snapshot places it in the stream instead:
//! 1. the task reads the chunk and, in its transaction, notes the snapshot
//!    (`xip`, `xmax`) and a WAL position read after it, the **horizon**: a
//!    transaction the snapshot sees wrote its commit record below it
//!    (`pg_current_wal_insert_lsn()`; on a standby, whose snapshots follow
//!    replay, `pg_last_wal_replay_lsn()`);
//! 2. the source notes each change of the table from the request on, with
//!    its transaction;
//! 3. the chunk is yielded between transactions, in front of the first
//!    Begin, keepalive or message at a position at or past the horizon (and
//!    past every position yielded before, so that nothing confirmed or
//!    stored is at the chunk's own position), without the rows a
//!    transaction the snapshot did not see changed.
//!
//!    Everything the snapshot saw is then in the stream before the chunk,
//!    and whatever follows it the snapshot did not see. On a server with no
//!    other writes, the stream would not move past the horizon: 100 ms
//!    after the rows arrived the task commits one empty transaction
//!    (`pg_current_xact_id()`, on the primary; a commit record, no row, no
//!    privilege), and the source asks the server for its position (then
//!    every second while the chunk waits).
//!
//! Invariants:
//! - **Never stale.** A chunk row is dropped when the stream carries a change
//!   of its key (1) between the watermarks, or (2) after the chunk was asked
//!   for and before the low watermark, by a transaction the chunk's
//!   snapshot did not see. Every change the chunk's snapshot did not see has
//!   its commit after the request (then (1) or (2) drops the row) or after
//!   the high watermark (then it follows the chunk's row, as a newer event
//!   should). For a table whose rows never change (an outbox), only inserts
//!   count: its rows are events, and a delete (the outbox cleanup) does not
//!   make the event untrue.
//! - **Never stale, read-only.** A chunk row is dropped when a transaction
//!   its snapshot did not see (running, or from `xmax` on) changed its key
//!   anywhere between the request and the chunk; a truncate by one drops
//!   the chunk. Every such transaction that commits before the chunk is
//!   yielded is seen there; every one after it follows the chunk's row.
//! - **Ours only.** A watermark counts only if it names this connector, this
//!   run (a random number per source) and the chunk awaited; watermarks of
//!   an earlier run, replayed from WAL after a restart, are ignored.
//! - **Resumable, one chunk at a time.** Each chunk event carries the plan
//!   with the key of its last row; the next chunk is asked for only once
//!   the caller says the offset store holds the last one
//!   ([`Incremental::stored`]), so a crash re-sends at most the chunk in
//!   flight.
//! - **Bounded memory.** One chunk at a time: `chunk_rows` rows, plus the
//!   keys the stream changed while it was in flight.
//! - Knows nothing of Kafka, the router or the offset store.

mod read_only;
mod task;

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::{Op, SourceEvent};
use crate::Lsn;
use crate::pg::snapshot::{Chunk, SnapshotError};
use crate::pg::wire::ConnectParams;
use crate::pgoutput::{Cell, Relation, TupleData};
use read_only::Arrived;
#[cfg(test)]
use read_only::Waiting;
pub(super) use read_only::Wake;
use task::{ChunkRead, Request, chunk_task, parse_watermark, rand_u64};
#[cfg(test)]
use {read_only::horizon, read_only::unseen, task::watermark};

/// The prefix of the watermark messages.
pub const WATERMARK_PREFIX: &str = "walrelay.watermark";

/// One table of an incremental snapshot and how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkTable {
    pub schema: String,
    pub name: String,
    /// Unique, non-NULL key columns the chunks follow (a primary key).
    pub key: Vec<String>,
    /// Only rows satisfying this SQL condition (`walrelay snapshot --where`).
    pub filter: Option<String>,
    /// The table's rows never change (an outbox): only inserts reconcile.
    pub inserts_only: bool,
    /// The key of the last row done; `None`: from the first row.
    pub after: Option<Vec<Option<String>>>,
    pub done: bool,
    /// Why the table was given up (done without all of its rows): it can
    /// no longer be read as planned, or the snapshot was cancelled.
    pub abandoned: Option<String>,
}

impl ChunkTable {
    /// `schema.name`.
    pub fn display(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

/// An incremental snapshot: its id and tables, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalPlan {
    pub id: String,
    pub tables: Vec<ChunkTable>,
    /// Rows per chunk.
    pub chunk_rows: usize,
}

impl IncrementalPlan {
    /// Whether every table is done.
    pub fn done(&self) -> bool {
        self.tables.iter().all(|t| t.done)
    }

    fn current(&self) -> Option<usize> {
        self.tables.iter().position(|t| !t.done)
    }

    /// Gives up the tables not done that `tables` names (all when empty),
    /// saying `why`; returns their names.
    pub fn abandon(&mut self, tables: &[String], why: &str) -> Vec<String> {
        let mut given_up = Vec::new();
        for t in &mut self.tables {
            if !t.done && (tables.is_empty() || tables.contains(&t.display())) {
                t.done = true;
                t.abandoned = Some(why.to_owned());
                given_up.push(t.display());
            }
        }
        given_up
    }
}

/// Changes of the chunk's table kept from before its low watermark: a
/// transaction the chunk's snapshot did not see commits at most
/// milliseconds before the watermark (between its commit record and its
/// becoming visible), so only the newest changes can be its.
const BEFORE_KEPT: usize = 100_000;

/// A key's values as text (NULL: `None`).
type Key = Vec<Option<Bytes>>;

#[derive(Debug)]
enum Phase {
    /// Nothing asked (the plan is done).
    Idle,
    /// The last chunk (high watermark at this position) is published; the
    /// next is asked for once the offset store holds it, so that a crash
    /// re-sends at most the chunk in flight.
    Publishing { lsn: Lsn },
    /// Chunk asked for (of the plan's table `table`); its low watermark
    /// not seen yet. Changes of the table seen meanwhile, with their
    /// transaction.
    Requested {
        chunk: u64,
        table: usize,
        before: Vec<(u32, Key)>,
    },
    /// Read-only watermarks: chunk asked for. Changes of the table since
    /// the request, with their transaction, and the transactions that
    /// truncated it, until the rows arrive; then the rows, with those
    /// filtered by the rows' snapshot ([`Arrived`]).
    Reading {
        chunk: u64,
        table: usize,
        seen: Vec<(u32, Key)>,
        truncates: Vec<u32>,
        read: Option<Box<Arrived>>,
    },
    /// Between the watermarks.
    Window {
        chunk: u64,
        table: usize,
        before: Vec<(u32, Key)>,
        touched: HashSet<Key>,
        truncated: bool,
    },
}

/// The running incremental snapshot of a source (see the module doc).
#[derive(Debug)]
pub(super) struct Incremental {
    pub(super) plan: IncrementalPlan,
    connector: String,
    run: u64,
    next_chunk: u64,
    phase: Phase,
    /// The transaction being assembled.
    xid: Option<u32>,
    /// The table of the chunk in flight was asked for again (and set back
    /// to its first row) meanwhile: that chunk's rows are published, but it
    /// does not move the table's position.
    restarted: bool,
    /// Read-only watermarks (module doc).
    read_only: bool,
    /// The newest position yielded where the caller may confirm or store
    /// (a commit's end, a keepalive, a message): a read-only chunk goes
    /// past it.
    yielded: Lsn,
    /// The event a read-only chunk was yielded in front of, to yield next.
    pub(super) held: Option<SourceEvent>,
    requests: mpsc::Sender<Request>,
    chunks: mpsc::Receiver<ChunkRead>,
    pub(super) failed: Option<oneshot::Receiver<SnapshotError>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Incremental {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The values of `key` in `row` of `relation`; `None` when the relation
/// lacks a key column or the row does not carry it.
fn key_of(relation: &Relation, row: &TupleData, key: &[String]) -> Option<Key> {
    key.iter()
        .map(|column| {
            let index = relation.column_index(column)?;
            match row.get(index)? {
                Cell::Null => Some(None),
                Cell::Text(b) | Cell::Binary(b) => Some(Some(b.clone())),
                Cell::UnchangedToast => None,
            }
        })
        .collect()
}

impl Incremental {
    /// Starts the chunk task for `plan` and asks for its first chunk.
    /// `from`: the newest position the caller knows of (read-only chunks go
    /// past it).
    pub(super) fn start(
        params: &ConnectParams,
        reads: Option<&ConnectParams>,
        publication: &str,
        connector: &str,
        plan: IncrementalPlan,
        read_only: bool,
        from: Lsn,
    ) -> Incremental {
        let (requests, request_rx) = mpsc::channel(1);
        let (chunk_tx, chunks) = mpsc::channel(1);
        let (fail_tx, failed) = oneshot::channel();
        let run = rand_u64();
        let task = tokio::spawn(chunk_task(
            params.clone(),
            reads.cloned(),
            publication.to_owned(),
            connector.to_owned(),
            run,
            read_only,
            request_rx,
            chunk_tx,
            fail_tx,
        ));
        let mut incremental = Incremental {
            plan,
            connector: connector.to_owned(),
            run,
            next_chunk: 0,
            phase: Phase::Idle,
            xid: None,
            restarted: false,
            read_only,
            yielded: from,
            held: None,
            requests,
            chunks,
            failed: Some(failed),
            task,
        };
        incremental.request_next();
        incremental
    }

    /// Adds tables to the plan (a signal while one runs). A table already
    /// in it and not done is not added twice: it is read again from its
    /// first row (with the new request's condition), so that every row
    /// existing at the new request is read too — the rows before its
    /// position may have been inserted since the first request.
    pub(super) fn add(&mut self, tables: Vec<ChunkTable>) {
        let in_flight = self.in_flight();
        for t in tables {
            match self
                .plan
                .tables
                .iter_mut()
                .enumerate()
                .find(|(_, p)| !p.done && p.schema == t.schema && p.name == t.name)
            {
                Some((index, running)) => {
                    self.restarted |= in_flight == Some(index);
                    if running.after.is_some() {
                        tracing::info!(
                            table = %running.display(),
                            "incremental snapshot of {} asked for again: read again from its \
                             first row",
                            running.display()
                        );
                    }
                    running.after = None;
                    running.filter = t.filter;
                }
                None => self.plan.tables.push(t),
            }
        }
        if matches!(self.phase, Phase::Idle) {
            self.request_next();
        }
        // Publishing: the next chunk (of the first table not done) is asked
        // for once the last one is stored.
    }

    fn request_next(&mut self) {
        let Some(current) = self.plan.current() else {
            self.phase = Phase::Idle;
            return;
        };
        let chunk = self.next_chunk;
        self.next_chunk += 1;
        let request = Request::Chunk {
            chunk,
            table: self.plan.tables[current].clone(),
            limit: self.plan.chunk_rows,
        };
        // The task takes one request at a time and only ever gets one
        // outstanding: the channel has room.
        if self.requests.try_send(request).is_err() {
            tracing::debug!("the incremental snapshot's chunk task is gone");
        }
        self.phase = if self.read_only {
            Phase::Reading {
                chunk,
                table: current,
                seen: Vec::new(),
                truncates: Vec::new(),
                read: None,
            }
        } else {
            Phase::Requested {
                chunk,
                table: current,
                before: Vec::new(),
            }
        };
    }

    /// Sees one event of the stream; returns the event to yield instead (a
    /// chunk in place of its high watermark), or the event itself.
    pub(super) fn observe(&mut self, event: SourceEvent) -> Result<SourceEvent, SnapshotError> {
        if self.read_only {
            self.take_rows()?;
            if let Some(lsn) = self.place(&event) {
                // The chunk goes in front of `event`, which is yielded next.
                let chunk = self.yield_read_only(lsn);
                let event = self.see(event)?;
                self.held = Some(event);
                return Ok(chunk);
            }
        }
        self.see(event)
    }

    /// [`Incremental::observe`] without placing a read-only chunk.
    fn see(&mut self, event: SourceEvent) -> Result<SourceEvent, SnapshotError> {
        match &event {
            SourceEvent::Begin { xid, .. } => self.xid = Some(*xid),
            SourceEvent::Commit { end_lsn, .. } => {
                self.xid = None;
                self.yielded = self.yielded.max(*end_lsn);
            }
            SourceEvent::Idle { wal_end, .. } => self.yielded = self.yielded.max(*wal_end),
            SourceEvent::Change(change) => self.on_change(change),
            SourceEvent::Truncate { relations, .. } => {
                if let Some(t) = self.in_flight().map(|i| &self.plan.tables[i]) {
                    let hit = relations
                        .iter()
                        .any(|r| r.namespace == t.schema && r.name == t.name);
                    if hit && !t.inserts_only {
                        let xid = self.xid.unwrap_or(0);
                        match &mut self.phase {
                            Phase::Window { truncated, .. } => *truncated = true,
                            Phase::Reading {
                                truncates,
                                read: None,
                                ..
                            } => truncates.push(xid),
                            Phase::Reading {
                                read: Some(rows), ..
                            } => rows.truncated |= rows.unseen(xid),
                            _ => {}
                        }
                    }
                }
            }
            SourceEvent::Message { lsn, .. } => {
                self.yielded = self.yielded.max(*lsn);
                if let SourceEvent::Message {
                    lsn,
                    prefix,
                    content,
                } = &event
                    && prefix == WATERMARK_PREFIX
                    && let Some((chunk, high)) = parse_watermark(content, &self.connector, self.run)
                {
                    return self
                        .on_watermark(chunk, high, *lsn)
                        .map(|e| e.unwrap_or(event));
                }
            }
            _ => {}
        }
        Ok(event)
    }

    /// The plan's index of the table whose chunk is in flight.
    fn in_flight(&self) -> Option<usize> {
        match self.phase {
            Phase::Requested { table, .. }
            | Phase::Window { table, .. }
            | Phase::Reading { table, .. } => Some(table),
            Phase::Idle | Phase::Publishing { .. } => None,
        }
    }

    fn on_change(&mut self, change: &super::Change) {
        let Some(current) = self.in_flight() else {
            return;
        };
        let t = &self.plan.tables[current];
        let relation = &change.relation;
        if relation.namespace != t.schema || relation.name != t.name {
            return;
        }
        let mut keys = Vec::with_capacity(2);
        if t.inserts_only {
            if change.op == Op::Insert
                && let Some(k) = change
                    .new
                    .as_ref()
                    .and_then(|r| key_of(relation, r, &t.key))
            {
                keys.push(k);
            }
        } else {
            for row in [&change.old, &change.new].into_iter().flatten() {
                if let Some(k) = key_of(relation, row, &t.key) {
                    keys.push(k);
                }
            }
        }
        let xid = self.xid.unwrap_or(0);
        match &mut self.phase {
            Phase::Requested { before, .. } => {
                before.extend(keys.into_iter().map(|k| (xid, k)));
                // Only transactions that committed just before the low
                // watermark can be invisible to the chunk (see the module
                // doc): the oldest entries of a long catch-up never matter.
                if before.len() > BEFORE_KEPT {
                    before.drain(..before.len() - BEFORE_KEPT);
                }
            }
            Phase::Window { touched, .. } => touched.extend(keys),
            Phase::Reading {
                seen, read: None, ..
            } => seen.extend(keys.into_iter().map(|k| (xid, k))),
            Phase::Reading {
                read: Some(rows), ..
            } => {
                if rows.unseen(xid) {
                    rows.stale.extend(keys);
                }
            }
            Phase::Idle | Phase::Publishing { .. } => {}
        }
    }

    fn on_watermark(
        &mut self,
        chunk: u64,
        high: bool,
        lsn: Lsn,
    ) -> Result<Option<SourceEvent>, SnapshotError> {
        match (&mut self.phase, high) {
            (
                Phase::Requested {
                    chunk: c,
                    table,
                    before,
                },
                false,
            ) if *c == chunk => {
                let (table, before) = (*table, std::mem::take(before));
                self.phase = Phase::Window {
                    chunk,
                    table,
                    before,
                    touched: HashSet::new(),
                    truncated: false,
                };
                Ok(None)
            }
            (Phase::Window { chunk: c, .. }, true) if *c == chunk => {
                let Phase::Window {
                    table,
                    before,
                    touched,
                    truncated,
                    ..
                } = std::mem::replace(&mut self.phase, Phase::Idle)
                else {
                    return Ok(None);
                };
                let read = self
                    .chunks
                    .try_recv()
                    .map_err(|_| SnapshotError::Malformed {
                        table: String::from("(incremental snapshot)"),
                        row: 0,
                        reason: format!("the high watermark of chunk {chunk} came before its rows"),
                    })?;
                if read.chunk != chunk {
                    return Err(SnapshotError::Malformed {
                        table: String::from("(incremental snapshot)"),
                        row: 0,
                        reason: format!("chunk {} arrived for watermark {chunk}", read.chunk),
                    });
                }
                Ok(Some(match read.outcome {
                    Ok(chunk) => self.finish_chunk(table, chunk, before, touched, truncated, lsn),
                    Err(why) => self.give_up(table, &why, lsn),
                }))
            }
            // Another run's, an old chunk's, or out of order: not ours.
            _ => Ok(None),
        }
    }

    /// The chunk's event: its rows minus the stale ones; advances the plan
    /// and asks for the next chunk. A table given up (cancelled) while the
    /// chunk was in flight publishes none of it.
    fn finish_chunk(
        &mut self,
        index: usize,
        chunk: Chunk,
        before: Vec<(u32, Key)>,
        touched: HashSet<Key>,
        truncated: bool,
        lsn: Lsn,
    ) -> SourceEvent {
        let limit = self.plan.chunk_rows;
        let restarted = std::mem::take(&mut self.restarted);
        let Some(table) = self.plan.tables.get_mut(index) else {
            return self.next_after(index, None, Vec::new(), 0, lsn);
        };
        if table.done {
            return self.next_after(index, Some(chunk.relation), Vec::new(), 0, lsn);
        }
        if chunk.key != table.key {
            // Read by another key than the plan's: the stored position is
            // in the old key, and the changes seen while the chunk was in
            // flight were keyed by it, so this chunk's rows cannot be told
            // fresh from stale. Publish none; the table starts over by the
            // key the reader chose.
            tracing::warn!(
                table = %table.display(),
                "incremental snapshot of {}: {} — read from its first row",
                table.display(),
                chunk.key_note.as_deref().unwrap_or("the chunk key changed")
            );
            table.key = chunk.key;
            table.after = None;
            return self.next_after(index, Some(chunk.relation), Vec::new(), 0, lsn);
        }
        let invisible: HashSet<u32> = chunk.invisible.iter().copied().collect();
        let newer: HashSet<&Key> = touched
            .iter()
            .chain(
                before
                    .iter()
                    .filter(|(xid, _)| invisible.contains(xid))
                    .map(|(_, k)| k),
            )
            .collect();
        let read = chunk.rows.len();
        let last = chunk
            .rows
            .last()
            .and_then(|row| key_of(&chunk.relation, row, &table.key));
        let rows: Vec<TupleData> = if truncated {
            Vec::new()
        } else {
            chunk
                .rows
                .into_iter()
                .filter(|row| {
                    key_of(&chunk.relation, row, &table.key).is_none_or(|k| !newer.contains(&k))
                })
                .collect()
        };
        if restarted {
            // Asked for again while this chunk was read: the table starts
            // over from its first row; these rows are fresh all the same.
        } else {
            if let Some(last) = last {
                table.after = Some(
                    last.iter()
                        .map(|v| v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()))
                        .collect(),
                );
            }
            if read < limit {
                table.done = true;
            }
        }
        self.next_after(index, Some(chunk.relation), rows, read, lsn)
    }

    /// Gives table `index` up because it cannot be read as planned (`why`).
    fn give_up(&mut self, index: usize, why: &str, lsn: Lsn) -> SourceEvent {
        if let Some(table) = self.plan.tables.get_mut(index)
            && !table.done
        {
            tracing::warn!(
                table = %table.display(), id = %self.plan.id,
                "incremental snapshot of {} given up, its remaining rows are not read: {why}; \
                 once fixed, ask again with `walrelay snapshot --table {}`",
                table.display(),
                table.display()
            );
            table.done = true;
            table.abandoned = Some(why.to_owned());
        }
        self.next_after(index, None, Vec::new(), 0, lsn)
    }

    /// The event of a chunk of table `index` at `lsn`; the plan waits for
    /// the offset store to hold it before the next chunk.
    fn next_after(
        &mut self,
        index: usize,
        relation: Option<Relation>,
        rows: Vec<TupleData>,
        read: usize,
        lsn: Lsn,
    ) -> SourceEvent {
        self.phase = if self.plan.done() {
            Phase::Idle
        } else {
            Phase::Publishing { lsn }
        };
        SourceEvent::SnapshotChunk {
            lsn,
            table: index,
            relation: relation.map(Arc::new),
            rows,
            read,
            plan: self.plan.clone(),
        }
    }

    /// The offset store holds everything up to `up_to`: once that covers
    /// the last chunk, the next one is asked for.
    pub(super) fn stored(&mut self, up_to: Lsn) {
        if let Phase::Publishing { lsn } = self.phase
            && lsn <= up_to
        {
            self.request_next();
        }
    }

    /// Gives up the tables of the plan that `tables` names (all when
    /// empty), saying `why` (a cancel); returns their names. A chunk in
    /// flight of one of them publishes nothing.
    pub(super) fn cancel(&mut self, tables: &[String], why: &str) -> Vec<String> {
        self.plan.abandon(tables, why)
    }

    /// The high watermark of the chunk published and not yet stored.
    pub(super) fn publishing(&self) -> Option<Lsn> {
        match self.phase {
            Phase::Publishing { lsn } => Some(lsn),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
