//! Transaction assembly: pgoutput messages in, [`SourceEvent`]s out, with
//! the relation cache, and without I/O. The invariants are the source's
//! (see [`super`]): every change inside `Begin … Commit` with its commit
//! LSN and index, every row of a known relation of the right width,
//! positions that never go back. A transaction PostgreSQL streamed while
//! it ran is held by [`Streamed`] and, at its commit, replayed here as a
//! transaction sent whole: a synthesized `Begin` naming its commit LSN,
//! its messages in order, a synthesized `Commit`.
//!
//! The synthesized `Begin` is where PostgreSQL 15+ sends a whole
//! transaction's: at its first *published* change that survived (pgoutput
//! sends `Begin` lazily, in the callback of the first row change,
//! truncate or transactional message it publishes, with that change's
//! LSN), so transaction metadata names the same `<xid>:<lsn>` either way.
//! PostgreSQL 14 sends it at the transaction's first WAL record, which
//! protocol 2 does not carry: there a connector that names it takes
//! transactions whole ([`super::streamed::taken_whole`]). Before the
//! `Begin` can be sent, the replay reads ahead to that change; what it
//! passes (relations and types only) waits in `ahead`.

use std::collections::VecDeque;

use bytes::Bytes;

use super::streamed::{Replay, Streamed, StreamedError};
use super::{Change, Op, Position, SourceError, SourceEvent, Txn};
use crate::Lsn;
use crate::pg::replication::{InProgress, ReplicationMessage, StreamEvent};
use crate::pgoutput::stream::{self, StreamCommit, StreamControl};
use crate::pgoutput::{self, Begin, Commit, LogicalMessage, RelationCache, TupleData};

/// The transaction being assembled.
#[derive(Debug, Clone, Copy)]
struct Open {
    commit_lsn: Lsn,
    txn: Txn,
    next_index: u64,
}

/// Turns decoded messages into events: the relation cache and transaction
/// assembly, without I/O.
#[derive(Debug)]
pub(super) struct Assembler {
    pub(super) relations: RelationCache,
    open: Option<Open>,
    pub(super) received: Lsn,
    /// Transactions streamed while they run; `None` under protocol 1.
    streamed: Option<Streamed>,
    /// A committed streamed transaction being replayed.
    replaying: Option<Replaying>,
}

/// A streamed transaction's replay, and the commit that ends it.
#[derive(Debug)]
struct Replaying {
    replay: Replay,
    /// The synthesized `Begin`, until it is sent.
    begin: Option<Begin>,
    /// Messages read ahead of the `Begin`, in order.
    ahead: VecDeque<(LogicalMessage, Lsn)>,
    commit: StreamCommit,
    /// Where the commit arrived, and when the server sent it.
    at: Lsn,
    sent_time: i64,
}

impl Assembler {
    pub(super) fn new(start: Lsn, in_progress: Option<&InProgress>) -> Assembler {
        Assembler {
            relations: RelationCache::new(),
            open: None,
            received: start,
            streamed: in_progress.map(|p| Streamed::new(p.memory_limit, p.spill_dir.clone())),
            replaying: None,
        }
    }

    /// Holds transactions streamed while they run as `in_progress` says
    /// (from START_REPLICATION on; `None`: protocol 1).
    pub(super) fn stream_in_progress(&mut self, in_progress: Option<&InProgress>) {
        self.streamed = in_progress.map(|p| Streamed::new(p.memory_limit, p.spill_dir.clone()));
    }

    /// Bytes of streamed transactions moved to spill files, and streamed
    /// transactions committed, since the last call.
    pub(super) fn take_stream_counts(&mut self) -> (u64, u64) {
        self.streamed.as_mut().map_or((0, 0), Streamed::take_counts)
    }

    /// The next event of a committed streamed transaction being replayed;
    /// `None` when none is. Call before reading the stream: nothing else
    /// may come between a transaction's `Begin` and `Commit`.
    pub(super) fn next_replayed(&mut self) -> Result<Option<SourceEvent>, SourceError> {
        loop {
            let Some(r) = self.replaying.as_mut() else {
                return Ok(None);
            };
            let sent_time = r.sent_time;
            if let Some(begin) = r.begin.take() {
                let at = r.read_ahead()?;
                return self.on_message(LogicalMessage::Begin(begin), at, sent_time);
            }
            let next = match r.ahead.pop_front() {
                Some(read) => Some(read),
                None => r.read()?,
            };
            match next {
                Some((msg, at)) => {
                    if let Some(event) = self.on_message(msg, at, sent_time)? {
                        return Ok(Some(event));
                    }
                }
                None => {
                    let Some(Replaying { commit: c, at, .. }) = self.replaying.take() else {
                        return Ok(None);
                    };
                    let commit = LogicalMessage::Commit(Commit {
                        flags: c.flags,
                        commit_lsn: c.commit_lsn,
                        end_lsn: c.end_lsn,
                        commit_time: c.commit_time,
                    });
                    return self.on_message(commit, at, sent_time);
                }
            }
        }
    }

    /// A message of protocol 2's frame, or one inside a block: held, or
    /// (at a commit) the start of the transaction's replay. `Err(data)`
    /// hands back a message that is neither.
    fn on_streamed(
        &mut self,
        at: Lsn,
        send_time: i64,
        data: Bytes,
    ) -> Result<Result<Option<SourceEvent>, Bytes>, SourceError> {
        let Some(streamed) = self.streamed.as_mut() else {
            return Ok(Err(data));
        };
        let frame = |e| spill_error(e, at);
        if streamed.in_block() {
            if data.first() == Some(&b'E') {
                streamed.stop().map_err(frame)?;
            } else {
                let subxid = stream::streamed_xid(&data)
                    .map_err(|source| SourceError::Decode { lsn: at, source })?;
                // A copy: a slice would keep the whole receive buffer alive
                // while the memory bound counts only the slice.
                streamed
                    .hold(subxid, at, Bytes::copy_from_slice(&data))
                    .map_err(frame)?;
            }
            return Ok(Ok(None));
        }
        let control = stream::decode_stream_control(&data)
            .map_err(|source| SourceError::Decode { lsn: at, source })?;
        match control {
            None => Ok(Err(data)),
            Some(StreamControl::Start { xid, first_segment }) => {
                streamed.start(xid, first_segment, at).map_err(frame)?;
                Ok(Ok(None))
            }
            Some(StreamControl::Stop) => Err(frame(StreamedError::OutOfOrder(
                "Stream Stop outside a block".into(),
            ))),
            Some(StreamControl::Abort { xid, subxid }) => {
                streamed.abort(xid, subxid).map_err(frame)?;
                Ok(Ok(None))
            }
            Some(StreamControl::Commit(commit)) => {
                let replay = streamed.commit(commit.xid).map_err(frame)?;
                self.replaying = Some(Replaying {
                    replay,
                    begin: Some(Begin {
                        final_lsn: commit.commit_lsn,
                        commit_time: commit.commit_time,
                        xid: commit.xid,
                    }),
                    ahead: VecDeque::new(),
                    commit,
                    at,
                    sent_time: send_time,
                });
                // The Begin comes out of `next_replayed`, once its
                // position is read.
                Ok(Ok(None))
            }
        }
    }

    /// One message of the replication stream: a keepalive is an
    /// [`SourceEvent::Idle`], WAL data goes through [`Self::on_xlogdata`]
    /// (`None` while a transaction is still being assembled).
    pub(super) fn on_stream_event(
        &mut self,
        event: StreamEvent,
    ) -> Result<Option<SourceEvent>, SourceError> {
        match event {
            StreamEvent::End => Err(SourceError::Ended),
            StreamEvent::Message(ReplicationMessage::Keepalive { wal_end, reply, .. }) => {
                self.note_received(wal_end);
                Ok(Some(SourceEvent::Idle { wal_end, reply }))
            }
            StreamEvent::Message(ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                send_time,
                data,
            }) => self.on_xlogdata(wal_start, wal_end, send_time, data),
        }
    }

    fn on_xlogdata(
        &mut self,
        wal_start: Lsn,
        wal_end: Lsn,
        send_time: i64,
        data: Bytes,
    ) -> Result<Option<SourceEvent>, SourceError> {
        // PostgreSQL sends 0/0 as wal_start and wal_end for every message but
        // the last of a write (Relation, Type, …): name the newest position
        // we know instead, and never let the received position drop to 0.
        let at = if wal_start == Lsn::ZERO {
            self.received
        } else {
            wal_start
        };
        self.note_received(wal_end);
        let data = match self.on_streamed(at, send_time, data)? {
            Ok(event) => return Ok(event),
            Err(data) => data,
        };
        let msg =
            pgoutput::decode(data).map_err(|source| SourceError::Decode { lsn: at, source })?;
        self.on_message(msg, at, send_time)
    }

    fn on_message(
        &mut self,
        msg: LogicalMessage,
        at: Lsn,
        sent_time: i64,
    ) -> Result<Option<SourceEvent>, SourceError> {
        let out_of_order = |what: &str| SourceError::Stream {
            lsn: at,
            what: what.into(),
        };
        Ok(Some(match msg {
            LogicalMessage::Begin(b) => {
                if self.open.is_some() {
                    return Err(out_of_order("Begin inside a transaction"));
                }
                self.open = Some(Open {
                    commit_lsn: b.final_lsn,
                    txn: Txn {
                        xid: b.xid,
                        commit_time: b.commit_time,
                    },
                    next_index: 0,
                });
                SourceEvent::Begin {
                    commit_lsn: b.final_lsn,
                    xid: b.xid,
                    commit_time: b.commit_time,
                    lsn: at,
                    sent_time,
                }
            }
            LogicalMessage::Commit(c) => {
                let open = self
                    .open
                    .take()
                    .ok_or_else(|| out_of_order("Commit without Begin"))?;
                SourceEvent::Commit {
                    commit_lsn: open.commit_lsn,
                    end_lsn: c.end_lsn,
                    commit_time: open.txn.commit_time,
                }
            }
            LogicalMessage::Relation(r) => SourceEvent::Relation(self.relations.insert(r)),
            LogicalMessage::Insert(i) => {
                self.change(Op::Insert, i.relation, None, Some(i.new), at)?
            }
            LogicalMessage::Update(u) => self.change(
                Op::Update,
                u.relation,
                u.old.map(|o| match o {
                    pgoutput::OldTuple::Key(t) | pgoutput::OldTuple::Old(t) => t,
                }),
                Some(u.new),
                at,
            )?,
            LogicalMessage::Delete(d) => {
                let old = match d.old {
                    pgoutput::OldTuple::Key(t) | pgoutput::OldTuple::Old(t) => t,
                };
                self.change(Op::Delete, d.relation, Some(old), None, at)?
            }
            LogicalMessage::Message(m) if !m.transactional => {
                if self.open.is_some() {
                    // pgoutput v1 never interleaves: the reorder buffer
                    // replays a transaction whole at its commit.
                    return Err(out_of_order(
                        "non-transactional Message inside a transaction",
                    ));
                }
                SourceEvent::Message {
                    lsn: m.lsn,
                    prefix: m.prefix,
                    content: m.content,
                }
            }
            LogicalMessage::Message(m) => {
                let open = self
                    .open
                    .as_mut()
                    .ok_or_else(|| out_of_order("transactional Message outside Begin..Commit"))?;
                let pos = Position {
                    commit_lsn: open.commit_lsn,
                    index: open.next_index,
                };
                open.next_index = open.next_index.saturating_add(1);
                SourceEvent::TxnMessage {
                    pos,
                    txn: open.txn,
                    lsn: m.lsn,
                    prefix: m.prefix,
                    content: m.content,
                }
            }
            LogicalMessage::Truncate(t) => {
                let open = self
                    .open
                    .as_mut()
                    .ok_or_else(|| out_of_order("Truncate outside Begin..Commit"))?;
                let mut relations = Vec::with_capacity(t.relations.len());
                for oid in t.relations {
                    let rel = self
                        .relations
                        .require(oid)
                        .map_err(|e| SourceError::Stream {
                            lsn: at,
                            what: e.to_string(),
                        })?;
                    relations.push(rel.clone());
                }
                let pos = Position {
                    commit_lsn: open.commit_lsn,
                    index: open.next_index,
                };
                let count = relations.len() as u64;
                open.next_index = open.next_index.saturating_add(count);
                SourceEvent::Truncate {
                    pos,
                    txn: open.txn,
                    lsn: at,
                    relations,
                }
            }
            // Origins and types carry no change.
            LogicalMessage::Origin(_) | LogicalMessage::Type(_) => {
                return Ok(None);
            }
        }))
    }

    fn change(
        &mut self,
        op: Op,
        oid: pgoutput::Oid,
        old: Option<TupleData>,
        new: Option<TupleData>,
        at: Lsn,
    ) -> Result<SourceEvent, SourceError> {
        let open = self.open.as_mut().ok_or_else(|| SourceError::Stream {
            lsn: at,
            what: "row change outside Begin..Commit".into(),
        })?;
        let relation = {
            let check = |t: &TupleData, what| self.relations.require_for_tuple(oid, t, what);
            let rel = match (&new, &old) {
                (Some(t), _) => check(t, "new tuple"),
                (None, Some(t)) => check(t, "old tuple"),
                (None, None) => self.relations.require(oid),
            };
            rel.map_err(|e| SourceError::Stream {
                lsn: at,
                what: e.to_string(),
            })?
            .clone()
        };
        let pos = Position {
            commit_lsn: open.commit_lsn,
            index: open.next_index,
        };
        open.next_index = open.next_index.saturating_add(1);
        Ok(SourceEvent::Change(Change {
            pos,
            txn: open.txn,
            lsn: at,
            op,
            relation,
            old,
            new,
        }))
    }

    pub(super) fn note_received(&mut self, lsn: Lsn) {
        self.received = self.received.max(lsn);
    }
}

impl Replaying {
    /// The replay's next message, decoded, and where it arrived.
    fn read(&mut self) -> Result<Option<(LogicalMessage, Lsn)>, SourceError> {
        let Some((at, data)) = self.replay.next().map_err(|e| spill_error(e, self.at))? else {
            return Ok(None);
        };
        let msg = stream::decode_streamed(data)
            .map_err(|source| SourceError::Decode { lsn: at, source })?;
        Ok(Some((msg, at)))
    }

    /// Reads ahead to the first published change and returns where the
    /// `Begin` goes: that change's position (see the module doc); the
    /// first block's when the transaction published none.
    fn read_ahead(&mut self) -> Result<Lsn, SourceError> {
        while let Some((msg, at)) = self.read()? {
            let change = match &msg {
                LogicalMessage::Insert(_)
                | LogicalMessage::Update(_)
                | LogicalMessage::Delete(_)
                | LogicalMessage::Truncate(_) => true,
                LogicalMessage::Message(m) => m.transactional,
                _ => false,
            };
            self.ahead.push_back((msg, at));
            if change {
                return Ok(at);
            }
        }
        Ok(self.replay.first_at)
    }
}

/// A streamed transaction that cannot be held or replayed, at `at`.
fn spill_error(e: StreamedError, at: Lsn) -> SourceError {
    match e {
        StreamedError::OutOfOrder(what) => SourceError::Stream { lsn: at, what },
        StreamedError::Io { what, dir, source } => SourceError::Spill { what, dir, source },
    }
}

#[cfg(test)]
mod tests;
